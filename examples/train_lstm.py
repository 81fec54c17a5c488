"""Train a small LSTM language model (embedding, 2-layer LSTM, linear head) on the lazy
device. Synthetic sequences: arithmetic progressions modulo the vocabulary, each with its
own start and stride, so the next token is predictable from context.

    python examples/train_lstm.py [--steps N]
"""

import argparse

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
    import lazy_runtime as lr
    losses = []
    for step in range(first_step, first_step + steps):
        x, y = make_batch(step)
        if device is not None:
            x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if device is not None:
            lr.mark_step()
        losses.append(loss)
    return [float(l.item()) for l in losses]


def main(steps=30):
    import lazy_runtime as lr
    dev = lr.device()
    model = make_model().to(dev)
    opt = make_optimizer(model)
    losses = train(model, opt, steps, dev)
    for i in range(0, steps, max(1, steps // 10)):
        print(f"step {i:4d}  loss {losses[i]:.4f}")
    print(f"output: final loss {losses[-1]:.4f} after {steps} steps")
    print(lr.metrics_report())


__shapeinfer__ = {
    "model": "LSTMLM(vocab=32, emb=16, hidden=32, layers=2)",
    "inputs": {"tokens": "int64[B, T]<32"},
    "sizes": {"B": 2, "T": 12},
    "oracle_sizes": [{"B": 1, "T": 5}, {"B": 3, "T": 1}, {"B": 4, "T": 9}],
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    main(parser.parse_known_args()[0].steps)
