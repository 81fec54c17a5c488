"""Packed sequences at varying lengths: how many graphs compile, how many at an exact
shape, and whether the losses are eager torch's.

    python benchmarks/varying_text.py [--steps 24] [--only lstm,tagger] [--write]

Two small recurrent models as NLP code writes them, trained unmodified with SGD on batches
of 8 token sequences padded with id 0 to the longest in the batch, whose longest length
(uniform in [16, 64], seed 0) and each row's length (uniform up to it) change every step.
Nothing is marked dynamic: the runtime's automatic dynamic learns which sizes vary.

* ``lstm``: a classifier: embedding, ``pack_padded_sequence`` (lengths counted from the
  ids, ``(ids != 0).sum(1).cpu()``, unsorted), an LSTM, the last layer's final state, a
  linear head;
* ``tagger``: a tagger: embedding, packing, a two-layer bidirectional GRU,
  ``pad_packed_sequence``, a per-token linear head, cross entropy over the true tokens
  (``ignore_index`` on the padding).

The number of packed rows, ``sum(lengths)``, changes every step. Reported per model:
steps, compiles, exact-shape compiles among them, the largest relative difference of a
loss from eager torch's, the median step of each (lazy_runtime's includes its compiles).
torch uses one intra-op thread.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


HEADING = "## Packed sequences at varying lengths"
VOCAB, CLASSES, TAGS = 100, 4, 6


def _packed(emb, ids):
    lengths = (ids != 0).sum(1).cpu()
    return pack_padded_sequence(emb(ids), lengths, batch_first=True, enforce_sorted=False)


class Classifier(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.rnn = nn.LSTM(d, h, batch_first=True)
        self.head = nn.Linear(h, CLASSES)

    def forward(self, ids):
        _, (h, _) = self.rnn(_packed(self.emb, ids))
        return self.head(h[-1])


class Tagger(nn.Module):
    def __init__(self, d=32, h=32):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.rnn = nn.GRU(d, h, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * h, TAGS)

    def forward(self, ids):
        out, _ = self.rnn(_packed(self.emb, ids))
        return self.head(pad_packed_sequence(out, batch_first=True)[0])


MODELS = {"lstm": Classifier, "tagger": Tagger}


def ragged_ids(rng, g, rows: int, longest: tuple, shortest: int, vocab: int) -> tuple:
    """(ids, padding mask) of ``rows`` token sequences padded with id 0 to the longest,
    whose length is drawn from ``rng`` in ``longest`` (a range) and the others' from
    ``shortest`` up to it; the ids from generator ``g``, in [1, vocab)
    (``varying_hf.py`` too)."""
    T = rng.randint(*longest)
    lengths = [T] + [rng.randint(shortest, T) for _ in range(rows - 1)]
    ids = torch.randint(1, vocab, (rows, T), generator=g)
    pad = torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]
    return ids.masked_fill(pad, 0), pad


def _batches(steps: int, tagged: bool) -> list:
    rng = random.Random(0)
    out = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        ids, pad = ragged_ids(rng, g, 8, (16, 64), 1, VOCAB)
        T = ids.shape[1]
        if tagged:
            y = torch.randint(0, TAGS, (8, T), generator=g).masked_fill(pad, -100)
        else:
            y = torch.randint(0, CLASSES, (8,), generator=g)
        out.append((ids, y))
    return out


def _loss(out, ids, y):
    return F.cross_entropy(out.flatten(0, -2), y.flatten(), ignore_index=-100)


def run(name: str, steps: int) -> dict:
    from varying_vision import side_by_side
    return side_by_side(MODELS[name], _loss, _batches(steps, name == "tagger"), lambda x: x)


def main():
    from varying_vision import main as sizes_main
    sizes_main(__doc__, MODELS, run, 24, HEADING, lambda steps: (
        f"`python benchmarks/varying_text.py --steps {steps} --write`: two small recurrent "
        "models over packed sequences trained unmodified (SGD, batches of 8) at lengths "
        "drawn each step (the longest uniform in [16, 64], the others up to it), nothing "
        "marked dynamic; each against eager torch in the same loop. See the script's "
        "docstring for the models."))


if __name__ == "__main__":
    main()
