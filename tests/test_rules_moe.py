"""Mixture-of-experts kernels against torch: torch._grouped_mm / F.grouped_mm in each
2-d/3-d combination and torch.histc, with symbolic sizes, and transformers' own
grouped-experts forward (integrations/moe.py) end to end."""

import pytest
import torch
import torch.nn.functional as F

from rule_harness import Input, check, check_error


def _offsets(n_tokens, groups, gen=None):
    """int32 group ends: sorted cut points of ``n_tokens`` rows into ``groups`` groups."""
    cuts = torch.randint(0, n_tokens + 1, (groups - 1,), generator=gen).sort().values
    return torch.cat([cuts, torch.tensor([n_tokens])]).to(torch.int32)


def grouped(a2, a3, b2, b3, offs_m, offs_k, offs_n):
    x = torch._grouped_mm(a2, b3, offs=offs_m)  # [M, K] x [G, K, N]
    y = torch._grouped_mm(a3, b2, offs_n)  # [G, M, K] x [K, N], N cut
    z = torch._grouped_mm(a3, b3)  # [G, M, K] x [G, K, N]
    w = torch._grouped_mm(a2, b2, offs=offs_k)  # [M, K] x [K, N], K cut
    v = F.grouped_mm(a2, b3, offs=offs_m)
    u = torch._grouped_mm(a2, b3.transpose(-2, -1).contiguous().transpose(-2, -1), offs=offs_m)
    t = torch._grouped_mm(a2, b3, offs=offs_m, out_dtype=a2.dtype)
    return x


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=str)
def test_grouped_mm(dt):
    # the CPU kernel wants 16-byte aligned strides: K and N are multiples of 8
    sizes = [{"M": m, "G": g, "K": k, "N": n} for m, g, k, n in
             [(10, 3, 8, 16), (7, 2, 16, 8), (13, 4, 24, 32), (1, 5, 8, 24)]]

    def offs(dim_name, groups_name):
        return Input((groups_name,), torch.int32,
                     make=lambda shape, gen: _offsets(_SIZES[dim_name], shape[0], gen))

    global _SIZES
    for s in sizes:  # one check per size set: the offsets depend on the sizes
        _SIZES = s
        inputs = {"a2": Input(("M", "K"), dt), "a3": Input(("G", "M", "K"), dt), "b2": Input(("K", "N"), dt),
                  "b3": Input(("G", "K", "N"), dt), "offs_m": offs("M", "G"), "offs_k": offs("K", "G"),
                  "offs_n": offs("N", "G")}
        check(grouped, inputs, [s])


_SIZES = {}


def histograms(x, ids):
    a = torch.histc(x, bins=x.shape[-1], min=0, max=3)
    b = torch.histc(x.double())
    c = ids.float().histc(5, 0, 4)
    d = torch.histc(x.bfloat16(), bins=7)
    e = torch.cumsum(torch.histc(ids.float(), bins=x.shape[0], min=0, max=x.shape[0] - 1), dim=0,
                     dtype=torch.int32)
    return a


def test_histc():
    check(histograms, {"x": ("B", "T"), "ids": Input(("B", "T"), torch.int64, high=5)},
          {"B": (1, 6), "T": (1, 9)})


def grouped_mm_k_mismatch(a, b, offs):
    y = torch._grouped_mm(a, b, offs=offs)  # error: SI130
    return y


def grouped_mm_int64_offs(a, b, offs):
    y = torch._grouped_mm(a, b, offs=offs.long())  # error: SI160
    return y


def grouped_mm_3d_with_offs(a, b, offs):
    y = torch._grouped_mm(a.unsqueeze(0).expand(3, -1, -1).contiguous(), b, offs=offs)  # error: SI007
    return y


def grouped_mm_double(a, b, offs):
    y = torch._grouped_mm(a.double(), b.double(), offs=offs)  # error: SI160
    return y


def histc_no_bins(a, b, offs):
    y = torch.histc(a, bins=0)  # error: SI143
    return y


@pytest.mark.parametrize("model,b_dims", [(grouped_mm_k_mismatch, (3, 16, 8)), (grouped_mm_int64_offs, (3, 8, 16)),
                                          (grouped_mm_3d_with_offs, (3, 8, 16)), (grouped_mm_double, (3, 8, 16)),
                                          (histc_no_bins, (3, 8, 16))],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_grouped_mm_errors(model, b_dims):
    inputs = {"a": ("M", 8), "b": b_dims,
              "offs": Input((3,), torch.int32, make=lambda shape, gen: torch.tensor([2, 5, 10], dtype=torch.int32))}
    check_error(model, inputs, {"M": 10})


class _MixtralMoE(torch.nn.Module):
    """transformers' Mixtral experts dispatched to integrations/moe.py's grouped_mm
    forward (sort, histc, cumsum, _grouped_mm), with weights 16-byte aligned for the
    CPU kernel."""

    def __init__(self, implementation):
        super().__init__()
        transformers = pytest.importorskip("transformers")
        from transformers.models.mixtral.modeling_mixtral import MixtralExperts

        config = transformers.MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=4)
        config._experts_implementation = implementation
        self.experts = MixtralExperts(config)
        torch.nn.init.normal_(self.experts.gate_up_proj)
        torch.nn.init.normal_(self.experts.down_proj)

    def forward(self, x, top_k_index, top_k_weights):
        y = self.experts(x, top_k_index, top_k_weights)
        z = y + x
        return z


@pytest.mark.parametrize("implementation", ["grouped_mm", "batched_mm"])
def test_transformers_grouped_experts(implementation):
    inputs = {"x": ("S", 16), "top_k_index": Input(("S", 2), torch.int64, high=4),
              "top_k_weights": ("S", 2)}
    check(_MixtralMoE(implementation), inputs, {"S": (1, 12)})
