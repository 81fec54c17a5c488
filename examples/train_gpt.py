"""Train a small GPT-style language model on the lazy device: token and position
embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final
LayerNorm and a head tied to the token embedding. Random weights, synthetic data
(arithmetic progressions modulo the vocabulary: learnable in context).

    python examples/train_gpt.py [--steps N]
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads, block, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        out = self.drop(self.proj(y))
        return out


class Block(nn.Module):
    def __init__(self, d_model, heads, block, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, block, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=64, block=16, d_model=32, heads=4, layers=2, dropout=0.1,
                 tie_weights=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, heads, block, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        if tie_weights:
            self.head.weight = self.tok.weight
        for emb in (self.tok, self.pos):
            nn.init.normal_(emb.weight, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return logits


def make_model(seed=0, dropout=0.1):
    torch.manual_seed(seed)
    return GPT(dropout=dropout)


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def make_batch(step, batch=8, length=16, vocab=64):
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 5, (batch, 1), generator=g)
    seq = (start + stride * torch.arange(length + 1)) % vocab
    return seq[:, :-1], seq[:, 1:]


def loss_fn(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train(model, opt, steps, device=None, first_step=0):
    """Plain PyTorch training; ``device`` is the lazy device (None: eager on the CPU)."""
    from lazy_runtime.training import train_steps

    return train_steps(model, opt, make_batch, loss_fn, steps, device, first_step)


__shapeinfer__ = {
    "model": "GPT(vocab=64, block=16, d_model=32, heads=4, layers=2, dropout=0.1)",
    "inputs": {"idx": "int64[B, T]<64"},
    "sizes": {"B": 2, "T": 12},
    "oracle_sizes": [{"B": 1, "T": 5}, {"B": 3, "T": 16}, {"B": 4, "T": 1}],
}


if __name__ == "__main__":
    from lazy_runtime.training import run_demo

    run_demo(__doc__, 30, make_model, make_optimizer, make_batch, loss_fn)
