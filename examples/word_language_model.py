"""Word-level language models over time-major token ids [T, B]:

- ``RNNModel``: embedding, dropout, a multi-layer LSTM/GRU/RNN and a linear decoder,
  flattened to ``[T * B, ntoken]`` log-probabilities. The initial hidden state is
  built inside ``forward`` by ``init_hidden`` from the batch size when none is given.
- ``TransformerModel``: embedding scaled by ``sqrt(ninp)``, sinusoidal positions from
  a registered ``pe`` buffer sliced to the sequence length, a causal mask built from
  ``len(src)``, and an ``nn.TransformerEncoder``.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            except KeyError as e:
                raise ValueError("rnn_type must be one of LSTM, GRU, RNN_TANH, RNN_RELU") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("tied weights need nhid == ninp")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden=None):
        if hidden is None:
            hidden = self.init_hidden(input.size(1))
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Adds fixed sine/cosine position signals to a [T, B, d_model] input."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)  # [max_len, 1, d_model]
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    """Container module with an encoder, a transformer encoder stack, and a decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.model_type = "Transformer"
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers,
                                                         enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        # 0 on and below the diagonal, -inf above it: position i sees positions <= i
        return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            src_mask = None
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


__shapeinfer__ = [
    {
        "model": "RNNModel('LSTM', ntoken=50, ninp=16, nhid=24, nlayers=2, dropout=0.2)",
        "inputs": {"input": "int64[T, B]<50"},
        "sizes": {"T": 12, "B": 3},
        "oracle_sizes": [{"T": 5, "B": 2}, {"T": 20, "B": 4}, {"T": 1, "B": 1}],
    },
    {
        "model": "TransformerModel(ntoken=50, ninp=32, nhead=2, nhid=64, nlayers=2, dropout=0.2)",
        "inputs": {"src": "int64[T, B]<50"},
        "sizes": {"T": 12, "B": 3},
        "oracle_sizes": [{"T": 5, "B": 2}, {"T": 20, "B": 4}, {"T": 7, "B": 1}],
    },
]


if __name__ == "__main__":
    tokens = torch.randint(0, 50, (12, 3))
    rnn = RNNModel("LSTM", ntoken=50, ninp=16, nhid=24, nlayers=2, dropout=0.2).eval()
    transformer = TransformerModel(ntoken=50, ninp=32, nhead=2, nhid=64, nlayers=2, dropout=0.2).eval()
    with torch.no_grad():
        log_probs, (h, c) = rnn(tokens)
        out = transformer(tokens)
    print("RNNModel output:", tuple(log_probs.shape), "hidden:", tuple(h.shape), tuple(c.shape))
    print("TransformerModel output:", tuple(out.shape))
