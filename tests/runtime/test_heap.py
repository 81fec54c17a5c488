"""The heap freeze (``lazy_runtime.heap``): once, at a step barrier after a full collection,
only where ``config.freeze_heap`` is on; the garbage of before it is collected, not pinned;
objects made after it are still collected."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import gc, weakref
import torch
import lazy_runtime as lr
from lazy_runtime import heap

# not 0 where something froze at start-up (seen on a GPU image); frees lower it
before = gc.get_freeze_count()
lr.config.freeze_heap = False
x = torch.randn(4).to(lr.device()) + 1
gc.collect()
lr.mark_step()
assert gc.get_freeze_count() <= before and heap.frozen_objects() == 0, "frozen while off"

class Cycle:
    pass
old = Cycle()
old.me = old
old_ref = weakref.ref(old)
gc.collect()                # (old survives it: now in the oldest generation)
del old                     # garbage there, which only a full collection finds

lr.config.freeze_heap = True
y = x * 2
lr.mark_step()
assert old_ref() is None, "garbage pinned by the freeze"
frozen = gc.get_freeze_count() - before
assert frozen > 10000, frozen               # torch, jax and the runtime's own modules
assert abs(heap.frozen_objects() - frozen) < max(100, frozen // 100), (
    heap.frozen_objects(), frozen)
assert heap._on_collection not in gc.callbacks

z = y + 1
gc.collect()
lr.mark_step()
assert gc.get_freeze_count() <= before + frozen, "frozen twice"

c = Cycle()
c.me = c
ref = weakref.ref(c)
del c
gc.collect()
assert ref() is None, "a cycle made after the freeze was not collected"
assert torch.equal(z.cpu(), (x.cpu() * 2) + 1)
print("ok")
"""


def test_heap_is_frozen_once_at_a_step_barrier_after_a_full_collection():
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


_READS_ONLY = """
import gc
import torch
import lazy_runtime as lr
from lazy_runtime import heap

before = gc.get_freeze_count()
x = torch.randn(4).to(lr.device())
gc.collect()                 # a full collection: the next barrier freezes
assert heap.frozen_objects() == 0
print((x * 2 + 1).cpu().shape)   # a read: the only barrier a decoding loop has
frozen = gc.get_freeze_count() - before
assert frozen > 10000 and heap.frozen_objects() > 0, frozen
print("ok")
"""


def test_a_read_barrier_freezes_too():
    """A decoding loop (``generate``, a loop reading each token) and a whole step never
    call ``mark_step``; their barriers freeze the heap as well (their full collections
    took 4.3 ms a token on average on the decode benchmark's int-position loop)."""
    r = subprocess.run([sys.executable, "-c", _READS_ONLY], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_paused_turns_automatic_collection_off_inside_and_back_on_after():
    import gc

    from lazy_runtime import config, heap
    assert gc.isenabled()
    with heap.paused():
        assert not gc.isenabled()
        with heap.paused():   # (nested: the outer one turns it back on)
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    try:
        with heap.paused():
            raise KeyError("inside")
    except KeyError:
        pass
    assert gc.isenabled(), "an error inside left collection off"
    gc.disable()   # the application's choice is kept
    try:
        with heap.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    config.pause_gc = False
    try:
        with heap.paused():
            assert gc.isenabled()
    finally:
        config.pause_gc = True


def test_barriers_and_whole_step_traces_run_with_collection_paused():
    """A barrier (linearizing, planning, compiling, running) and a whole step's trace keep
    what they make young: no automatic collection inside, on again after."""
    import gc

    import torch

    import lazy_runtime as lr
    from lazy_runtime import executor
    dev = lr.device()
    seen = []
    executor.BARRIER_OBSERVERS.append(lambda *a: seen.append(("barrier", gc.isenabled())))
    try:
        x = torch.randn(3).to(dev)
        (x * 2).sum().item()
        w = torch.zeros(3).to(dev)

        def step(v):
            seen.append(("step", gc.isenabled()))
            w.add_(v)
            return w.sum()

        run = lr.compile_step(step)
        for _ in range(3):
            run(x)
    finally:
        executor.BARRIER_OBSERVERS.pop()
    assert gc.isenabled()
    assert ("barrier", False) in seen and ("step", False) in seen, seen
    assert all(not on for _, on in seen), seen
    assert torch.allclose(w.cpu(), x.cpu() * 3)
