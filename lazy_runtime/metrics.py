"""Counters of what the runtime did: compiles, cache hits, graphs executed, fallbacks."""

from __future__ import annotations

import collections

from . import log

_COUNTS = ("compiles", "disk_cache_hits", "cache_hits", "graphs_executed", "traced_ops", "syncs",
           "cache_evictions", "transfers_to_device", "transfers_to_host", "host_ops",
           "host_folds", "padded_executions", "replays", "replays_across_sizes", "step_replays",
           "step_replays_across_sizes")
_TIMES = ("compile_seconds", "execute_seconds")


class Metrics:
    def __init__(self):
        self.reset()

    def reset(self):
        for k in _COUNTS:
            setattr(self, k, 0)
        for k in _TIMES:
            setattr(self, k, 0.0)
        self.fallback_ops = collections.Counter()
        self.decomposed_ops = collections.Counter()
        self.sync_reasons = collections.Counter()
        self.recompile_reasons: list[str] = []
        self.graph_sizes: list[int] = []  # op nodes of each executed graph, newest last (bounded)
        self.buckets: dict = {}  # symbol -> set of padded sizes compiled for
        self.exact_compiles = collections.Counter()  # op forcing an exact-shape compile -> n
        self.automatic_dynamic: list[str] = []  # dims made dynamic automatically
        self.replay_misses = collections.Counter()  # why a replay was not possible

    def replay_miss(self, reason: str) -> None:
        """A replay that did not happen, and why (counted, and logged: ``log``)."""
        log.not_replayed(reason, reason not in self.replay_misses)
        self.replay_misses[reason] += 1

    def fallback(self, op: str, reason: str) -> None:
        """An op run eagerly in torch (counted, and logged: ``log``)."""
        log.fell_back(op, reason, op not in self.fallback_ops)
        self.fallback_ops[op] += 1

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _COUNTS + _TIMES}
        d["fallback_ops"] = dict(self.fallback_ops)
        d["decomposed_ops"] = dict(self.decomposed_ops)
        d["sync_reasons"] = dict(self.sync_reasons)
        d["recompile_reasons"] = list(self.recompile_reasons)
        d["last_graph_ops"] = self.graph_sizes[-1] if self.graph_sizes else 0
        d["buckets"] = {k: sorted(v) for k, v in self.buckets.items()}
        d["exact_compiles"] = dict(self.exact_compiles)
        d["automatic_dynamic"] = list(self.automatic_dynamic)
        d["replay_misses"] = dict(self.replay_misses)
        return d


METRICS = Metrics()


def metrics() -> dict:
    """A snapshot of the counters (a plain dict; mutating it changes nothing)."""
    return METRICS.as_dict()


def reset_metrics() -> None:
    METRICS.reset()


def metrics_report() -> str:
    from . import native_guard
    from .backend import DEVICE_GUARD
    from .config import config
    from .errors import LazyRuntimeError
    m = METRICS.as_dict()
    try:
        device = f"{config.jax_device()}{'' if config.platform else ' (jax default)'}"
    except LazyRuntimeError as e:   # (a platform jax cannot use: the report still prints)
        device = f"none ({e})"
    lines = ["lazy_runtime metrics",
             f"  XLA device      : {device}, 16-bit excess precision "
             f"{'on' if config.excess_precision else 'off'}"
             + (f", XLA options {config.compiler_options}" if config.compiler_options else ""),
             f"  device guard    : {DEVICE_GUARD[0]}"
             + ("" if native_guard.HOOKS[0] == native_guard.NATIVE
                else f"; hooks: {native_guard.HOOKS[0]}"),
             f"  graphs executed : {m['graphs_executed']}  (ops in last graph: {m['last_graph_ops']})",
             f"  compiles        : {m['compiles']}  ({m['compile_seconds']:.3f} s"
             + (f"; {m['disk_cache_hits']} loaded from {config.compile_cache}"
                if config.compile_cache else "; no disk cache") + ")",
             f"  cache hits      : {m['cache_hits']}  (evictions: {m['cache_evictions']})",
             f"  execute time    : {m['execute_seconds']:.3f} s",
             f"  traced ops      : {m['traced_ops']}",
             f"  syncs           : {m['syncs']}  " + _fmt_counter(m["sync_reasons"]),
             f"  transfers       : {m['transfers_to_device']} to device, "
             f"{m['transfers_to_host']} to host, {m['host_ops']} host-computed constants, "
             f"{m['host_folds']} reads computed on the host",
             "  fallback ops    : " + (_fmt_counter(m["fallback_ops"]) or "none"),
             "  decomposed ops  : " + (_fmt_counter(m["decomposed_ops"]) or "none"),
             f"  padded runs     : {m['padded_executions']}  buckets: "
             + (", ".join(f"{k}={v}" for k, v in sorted(m["buckets"].items())) or "none"),
             "  exact compiles  : " + (_fmt_counter(m["exact_compiles"]) or "none"),
             f"  replays         : {m['replays']}  (across sizes: {m['replays_across_sizes']}; "
             f"whole steps: {m['step_replays']}, "
             f"{m['step_replays_across_sizes']} of them across sizes)"]
    misses = sorted(m["replay_misses"].items(), key=lambda kv: -kv[1])
    if misses:   # (why calls meant to replay were traced: the first thing to look at)
        lines.append(f"  replay misses   : {sum(n for _, n in misses)}")
        lines.extend(f"    - {n}x {why}" for why, n in misses[:5])
        if len(misses) > 5:
            lines.append(f"    - ... {len(misses) - 5} more reasons in metrics()"
                         f"[\"replay_misses\"]")
    reasons = m["recompile_reasons"]
    lines.append(f"  compile reasons : {len(reasons)} recorded")
    for r in reasons[-10:]:
        lines.append(f"    - {r}")
    return "\n".join(lines)


def _fmt_counter(c: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
