"""Recurrent layers and cells, multi-head attention, scaled_dot_product_attention and
transformer layers against torch."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rule_harness import check

SIZES = {"B": (1, 4), "T": (1, 7), "S": (2, 6)}


class RNNs(nn.Module):
    def __init__(self, batch_first, bidirectional, num_layers):
        super().__init__()
        kw = dict(batch_first=batch_first, bidirectional=bidirectional, num_layers=num_layers)
        self.rnn = nn.RNN(5, 6, **kw)
        self.lstm = nn.LSTM(5, 4, **kw)
        self.gru = nn.GRU(5, 3, **kw)
        self.proj = nn.LSTM(5, 6, proj_size=2, **kw)
        self.dirs = (2 if bidirectional else 1) * num_layers

    def forward(self, x):
        out, h = self.rnn(x)
        lo, (lh, lc) = self.lstm(x)
        go, gh = self.gru(x)
        po, (ph, pc) = self.proj(x)
        b = x.shape[0] if self.rnn.batch_first else x.shape[1]
        h0 = torch.zeros(self.dirs, b, 4)
        c0 = torch.zeros(self.dirs, b, 4)
        lo2, state = self.lstm(x, (h0, c0))
        g0 = torch.zeros(self.dirs, b, 3)
        go2, gh2 = self.gru(x, g0)
        last = lo[:, -1] if self.rnn.batch_first else lo[-1]
        u_out, u_h = self.gru(x[0])
        return out


@pytest.mark.parametrize("batch_first,bidirectional,num_layers",
                         [(False, False, 1), (True, False, 2), (False, True, 1), (True, True, 2)])
def test_rnn_lstm_gru(batch_first, bidirectional, num_layers):
    check(RNNs(batch_first, bidirectional, num_layers), {"x": ("B", "T", 5) if batch_first else ("T", "B", 5)},
          SIZES)


class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNNCell(5, 6)
        self.lstm = nn.LSTMCell(5, 4)
        self.gru = nn.GRUCell(5, 3)

    def forward(self, x):
        h = self.rnn(x[0])
        hx, cx = self.lstm(x[0])
        g = self.gru(x[0])
        outs = []
        for t in range(x.shape[0]):
            hx, cx = self.lstm(x[t], (hx, cx))
            outs.append(hx)
        y = torch.stack(outs, 0)
        u = self.gru(x[0, 0])
        return y


def test_cells():
    check(Cells(), {"x": ("T", "B", 5)}, SIZES)


class MHA(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        self.cross = nn.MultiheadAttention(8, 4, kdim=6, vdim=5, batch_first=batch_first)

    def forward(self, q, k, v):
        a, w = self.attn(q, q, q)
        b, wh = self.attn(q, q, q, average_attn_weights=False)
        c, none = self.attn(q, q, q, need_weights=False)
        d, wd = self.cross(q, k, v)
        e = self.attn(q, q, q)[0]
        n = q.shape[1] if self.attn.batch_first else q.shape[0]
        mask = torch.zeros(n, n, dtype=torch.bool)
        f, wf = self.attn(q, q, q, attn_mask=mask)
        return a


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first):
    if batch_first:
        inputs = {"q": ("B", "T", 8), "k": ("B", "S", 6), "v": ("B", "S", 5)}
    else:
        inputs = {"q": ("T", "B", 8), "k": ("S", "B", 6), "v": ("S", "B", 5)}
    check(MHA(batch_first), inputs, SIZES)


def test_multihead_attention_unbatched():
    check(MHA(False), {"q": ("T", 8), "k": ("S", 6), "v": ("S", 5)}, SIZES)


def sdpa(q, k, v, m):
    a = F.scaled_dot_product_attention(q, k, v)
    b = F.scaled_dot_product_attention(q, k, v, is_causal=False, attn_mask=m)
    c = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, scale=0.5)
    d = F.scaled_dot_product_attention(q[0], k[0], v[0])
    return a


def test_scaled_dot_product_attention():
    check(sdpa, {"q": ("B", "H", "T", 4), "k": ("B", "H", "S", 4), "v": ("B", "H", "S", "E"),
                 "m": ("T", "S")}, {"B": (1, 3), "H": (1, 3), "T": (1, 6), "S": (2, 7), "E": (1, 5)})


class Transformers(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        kw = dict(dim_feedforward=16, dropout=0.0, batch_first=batch_first)
        self.enc_layer = nn.TransformerEncoderLayer(8, 2, **kw)
        self.dec_layer = nn.TransformerDecoderLayer(8, 2, **kw)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, **kw), 2, enable_nested_tensor=False)
        self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, **kw), 2)
        self.tr = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=batch_first)

    def forward(self, src, tgt):
        a = self.enc_layer(src)
        b = self.dec_layer(tgt, a)
        c = self.enc(src)
        d = self.dec(tgt, c)
        e = self.tr(src, tgt)
        n = tgt.shape[1] if self.tr.batch_first else tgt.shape[0]
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        f = self.dec(tgt, c, tgt_mask=mask)
        return a


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_layers(batch_first):
    if batch_first:
        inputs = {"src": ("B", "S", 8), "tgt": ("B", "T", 8)}
    else:
        inputs = {"src": ("S", "B", 8), "tgt": ("T", "B", 8)}
    check(Transformers(batch_first).eval(), inputs, SIZES)
