"""An SNLI-style natural language inference classifier: embed premise and hypothesis,
encode each with a (bidirectional) LSTM, and classify the combination
``[premise, hypothesis, premise - hypothesis, premise * hypothesis]``.

Dynamic Python on purpose: a ``Batch`` object built inside ``forward``, a config
dataclass driving branches and sizes, ``Bottle`` linear layers that fold the time
dimension into the batch through ``super().forward``, and initial LSTM states
created from ``inputs.size()`` with a chained assignment ``h0 = c0 = ...``.
Inputs are time-major token ids: premise [T1, B] and hypothesis [T2, B].
"""

from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Config:
    n_embed: int = 100  # vocabulary size
    d_embed: int = 16
    d_proj: int = 24
    d_hidden: int = 20
    n_layers: int = 2
    dp_ratio: float = 0.2
    birnn: bool = True
    projection: bool = True
    fix_emb: bool = True
    d_out: int = 3

    @property
    def n_cells(self):
        return self.n_layers * (2 if self.birnn else 1)


@dataclass
class Batch:
    premise: torch.Tensor
    hypothesis: torch.Tensor


class Bottle(nn.Module):
    """Apply a 2-D module to a [T, B, F] input by folding T into the batch."""

    def forward(self, input):
        if len(input.size()) <= 2:
            return super().forward(input)
        size = input.size()[:2]
        out = super().forward(input.view(size[0] * size[1], -1))
        return out.view(size[0], size[1], -1)


class Linear(Bottle, nn.Linear):
    pass


class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        input_size = config.d_proj if config.projection else config.d_embed
        dropout = 0 if config.n_layers == 1 else config.dp_ratio
        self.rnn = nn.LSTM(input_size=input_size, hidden_size=config.d_hidden,
                           num_layers=config.n_layers, dropout=dropout,
                           bidirectional=config.birnn)

    def forward(self, inputs):
        batch_size = inputs.size()[1]
        state_shape = self.config.n_cells, batch_size, self.config.d_hidden
        h0 = c0 = inputs.new_zeros(state_shape)
        outputs, (ht, ct) = self.rnn(inputs, (h0, c0))
        if not self.config.birnn:
            return ht[-1]
        return ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)


class SNLIClassifier(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.n_embed, config.d_embed)
        self.projection = Linear(config.d_embed, config.d_proj)
        self.encoder = Encoder(config)
        self.dropout = nn.Dropout(p=config.dp_ratio)
        self.relu = nn.ReLU()
        seq_in_size = 2 * config.d_hidden
        if self.config.birnn:
            seq_in_size *= 2
        # the features are [premise, hypothesis, difference, product]
        seq_in_size *= 2
        lin_config = [seq_in_size] * 2
        self.out = nn.Sequential(
            Linear(*lin_config),
            self.relu,
            self.dropout,
            Linear(*lin_config),
            self.relu,
            self.dropout,
            Linear(seq_in_size, config.d_out),
        )

    def forward(self, premise, hypothesis):
        batch = Batch(premise=premise, hypothesis=hypothesis)
        prem_embed = self.embed(batch.premise)
        hypo_embed = self.embed(batch.hypothesis)
        if self.config.fix_emb:
            prem_embed = prem_embed.detach()
            hypo_embed = hypo_embed.detach()
        if self.config.projection:
            prem_embed = self.relu(self.projection(prem_embed))
            hypo_embed = self.relu(self.projection(hypo_embed))
        premise = self.encoder(prem_embed)
        hypothesis = self.encoder(hypo_embed)
        features = torch.cat([premise, hypothesis, premise - hypothesis, premise * hypothesis], 1)
        scores = self.out(features)
        return scores


__shapeinfer__ = {
    "model": "SNLIClassifier(Config())",
    "inputs": {"premise": "int64[T1, B]<100", "hypothesis": "int64[T2, B]<100"},
    "sizes": {"T1": 9, "T2": 6, "B": 3},
    "oracle_sizes": [
        {"T1": 4, "T2": 7, "B": 2},
        {"T1": 12, "T2": 3, "B": 5},
        {"T1": 1, "T2": 2, "B": 1},
    ],
}


if __name__ == "__main__":
    model = SNLIClassifier(Config()).eval()
    with torch.no_grad():
        scores = model(torch.randint(0, 100, (9, 3)), torch.randint(0, 100, (6, 3)))
    print("output:", tuple(scores.shape))
