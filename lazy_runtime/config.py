"""Runtime settings. Change them through ``lazy_runtime.config``; they are read at use."""

from __future__ import annotations

import os
import re
import warnings


def _env_int(name: str, default: int) -> int:
    """A positive integer setting from the environment; a bad value is a warning naming
    it, and the default is used (a typo in a variable should not stop a training run)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        warnings.warn(f"{name}={raw!r} is not a positive integer: using {default}",
                      RuntimeWarning, stacklevel=3)
        return default
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """A yes/no setting from the environment (1/true/yes/on, 0/false/no/off, any case);
    anything else is a warning naming it, and the default is used (``=n`` must not turn
    index checks off by accident)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    warnings.warn(f"{name}={raw!r} is not one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}: "
                  f"using {'1' if default else '0'}", RuntimeWarning, stacklevel=3)
    return default


def parse_buckets(text: str):
    """A bucket policy from its spelling in ``LAZY_RUNTIME_BUCKETS``: ``pow2``, ``off``,
    sizes (``16,32,64``), or a policy per symbol (``B=16;T=pow2;*=off``). ValueError for
    anything else."""
    text = text.strip()
    if "=" not in text:
        return _one_policy(text)
    policies = {}
    for part in filter(str.strip, text.split(";")):
        name, eq, policy = part.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"{part.strip()!r} is not NAME=POLICY")
        policies[name.strip()] = _one_policy(policy)
    return policies


def _one_policy(text: str):
    text = text.strip()
    if text in ("pow2", "off"):
        return text
    try:
        sizes = sorted(int(v) for v in text.split(","))
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise ValueError(f"{text!r} is not pow2, off or a list of positive sizes")
    return sizes


def parse_options(text: str) -> dict:
    """XLA options from ``name=value name=value`` (or ``;`` between them: a value may hold
    commas, ``xla_gpu_enable_command_buffer=FUSION,CUBLAS``): true/false are bools, numbers
    numbers, the rest strings. ValueError for an item that is not ``name=value``."""
    options = {}
    for item in re.split(r"[;\s]+", text.strip()):
        if not item:
            continue
        name, eq, raw = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"{item.strip()!r} is not name=value")
        options[name.strip().lstrip("-")] = _option_value(raw.strip())   # (--xla_..: as XLA_FLAGS)
    return options


