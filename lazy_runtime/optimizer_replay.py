"""``compile_optimizer``'s replayer: ``opt.step()`` replayed, keyed by the optimizer's
state, its number hyper-parameters that a schedule changes followed (``replay_numbers``).
"""

from __future__ import annotations

import contextlib

from . import step_numbers
from .replay import NotReplayable, optimizer_state
from .replay_numbers import NumberFollowingReplayer
from .traced_numbers import Followed, plain


class OptimizerReplayer(NumberFollowingReplayer):
    """A replayer of ``opt.step``: the signature's last part is (the optimizer's state
    snapshot, its number hyper-parameters' (type, value))."""

    SETS_ITSELF = "the optimizer's step sets a hyper-parameter"

    def __init__(self, opt, step):
        super().__init__(step, self._state, differentiable=False)
        self.opt = opt
        self._places: list = []      # (group index, key, index in a tuple or None)
        self._tracing = False

    def _state(self):
        """(a snapshot whose last part is the number hyper-parameters' (type, value), the
        tensors the step reads and writes)."""
        places = []
        snap, owned = optimizer_state(self.opt, places)
        groups = self.opt.param_groups
        values = []
        for gi, k, j in places:
            v = groups[gi][k] if j is None else groups[gi][k][j]
            if isinstance(v, Followed):
                if not self._tracing:   # (inside a whole step's trace: it follows them)
                    raise NotReplayable(f"the hyper-parameter {k} is followed by a whole "
                                        "step's trace")
                v = plain(v)
            values.append((type(v), v))
        self._places = places
        return (snap, tuple(values)), owned

    def _numbers(self, key) -> tuple:
        return key[-1][1]

    def _masked(self, key, positions) -> tuple:
        snap, values = key[-1]
        return key[:-1] + ((snap, tuple((t, None) if i in positions else (t, v)
                                        for i, (t, v) in enumerate(values))),)

    @contextlib.contextmanager
    def _traced_numbers(self, follow, traced, args, kwargs):
        groups = self.opt.param_groups
        reads = [(groups[gi], k, j, None if j is None else len(groups[gi][k]))
                 for gi, k, j in (self._places[i] for i in follow)]
        self._tracing = True
        try:
            with step_numbers.hyper_parameters(reads, traced) as set_inside:
                yield args, kwargs, set_inside
        finally:
            self._tracing = False

    def _names(self, positions) -> list:
        return [self._places[i][1] for i in positions]
