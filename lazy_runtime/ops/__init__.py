"""Rules and lowerings, one module per family of ops; importing registers them all."""

from . import elementwise, reduction, layout, linalg, nn, random_ops, foreach  # noqa: F401
from . import resample  # noqa: F401
from . import complex_ops, fft  # noqa: F401  (complex dtypes, the FFT)
from . import recurrent  # noqa: F401  (nn.LSTM, nn.GRU, nn.RNN: one op per layer)
from . import attention  # noqa: F401  (the fused kernels of the transformer fast path)
from . import special  # noqa: F401  (torch.special, digamma, polygamma, frexp & co.)
from . import optim  # noqa: F401  (GradScaler's ops, fused optimizers)
from . import padding  # noqa: F401  (after the others: it reads ELEMENTWISE)
from . import kernel_dtypes  # noqa: F401  (last: it wraps the others' rules)
from .registry import LOWERINGS, RULES, has_lowering  # noqa: F401
