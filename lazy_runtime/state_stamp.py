"""A guard on a model's and an optimizer's Python state: ``StateStamp`` keeps what
``replay.module_state`` and ``replay.optimizer_state`` computed with the identity of
everything they read, so a replay that finds it all unchanged reuses their result (a few
µs) instead of walking every module again (a quarter of a millisecond for a small
Llama). Used by the whole-step replay (``step``) and by a replayed forward
(``compile``)."""

from __future__ import annotations

import collections
import itertools
import operator

import torch.nn.modules.module as _nn_module

from .replay import AttributeReads, module_state
from .tensor import LazyTensor
from .traced_numbers import NUMBER


def _dict_versions():
    """CPython's per-dict version tag (``ma_version_tag``, read by torch's Dynamo guards):
    it changes whenever an entry is added, removed or given another object, and only
    then. None where it is not there or does not behave so (other Pythons): the stamp
    then compares every key and value instead."""
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:   # pragma: no cover (a torch build without Dynamo)
        return None
    try:
        for d in ({}, collections.OrderedDict(), collections.defaultdict(list)):
            seen = [dict_version(d)]
            d["a"] = object()
            seen.append(dict_version(d))
            d["a"] = d["a"]    # the same object again: unchanged
            if dict_version(d) != seen[-1]:
                return None
            d["a"] = object()
            seen.append(dict_version(d))
            d.setdefault("b", 1)
            seen.append(dict_version(d))
            del d["a"]
            seen.append(dict_version(d))
            d.update(c=2)
            seen.append(dict_version(d))
            if len(set(seen)) != len(seen):
                return None
    except Exception:   # pragma: no cover
        return None
    return dict_version


_DICT_VERSION = _dict_versions()


