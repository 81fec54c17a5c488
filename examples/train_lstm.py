"""Train a small LSTM language model (embedding, 2-layer LSTM, linear head) on the lazy
device. Synthetic sequences: arithmetic progressions modulo the vocabulary, each with its
own start and stride, so the next token is predictable from context.

    python examples/train_lstm.py [--steps N]
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class LSTMLM(nn.Module):
    def __init__(self, vocab=32, emb=16, hidden=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        logits = self.head(h)
        return logits


def make_model(seed=0):
    torch.manual_seed(seed)
    return LSTMLM()


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-2)


def make_batch(step, batch=8, length=12, vocab=32):
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    seq = (start + stride * torch.arange(length + 1)) % vocab
    return seq[:, :-1], seq[:, 1:]


def loss_fn(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train(model, opt, steps, device=None, first_step=0):
    """Plain PyTorch training; ``device`` is the lazy device (None: eager on the CPU)."""
    from lazy_runtime.training import train_steps

    return train_steps(model, opt, make_batch, loss_fn, steps, device, first_step)


__shapeinfer__ = {
    "model": "LSTMLM(vocab=32, emb=16, hidden=32, layers=2)",
    "inputs": {"tokens": "int64[B, T]<32"},
    "sizes": {"B": 2, "T": 12},
    "oracle_sizes": [{"B": 1, "T": 5}, {"B": 3, "T": 1}, {"B": 4, "T": 9}],
}


if __name__ == "__main__":
    from lazy_runtime.training import run_demo

    run_demo(__doc__, 30, make_model, make_optimizer, make_batch, loss_fn)
