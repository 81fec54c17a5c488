"""What the runtime does, as it happens, through Python's ``logging``.

``metrics()`` counts events after the fact; these logs say when each one happens and why,
as torch's ``TORCH_LOGS="recompiles"`` and jax's ``jax_log_compiles`` do. Channels, each
a logger under ``lazy_runtime``:

* ``compiles``: every compile, its graph's size, its time and why the cache missed
  (the reasons ``metrics()["recompile_reasons"]`` keeps); ``cache``: an executable
  evicted from the full cache.
* ``fallbacks``: an op run eagerly in torch, and why: its first time at INFO, each later
  time at DEBUG.
* ``dynamic``: dims made dynamic automatically.
* ``replays``: why a forward, optimizer or whole-step replay did not happen: once per
  reason at INFO, later at DEBUG.

Turn them on with ``lr.set_logs("compiles", "fallbacks")`` (``"all"``; no names: off)
or the environment, ``LAZY_RUNTIME_LOG=compiles,fallbacks`` (or ``all``), read at
import: INFO records go to stderr. Or configure the ``lazy_runtime`` loggers yourself
with ``logging``. Off, an event costs one level check."""

from __future__ import annotations

import logging
import os
import warnings

CHANNELS = ("compiles", "cache", "fallbacks", "dynamic", "replays")
ROOT = logging.getLogger("lazy_runtime")
_LOGGERS = {name: logging.getLogger(f"lazy_runtime.{name}") for name in CHANNELS}
_HANDLER: list = []   # the stderr handler ``set_logs`` attached, if any


def set_logs(*channels: str) -> None:
    """Log the named channels (``CHANNELS``, or ``"all"``) at INFO to stderr, the others
    not; with no names, stop, leaving the loggers to the application's ``logging``
    setup. Raises ValueError naming the channels for an unknown name."""
    names = set(CHANNELS) if "all" in channels else set(channels)
    unknown = sorted(names - set(CHANNELS))
    if unknown:
        raise ValueError(f"unknown lazy_runtime log channel(s) {', '.join(unknown)}: "
                         f"choose from {', '.join(CHANNELS)} or all")
    if names:
        for name, logger in _LOGGERS.items():
            logger.setLevel(logging.INFO if name in names else logging.WARNING)
        if not _HANDLER:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            ROOT.addHandler(handler)
            ROOT.propagate = False   # (a root handler would print each record twice)
            _HANDLER.append(handler)
        return
    if _HANDLER:
        ROOT.removeHandler(_HANDLER.pop())
        ROOT.propagate = True
    for logger in _LOGGERS.values():   # (back to what the application's logging says)
        logger.setLevel(logging.NOTSET)


def configure_from_env() -> None:
    """``LAZY_RUNTIME_LOG``'s channels, if set; a bad name is a warning, not an error (the
    program still runs, with the valid names on)."""
    spec = os.environ.get("LAZY_RUNTIME_LOG", "").strip()
    if not spec:
        return
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n != "all" and n not in CHANNELS]
    if bad:
        warnings.warn(f"LAZY_RUNTIME_LOG: unknown channel(s) {', '.join(bad)} ignored "
                      f"(channels: {', '.join(CHANNELS)}, or all)", RuntimeWarning,
                      stacklevel=2)
    set_logs(*[n for n in names if n not in bad])


def _emit(channel: str, level: int, message: str, *args) -> None:
    log = _LOGGERS[channel]
    if log.isEnabledFor(level):   # (off: one level check, no formatting)
        log.log(level, message, *args)


def _first_info(first: bool) -> int:
    """An event's first time at INFO, later ones at DEBUG."""
    return logging.INFO if first else logging.DEBUG


def compiled(n_ops: int, seconds: float, reason: str) -> None:
    _emit("compiles", logging.INFO, "compiled a graph of %d ops in %.2f s: %s", n_ops,
          seconds, reason)


def evicted(capacity: int) -> None:
    _emit("cache", logging.INFO, "evicted the least recently used executable "
          "(cache_size %d)", capacity)


def fell_back(op: str, reason: str, first: bool) -> None:
    """``first``: the first time ``op`` fell back since the metrics were reset."""
    _emit("fallbacks", _first_info(first), "%s ran eagerly in torch%s", op,
          f": {reason}" if reason else "")


def made_dynamic(what: str) -> None:
    _emit("dynamic", logging.INFO, "dims made dynamic automatically: %s", what)


def not_replayed(reason: str, first: bool) -> None:
    _emit("replays", _first_info(first), "not replayed: %s", reason)


def followed(positions) -> None:
    _emit("replays", logging.INFO, "whole step: int argument(s) at flat position(s) %s "
          "followed (a replay computes what depends on them)",
          ", ".join(map(str, sorted(positions))))


def followed_numbers(owner: str, names) -> None:
    _emit("replays", logging.INFO, "%s: %s followed (a replay computes what depends on "
          "them)", owner, ", ".join(names))