class StateStamp:
    """The identity of everything ``module_state`` and ``optimizer_state`` read (every
    module's attributes, parameter, buffer, submodule and hook tables, the optimizer's
    groups, hyper-parameters and state; the modules' tensors' sizes, dtype and
    ``requires_grad``; the parameters' grads), kept with their result: while every one is
    the same object, the snapshot is the same, and checking that costs a fraction of
    recomputing it. (A state tensor's sizes and dtype are the replay's own check: the
    signature of the leaf it holds.)

    A table (a dict) is checked by its version tag where CPython has one
    (``_dict_versions``): one C call per table instead of comparing each key and value; an
    empty one by its length."""

    MODULE_TABLES = ("_parameters", "_buffers", "_modules", "_forward_hooks",
                     "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")

    def __init__(self, snap, owned, model, optimizers=(), places=(), grads: bool = True,
                 reads: AttributeReads | None = None):
        self.snap, self.owned = snap, owned
        self.owned_ids = frozenset(map(id, owned))
        # the optimizers' number hyper-parameters (``numbers``): (optimizer index, group
        # index, key, index in a tuple or None)
        self.places = places
        self.groups = self.reads = ()
        tables = [_nn_module._global_forward_hooks, _nn_module._global_forward_pre_hooks,
                  _nn_module._global_backward_hooks, _nn_module._global_backward_pre_hooks]
        lists = []
        tensors, params = [], []
        host = []   # CPU tensors the modules hold (their versions are watched)
        if reads is not None:
            # attributes read by value (``replay.attribute_value``): lists, dicts and
            # objects changed in place keep the module's dict as it was; a list's items
            # are compared, a dict's (an object's ``__dict__``) version
            lists.extend(reads.lists)
            tables.extend(reads.tables)
            host = reads.host
        if model is not None:
            for m in model.modules():
                d = m.__dict__
                tables.append(d)
                tables.extend(d[k] for k in self.MODULE_TABLES if type(d.get(k)) in (
                    dict, collections.OrderedDict))
                tensors.extend(t for t in d["_parameters"].values() if t is not None)
                tensors.extend(t for t in d["_buffers"].values() if t is not None)
        groups, reads_at = [], []
        for oi, optimizer in enumerate(optimizers):
            tables.append(optimizer.__dict__)
            tables.extend((optimizer._optimizer_step_pre_hooks,
                           optimizer._optimizer_step_post_hooks, optimizer.state))
            mine = [p[1:] for p in places if p[0] == oi]
            if mine:   # (a group's numbers change with a schedule: ``numbers`` reads them)
                numeric = {(gi, k) for gi, k, _ in mine}
                groups += [(g, len(g), *zip(*[(k, v) for k, v in g.items()
                                              if (gi, k) not in numeric]))
                           for gi, g in enumerate(optimizer.param_groups)]
            else:
                tables.extend(optimizer.param_groups)
            tables.extend(optimizer.state.values())
            lists.append(optimizer.param_groups)
            for g in optimizer.param_groups:
                lists.append(g["params"])
                params.extend(g["params"])
        for oi, gi, k, j in places:   # (in the order of ``places``: ``numbers``' order)
            g = optimizers[oi].param_groups[gi]
            reads_at.append((g, k, j, None if j is None else len(g[k])))
        if places:
            self.groups, self.reads = groups, reads_at
        self.lists = lists
        self.host = host
        self.host_versions = list(map(_VERSION, host))
        self.tensors = _unique(tensors + params)
        # grads: the parameters' (the snapshot reads them; autograd writes them)
        self.with_grads = _unique(params + [t for t in tensors if t.requires_grad]) \
            if grads else []
        self.grads = list(map(_GRAD, self.with_grads))
        # A lazy tensor's sizes and dtype change only with its buffer (``t.data = x``,
        # ``swap_tensors``): the buffer's identity stands for them, at a third of the cost.
        self.meta_of = _LAZY_META if all(isinstance(t, LazyTensor) for t in self.tensors) \
            else _META
        self.meta = list(map(self.meta_of, self.tensors))
        # Most tables (hook dicts: 197 of the GPT example's 285) are empty: one still empty
        # has the same content, which its length says at a quarter of a version's cost.
        self.tables = [t for t in tables if t]
        self.empty = [t for t in tables if not t]
        if _DICT_VERSION is not None:
            self.versions = list(map(_DICT_VERSION, self.tables))
            self.flat = tuple(itertools.chain.from_iterable(lists))
        else:
            self.versions = None
            self.flat = self._flat()

    def _flat(self) -> tuple:
        """Every key and value of the tables and every item of the lists, in one tuple
        (built without a Python loop: this runs before every replayed step)."""
        return tuple(itertools.chain(itertools.chain.from_iterable(self.tables),
                                     itertools.chain.from_iterable(map(_VALUES, self.tables)),
                                     itertools.chain.from_iterable(self.lists)))

    def numbers(self) -> list | None:
        """The values of the optimizer's number hyper-parameters (``places``), or None
        where one is no longer a number (or a tuple of numbers of the same length)."""
        out = []
        for g, k, j, n in self.reads:
            v = g.get(k)
            if j is not None:
                if type(v) is not tuple or len(v) != n:
                    return None
                v = v[j]
            if type(v) not in NUMBER:
                return None
            out.append(v)
        return out

    def _groups_hold(self) -> bool:
        try:
            return all(len(g) == n and all(map(operator.is_, map(g.__getitem__, keys), vals))
                       for g, n, keys, vals in self.groups) and self.numbers() is not None
        except KeyError:
            return False

    def holds(self) -> bool:
        if any(map(len, self.empty)):
            return False
        if self.groups and not self._groups_hold():
            return False
        if self.versions is not None:
            if list(map(_DICT_VERSION, self.tables)) != self.versions:
                return False
            flat = tuple(itertools.chain.from_iterable(self.lists))
        else:
            flat = self._flat()
        return (len(flat) == len(self.flat) and all(map(operator.is_, flat, self.flat))
                and all(map(operator.is_, map(_GRAD, self.with_grads), self.grads))
                and list(map(self.meta_of, self.tensors)) == self.meta
                and (not self.host or list(map(_VERSION, self.host)) == self.host_versions))


def _unique(tensors: list) -> list:
    seen = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]


_GRAD = operator.attrgetter("grad")
_VERSION = operator.attrgetter("_version")
_META = operator.attrgetter("shape", "dtype", "requires_grad")
_LAZY_META = operator.attrgetter("_st", "requires_grad")
_VALUES = operator.methodcaller("values")


class StampedModuleState:
    """``replay.module_state(model)`` for a replayed forward (``replay.Replayer``'s
    ``state``), recomputed only when its stamp no longer holds. The parameters' grads are
    not part of it (a forward does not read them; a training loop replaces them every
    step)."""

    def __init__(self, model):
        self.model = model
        self.stamp = None

    def __call__(self):
        stamp = self.stamp
        if stamp is not None and stamp.holds():
            return stamp.snap, stamp.owned
        reads = AttributeReads()
        snap, owned = module_state(self.model, reads)
        self.stamp = StateStamp(snap, owned, self.model, grads=False, reads=reads)
        return snap, owned

