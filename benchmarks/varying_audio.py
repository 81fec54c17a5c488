"""Audio at varying lengths: how many graphs compile, how many at an exact shape, and
whether the losses are eager torch's.

    python benchmarks/varying_audio.py [--steps 16] [--only stft,frames,ctc] [--write]

Three small models of raw signals, trained unmodified with SGD on batches of 2 signals
whose length changes every step (drawn uniform in [400, 900], seed 0; the length marked
dynamic with ``lr.mark_dynamic``, power-of-two buckets):

* ``stft``: a log power spectrogram in the model (``torch.stft``, n_fft 64, hop 16,
  centred: reflection padding, frames cut by ``as_strided``), two convolutions over the
  frames, their mean, a linear head (Whisper's and many keyword spotters' front end);
* ``frames``: frames of 32 every 16 samples by ``Tensor.unfold``, a linear map of each,
  their mean, a linear head;
* ``ctc``: a speech recognizer's shape: frames by a strided convolution, a bidirectional
  GRU, per-frame log-probabilities, CTC loss against label sequences of 3 to 10 labels
  (padded to the batch's longest, which changes too: automatic dynamic learns it).

Reported per model: steps, compiles, exact-shape compiles among them, the largest relative
difference of a loss from eager torch's, the median step of each (lazy_runtime's includes
its compiles). torch uses one intra-op thread.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import lazy_runtime as lr  # noqa: E402

HEADING = "## Audio at varying lengths"


class Spectrogram(nn.Module):
    def __init__(self, n_fft=64, hop=16, c=16, classes=4):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.c1 = nn.Conv1d(n_fft // 2 + 1, c, 3, padding=1)
        self.c2 = nn.Conv1d(c, c, 3, stride=2, padding=1)
        self.head = nn.Linear(c, classes)

    def forward(self, wav):
        s = torch.stft(wav, self.n_fft, self.hop, window=self.window, return_complex=True)
        h = F.relu(self.c2(F.relu(self.c1((s.abs() ** 2 + 1e-6).log()))))
        return self.head(h.mean(-1))


class Frames(nn.Module):
    def __init__(self, size=32, step=16, d=16, classes=4):
        super().__init__()
        self.size, self.step = size, step
        self.proj = nn.Linear(size, d)
        self.head = nn.Linear(d, classes)

    def forward(self, wav):
        h = torch.tanh(self.proj(wav.unfold(-1, self.size, self.step)))
        return self.head(h.mean(1))


class Recognizer(nn.Module):
    """Frames by a strided convolution, a bidirectional GRU, per-frame log-probabilities
    of ``LABELS`` labels (0 the blank)."""

    def __init__(self, c=16, h=16):
        super().__init__()
        self.conv = nn.Conv1d(1, c, 32, stride=16)
        self.rnn = nn.GRU(c, h, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * h, LABELS)

    def forward(self, wav):
        h = F.relu(self.conv(wav[:, None])).transpose(1, 2)
        return self.head(self.rnn(h)[0]).log_softmax(-1)


LABELS = 6
MODELS = {"stft": Spectrogram, "frames": Frames, "ctc": Recognizer}


def _ctc(out, wav, labels):
    """CTC against label sequences padded with 0 (each row's length counted from them,
    on the device, as the frames' on the host)."""
    frames = torch.full((out.shape[0],), out.shape[1], dtype=torch.long)
    return F.ctc_loss(out.transpose(0, 1), labels, frames, (labels != 0).sum(1).cpu())


def run(name: str, steps: int) -> dict:
    from varying_vision import side_by_side
    rng = random.Random(0)
    batches = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        wav = torch.randn(2, rng.randint(400, 900), generator=g)
        if name == "ctc":   # label sequences of 3 to 10, padded to the batch's longest
            n = [rng.randint(3, 10) for _ in range(2)]
            y = torch.randint(1, LABELS, (2, max(n)), generator=g)
            y[torch.arange(max(n))[None, :] >= torch.tensor(n)[:, None]] = 0
        else:
            y = torch.randint(0, 4, (2,), generator=g)
        batches.append((wav, y))
    loss = _ctc if name == "ctc" else lambda out, x, y: F.cross_entropy(out, y)
    return side_by_side(MODELS[name], loss, batches, lambda x: lr.mark_dynamic(x, 1, "T"))


def main():
    from varying_vision import main as sizes_main
    sizes_main(__doc__, MODELS, run, 16, HEADING, lambda steps: (
        f"`python benchmarks/varying_audio.py --steps {steps} --write`: three small "
        "models of raw signals trained unmodified (SGD, batches of 2) at lengths drawn "
        "uniform in [400, 900] each step, the length marked dynamic (power-of-two buckets); "
        "each against eager torch in the same loop. See the script's docstring for the "
        "models."))


if __name__ == "__main__":
    main()
