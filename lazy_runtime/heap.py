"""Python's garbage collections, kept off the heap that lives for the whole run and out of
the runtime's own busy stretches.

A full collection walks every object the process tracks: about 380,000 once torch, jax and
sympy are imported, 180-260 ms a pass on this CPU. A trace keeps its nodes alive until the
barrier, so each collection that runs mid-trace moves some of them to the oldest
generation, and once enough have moved Python runs a full collection: every 40-250 traced
steps of the GPT example (15-20 ms steps).

At the first barrier after a full collection (usually the first: the imports run several;
``mark_step``, a value read, a whole step's end), the runtime collects the garbage and
freezes the heap
(``gc.freeze``): what is alive then (modules, the model, the compiled executables) is left
out of every later collection, which walks only what was made after. Reference counting
still frees frozen objects; only a reference cycle among them that becomes garbage stays
(``gc.unfreeze()`` undoes the freeze). Once a process, and never with
``config.freeze_heap`` off (``LAZY_RUNTIME_FREEZE_HEAP=0``).

The freeze leaves out what lived before it, not what lives long after: a graph's padding
plan, its key and the templates of a new size stay cached, and a trace's nodes live until
its barrier. A young collection every 700 allocations moves whatever is alive then to an
older generation; a trace and its barrier allocate tens of thousands of objects, so most
of what they make reached the oldest one, and full collections came every ~25 traced
steps of a GPT step whose lengths vary, 130 ms each (a fifth of those steps' time).
``paused()`` turns automatic collection off for a barrier, a whole step's trace and a
step of the examples' loop, and back on after: what they make and drop is freed by
reference counting as before, and only cyclic garbage waits for the next collection."""

from __future__ import annotations

import contextlib
import gc

from .config import config

_STATE = {"full_collection_seen": False, "frozen": 0}


def _on_collection(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        _STATE["full_collection_seen"] = True


def at_step_barrier() -> None:
    """Freeze the heap, once, if a full collection has run since the process began (else
    none costs anything yet). One more full collection first (180-260 ms, once), so no
    garbage is pinned with the live objects."""
    if not _STATE["full_collection_seen"] or _STATE["frozen"] or not config.freeze_heap:
        return
    gc.collect()
    _STATE["frozen"] = len(gc.get_objects()) or 1
    gc.freeze()
    if _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)


@contextlib.contextmanager
def paused():
    """``with paused():`` no automatic collection inside (``gc.disable``), enabled again
    after. Nothing where collection is already off (the application's choice, or an outer
    ``paused``) or with ``config.pause_gc`` off (``LAZY_RUNTIME_PAUSE_GC=0``)."""
    if not config.pause_gc or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def frozen_objects() -> int:
    """How many objects the runtime froze (0: not frozen, by it)."""
    return _STATE["frozen"]


gc.callbacks.append(_on_collection)