def _option_value(raw: str):
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def cache_folder() -> str:
    """The runtime's cache folder: ``LAZY_RUNTIME_CACHE_DIR``, else ``lazy_runtime`` in
    ``$XDG_CACHE_HOME`` or ``~/.cache`` (the C++ device guard's build, compiled
    executables)."""
    return os.environ.get("LAZY_RUNTIME_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "lazy_runtime")


def default_compile_cache() -> str:
    """Where compiled executables are kept between processes unless told otherwise:
    ``xla`` in the runtime's cache folder."""
    return os.path.join(cache_folder(), "xla")


def parse_compile_cache(text: str):
    """``LAZY_RUNTIME_COMPILE_CACHE``: a directory, ``off`` (or 0/false/no: None, no disk
    cache), or ``on`` (1/true/yes: the default directory)."""
    value = text.strip()
    if value.lower() in _FALSE:
        return None
    if not value or value.lower() in _TRUE:
        return default_compile_cache()
    return os.path.expanduser(value)


def _env_parsed(name: str, parse, default, fallback: str):
    """Environment variable ``name`` through ``parse``; unset, ``default``; a value
    ``parse`` refuses (ValueError) is a warning naming it, and ``default``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError as e:
        warnings.warn(f"{name}={raw!r}: {e}; {fallback}", RuntimeWarning, stacklevel=3)
        return default


class Config:
    def __init__(self):
        # Compiled executables kept (LRU). Each costs memory on the device and 0.3-1 s to rebuild.
        self.cache_size: int = _env_int("LAZY_RUNTIME_CACHE_SIZE", 64)
        # Ops forced to run eagerly in torch even if they have a lowering (tests, debugging).
        self.force_fallback: set = set()
        # JAX platform to run on: None picks jax's default device (``jax_default_device``
        # where set, else "gpu" if present).
        self.platform: str | None = os.environ.get("LAZY_RUNTIME_PLATFORM") or None
        # Keep this many recompile reasons in metrics (the newest).
        self.max_reasons: int = 100
        # Bucket policy for dynamic dims: "pow2" (next power of two), a list of sizes
        # (the smallest that fits), or "off" (every shape compiles on its own: classic
        # LazyTensor). Sizes above ``max_bucket`` are not padded (one compile per size).
        # A dict gives each symbol its own policy: {"B": [16], "T": "pow2"} ("*": the rest).
        self.buckets = _env_parsed("LAZY_RUNTIME_BUCKETS", parse_buckets, "pow2", "using pow2")
        self.max_bucket: int = _env_int("LAZY_RUNTIME_MAX_BUCKET", 8192)
        # Make dims dynamic when a graph comes back with only some input sizes changed.
        self.automatic_dynamic: bool = True
        # Fill the padding of inputs padded on the host with NaN (floats), a large number
        # (ints) or True instead of zeros: a test of the padding rules (a value that
        # reads the padding shows it), never needed otherwise (results are the same).
        self.poison_padding: bool = env_flag("LAZY_RUNTIME_POISON_PADDING", False)
        # Read the ``info`` of inv, solve, cholesky & co. to raise torch's error for a singular
        # or non-positive-definite input: a device->host barrier inside each graph that uses
        # them. Off, their results hold inf/NaN instead, as on XLA devices.
        self.check_linalg_errors: bool = env_flag("LAZY_RUNTIME_CHECK_LINALG_ERRORS", False)
        # Check indices on the device (out of bounds: IndexCheckError at the next read)
        # where XLA would clamp them. Read when a graph compiles. Costs one small output and
        # its read per graph with indexing ops (10-20 us a step on this CPU).
        self.check_indices: bool = env_flag("LAZY_RUNTIME_CHECK_INDICES", True)
        # Refuse a compiled graph that needs more memory than its device has free (its
        # scratch and results, as XLA counts them): DeviceMemoryError at the barrier, not
        # a process killed for memory. Read when a graph compiles.
        self.check_memory: bool = env_flag("LAZY_RUNTIME_CHECK_MEMORY", True)
        # Let XLA keep 16-bit intermediates in float32 between fused ops (faster on a GPU,
        # but not torch's rounding: results can differ from torch by an ulp or, across a
        # rounding boundary such as trunc, by more). Read when a graph compiles.
        self.excess_precision: bool = env_flag("LAZY_RUNTIME_EXCESS_PRECISION", False)
        # XLA compiler options of the runtime's own compiles (the user's JAX code keeps its
        # own), e.g. {"xla_gpu_graph_min_graph_size": 1}; they win over the settings above.
        # Env: LAZY_RUNTIME_XLA_OPTIONS="name=value name=value". Read when a graph compiles.
        self.compiler_options: dict = _env_parsed("LAZY_RUNTIME_XLA_OPTIONS", parse_options, {},
                                                  "no options used")
        # Directory of compiled executables kept between processes (JAX's persistent
        # compilation cache): a graph compiled by an earlier run is loaded instead of
        # compiled. None: no disk cache. Env: LAZY_RUNTIME_COMPILE_CACHE (a directory, or
        # off). Read at each compile; the first directory a process uses stays its cache.
        self.compile_cache: str | None = _env_parsed(
            "LAZY_RUNTIME_COMPILE_CACHE", parse_compile_cache, default_compile_cache(), "")
        # Freeze Python's heap (gc.freeze) at the first mark_step after the first full
        # garbage collection, so later full collections skip it (see ``heap``).
        self.freeze_heap: bool = env_flag("LAZY_RUNTIME_FREEZE_HEAP", True)
        # No automatic garbage collection inside a barrier or a whole step's trace (its
        # objects would be moved to the oldest generation; see ``heap.paused``).
        self.pause_gc: bool = env_flag("LAZY_RUNTIME_PAUSE_GC", True)

    def jax_device(self):
        import jax
        if self.platform:
            try:
                return jax.devices(self.platform)[0]
            except RuntimeError as e:
                from .errors import LazyRuntimeError
                raise LazyRuntimeError(
                    f"lazy_runtime.config.platform is {self.platform!r} (or env "
                    f"LAZY_RUNTIME_PLATFORM), which jax cannot use here: {e}") from None
        default = jax.config.jax_default_device   # a device, a platform's name or None
        if isinstance(default, str):
            return jax.devices(default)[0]
        return default or jax.devices()[0]


config = Config()
