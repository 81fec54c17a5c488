"""transformers' ViT fine-tuned at image sizes that change every step, nothing marked:
its class token's gradient comes back through a select scattered into zeros that the pass
lays out by guessing; the layer norm's backward checks that its gradient, input and
statistics agree (a wrong guess withdrawn, not a padded lowering that fails and compiles
at the exact shape). Losses and gradients against eager torch, one compile."""

import copy

import pytest
import torch

import lazy_runtime as lr
from conftest import DEV, assert_grads_same


def test_a_vit_at_varying_image_sizes_compiles_once_per_bucket():
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=37, image_size=16, patch_size=4,
                                    num_labels=3)
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config).eval()
    lazy = copy.deepcopy(model).to(DEV)
    lr.mark_step()
    lr.reset_metrics()
    for H, W in ((48, 48), (24, 40), (56, 52), (48, 40), (52, 44)):
        g = torch.Generator().manual_seed(H)
        x, y = torch.randn(2, 3, H, W, generator=g), torch.tensor([0, 2])
        want = model(pixel_values=x, labels=y, interpolate_pos_encoding=True).loss
        want.backward()
        xl = x.to(DEV)
        got = lazy(pixel_values=xl, labels=y.to(DEV), interpolate_pos_encoding=True).loss
        got.backward()
        lr.mark_step()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
        assert_grads_same(model, lazy, 1e-4, 1e-5, f"at {H}x{W}")
    m = lr.metrics()
    # (the first size as it is; from the second on, padded: a new bucket of H at 56)
    assert m["exact_compiles"] == {} and m["compiles"] == 3, m["recompile_reasons"]
