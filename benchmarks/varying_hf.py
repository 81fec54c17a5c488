"""Transformers' models fine-tuned at sizes that change every batch (text padded to each
batch's longest, as a data collator pads it; images of varying size): how many graphs
compile, how many at an exact shape, and whether the losses are eager torch's.

    python benchmarks/varying_hf.py [--steps 8] [--only gpt2,mixtral,vit] [--write]

The text models of ``runtime_hf_sweep.py`` and its vision classifiers (tiny configs,
random weights, eval mode: no dropout, whose draws differ from torch's) trained
unmodified with SGD (0.05). Text: batches of 4 sequences whose longest length (uniform in
[12, 60], seed 0) and each row's length (uniform up to it) change every step:
``input_ids`` padded with 0 and an ``attention_mask``; causal LMs learn the ids (the
padding ``-100``), classifiers a label per row, encoder-decoders a target of its own
length (uniform in [4, 20]). Images: batches of 2 whose H and W are drawn uniform in [24,
64] each step (multiples of 4, the ViTs' patch; ViT resamples its position grid,
``interpolate_pos_encoding``). Audio (Wav2Vec2 and Wav2Vec2-Conformer, a label each):
batches of 2 raw signals whose length is drawn uniform in [240, 640] each step. Nothing
is marked dynamic: the runtime's automatic dynamic
learns which sizes vary. Reported per model: steps, compiles, exact-shape compiles among
them and the ops that forced them, the largest relative difference of a loss from eager
torch's, the median step of each (lazy_runtime's includes its compiles). torch uses one
intra-op thread.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

HEADING = "## Transformers models at varying lengths and image sizes"
# RWKV's CPU kernel loops over the sequence in Python: a graph per length (as Mamba's slow
# path, which runs here), whose compile took 3 min 50 s at one length on this machine
SLOW = ("rwkv",)
# (not Swin: transformers' own fails eagerly at most of these sizes, its windows against
# the attention mask, "The size of tensor a (9) must match the size of tensor b (16)")
IMAGES = ("vit", "dinov2", "convnext", "resnet", "mobilenet_v2", "segformer", "mobilenet_v1",
          "regnet", "poolformer", "convnextv2", "focalnet", "mobilevit", "beit",
          "data2vec_vision", "deit", "vit_msn", "pvt_v2", "bit", "swiftformer")
AUDIO = ("wav2vec2", "wav2vec2_conformer")


def _models() -> dict:
    """name -> (make the model, its batch kind, train mode?): the text models and the
    vision classifiers of ``IMAGES``."""
    import transformers
    from runtime_hf_sweep import _classify, _lm, _seq2seq, models
    kinds = {_lm: "lm", _classify: "classify", _seq2seq: "seq2seq"}
    return {name: (m[0], kinds.get(m[1], "audio" if name in AUDIO else "image"),
                   m[2] if len(m) > 2 else False)
            for name, m in models(transformers).items()
            if (m[1] in kinds or name in IMAGES or name in AUDIO) and name not in SLOW}


def batches(kind: str, steps: int) -> list:
    """``steps`` batches of ``kind`` (see the docstring: padded text, or images), seeded."""
    if kind == "audio":
        rng = random.Random(0)
        return [dict(input_values=torch.randn(2, rng.randint(240, 640), generator=g),
                     labels=torch.randint(0, 3, (2,), generator=g))
                for step in range(steps) for g in [torch.Generator().manual_seed(step)]]
    if kind == "image":
        from varying_vision import sizes
        return [dict(pixel_values=torch.randn(2, 3, H, W, generator=g),
                     labels=torch.randint(0, 3, (2,), generator=g))
                for step, (H, W) in enumerate(sizes(steps, 4))
                for g in [torch.Generator().manual_seed(step)]]
    from varying_text import ragged_ids
    rng = random.Random(0)
    out = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        ids, pad = ragged_ids(rng, g, 4, (12, 60), 4, 99)
        mask = (~pad).long()
        b = dict(input_ids=ids, attention_mask=mask)
        if kind == "classify":
            b["labels"] = torch.randint(0, 3, (4,), generator=g)
        elif kind == "lm":
            b["labels"] = ids.masked_fill(mask == 0, -100)
        else:
            b["labels"] = torch.randint(1, 99, (4, rng.randint(4, 20)), generator=g)
        out.append(b)
    return out


def _loss(model, batch, dev):
    if dev is not None:
        batch = {k: v.to(dev) for k, v in batch.items()}
    if type(model).__name__.startswith(("ViT", "DeiT")):   # (its position grid resampled)
        batch = dict(batch, interpolate_pos_encoding=True)
    return model(**batch).loss


def run(name: str, steps: int) -> dict:
    from varying_vision import side_by_side
    make, kind, train = _models()[name]
    return side_by_side(lambda: make().train(train), None, batches(kind, steps), None,
                        loss_on=_loss)


def main():
    from varying_vision import main as sizes_main
    sizes_main(__doc__, _models(), run, 8, HEADING, lambda steps: (
        f"`python benchmarks/varying_hf.py --steps {steps} --write`: transformers' text "
        "models (tiny configs, random weights; RWKV left out: its CPU kernel loops over the "
        "sequence in Python, a graph per length) fine-tuned unmodified (SGD, batches of 4, "
        "eval mode) on batches padded to their longest, lengths drawn each step (the "
        "longest uniform in [12, 60]) with an attention mask, and its vision classifiers "
        "on batches of 2 images of H and W drawn in [24, 64] each step, and its audio "
        "classifiers on batches of 2 signals of lengths drawn in [240, 640]; nothing marked "
        "dynamic; each against eager torch in the same loop. See the script's "
        "docstring."))


if __name__ == "__main__":
    main()
