"""The abstract interpreter: walks the AST of forward() and everything it calls.

Statements run on a ``Frame`` (one path); a condition that depends on the symbols forks
the frame and the paths are joined afterwards (values that differ become unions with
the paths' conditions). Loops over concrete iterables are unrolled; loops over a
symbolic number of items run the body until the loop-carried values stop changing
(widening what still differs) and summarize appends as symbolic-length lists.
"""

from __future__ import annotations

import ast
from typing import Optional

import sympy

from .. import symbolic as sym
from ..shape_fns import collect_requirements
from ..values import (NONE, BoundMethod, Closure, Const, DictV, ListV, ObjV, SymScalar, TensorType, TupleV,
                      UnionV, Unknown, Value, as_dim)
from . import operators as ops
from .state import (AnalysisContext, Flow, Frame, flatten_union, infeasible, join_frames, make_union,
                    simplify_condition,
                    widen_values)

MAX_UNROLL = 512
MAX_FIXPOINT = 3
MAX_LOOP_SPLITS = 4  # a loop over a union of at most this many iterables runs once per option


class Interpreter:
    def __init__(self, ctx: AnalysisContext):
        self.ctx = ctx
        from .calls import Caller

        self.caller = Caller(self)

    # ================================================================== statements
    def exec_block(self, stmts: list, frame: Frame) -> Flow:
        flow = Flow(frame)
        for stmt in stmts:
            if flow.normal is None:
                break
            sub = self.exec_stmt(stmt, flow.normal)
            flow.normal = sub.normal
            flow.breaks += sub.breaks
            flow.continues += sub.continues
        return flow

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> Flow:
        self.ctx.at(frame.filename, stmt)
        self.ctx.pc = frame.pc
        method = getattr(self, "stmt_" + type(stmt).__name__, None)
        if method is None:
            self.ctx.report("SI002", f"statement '{type(stmt).__name__}' is not modelled; skipped")
            return Flow(frame)
        try:
            with collect_requirements(self._requirement), sym.assuming(frame.pc):
                return method(stmt, frame)
        except RecursionError:
            self.ctx.at(frame.filename, stmt)
            self.ctx.report("SI004", "recursion too deep while analyzing this statement")
            return _lose_statement(stmt, frame, Unknown("recursion too deep"))
        except Exception as e:  # an analyzer bug: lose this statement, not the analysis
            self.ctx.at(frame.filename, stmt)
            return _lose_statement(stmt, frame, self.ctx.internal_failure("analyzing this statement", e))

    def _requirement(self, op, a, b, what):
        """A shape requirement that holds for some sizes only: a warning with the
        condition under which it fails, or an error when the sample sizes fail it."""
        cond = sym.relation(op, a, b)
        text = f"{sym.dim_pretty(a)} {op} {sym.dim_pretty(b)}"
        at_sample = self.ctx.sample_holds(cond) if self.ctx.sample_holds(self.ctx.pc) else None
        fails = sympy.And(self.ctx.pc, sympy.Not(cond))
        if at_sample is False:
            self.ctx.report("SI300", f"{what}: needs {text}, which fails at the sample sizes",
                            severity="error", when=fails)
        else:
            # a minimum or maximum input size (op ">", "<=") is a fact about the model,
            # not a suspicion
            self.ctx.report("SI300", f"{what}: holds only when {text}", when=fails,
                            severity="note" if op in (">", "<=") else "")

    # ---- simple statements
    def stmt_Expr(self, s, frame):
        self.eval(s.value, frame)
        return Flow(frame)

    def stmt_Pass(self, s, frame):
        return Flow(frame)

    def stmt_Assign(self, s, frame):
        value = self.eval(s.value, frame)
        for target in s.targets:
            self.assign(target, value, frame, s.lineno)
        return Flow(frame)

    def stmt_AnnAssign(self, s, frame):
        if s.value is not None:
            self.assign(s.target, self.eval(s.value, frame), frame, s.lineno)
        return Flow(frame)

    def stmt_AugAssign(self, s, frame):
        current = self.eval(_load(s.target), frame)
        rhs = self.eval(s.value, frame)
        value = ops.binop(self, type(s.op).__name__, current, rhs, frame, inplace=True)
        self.assign(s.target, value, frame, s.lineno)
        return Flow(frame)

    def stmt_Return(self, s, frame):
        value = self.eval(s.value, frame) if s.value is not None else NONE
        frame.returns.append((frame.pc, value))
        return Flow(None)

    def stmt_Raise(self, s, frame):
        if frame.pc is not sympy.true:
            self.ctx.report("SI010", f"raises when {_cond_str(frame.pc)}", when=frame.pc)
        return Flow(None)

    def stmt_Assert(self, s, frame):
        test = self.eval(s.test, frame)
        verdict, cond = self.truth(test, frame)
        if verdict is False:
            self.ctx.report("SI010", "assertion always fails here", severity="error")
            return Flow(None)
        if verdict is None and cond is not None:
            self.ctx.report("SI010", f"assertion fails when {_cond_str(sympy.Not(cond))}",
                            when=sympy.And(frame.pc, sympy.Not(cond)))
            frame.pc = sympy.And(frame.pc, cond)
        return Flow(frame)

    def stmt_Break(self, s, frame):
        return Flow(None, breaks=[frame])

    def stmt_Continue(self, s, frame):
        return Flow(None, continues=[frame])

    def stmt_Delete(self, s, frame):
        for t in s.targets:
            if isinstance(t, ast.Name):
                frame.env.pop(t.id, None)
        return Flow(frame)

    def stmt_Global(self, s, frame):
        return Flow(frame)

    stmt_Nonlocal = stmt_Global

    def stmt_Import(self, s, frame):
        import importlib

        for alias in s.names:
            try:
                module = importlib.import_module(alias.name)
            except Exception as e:
                frame.env[alias.asname or alias.name.split(".")[0]] = Unknown(f"import failed: {e}")
                continue
            if alias.asname:
                frame.env[alias.asname] = Const(module)
            else:
                top = alias.name.split(".")[0]
                frame.env[top] = Const(importlib.import_module(top))
        return Flow(frame)

    def stmt_ImportFrom(self, s, frame):
        import importlib

        for alias in s.names:
            try:
                mod = importlib.import_module(s.module or "")
                frame.env[alias.asname or alias.name] = Const(getattr(mod, alias.name))
            except Exception:
                frame.env[alias.asname or alias.name] = Unknown(f"cannot import {alias.name}")
        return Flow(frame)

    def stmt_FunctionDef(self, s, frame):
        defaults = tuple(self.eval(d, frame) for d in s.args.defaults)
        kw_defaults = tuple(None if d is None else self.eval(d, frame) for d in s.args.kw_defaults)
        fn: Value = Closure(s, frame, frame.globals, defaults, kw_defaults, frame.filename)
        for dec in reversed(s.decorator_list):
            fn = self.caller.call(self.eval(dec, frame), [fn], {}, frame)
        frame.env[s.name] = fn
        return Flow(frame)

    def stmt_ClassDef(self, s, frame):
        self.ctx.report("SI002", "class definitions inside analyzed functions are not modelled")
        frame.env[s.name] = Unknown("class defined inside an analyzed function")
        return Flow(frame)

    # ---- compound statements
    def stmt_If(self, s, frame):
        test = self.eval(s.test, frame)
        verdict, cond = self.truth(test, frame)
        if verdict is True:
            return self.exec_block(s.body, frame)
        if verdict is False:
            return self.exec_block(s.orelse, frame)
        if cond is None:  # depends on tensor data: both paths, under an opaque condition
            cond = self._opaque_condition(test, s.lineno)
        a = self.exec_block(s.body, frame.fork(cond))
        b = self.exec_block(s.orelse, frame.fork(sympy.Not(cond)))
        return _merge_flows(a, b, parent_pc=frame.pc)

    def stmt_With(self, s, frame):
        for item in s.items:
            ctx_value = self.eval(item.context_expr, frame)
            entered = self.caller.enter_context(ctx_value, frame)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, entered, frame, s.lineno)
        return self.exec_block(s.body, frame)

    def stmt_Try(self, s, frame):
        # The happy path: exceptions are not modelled; handlers are not analyzed.
        flow = self.exec_block(s.body, frame)
        if flow.normal is not None and s.orelse:
            rest = self.exec_block(s.orelse, flow.normal)
            flow = Flow(rest.normal, flow.breaks + rest.breaks, flow.continues + rest.continues)
        if s.finalbody and flow.normal is not None:
            rest = self.exec_block(s.finalbody, flow.normal)
            flow = Flow(rest.normal, flow.breaks + rest.breaks, flow.continues + rest.continues)
        return flow

    stmt_TryStar = stmt_Try

    def stmt_For(self, s, frame):
        iterable = self.eval(s.iter, frame)
        return self._loop_over(s, frame, iterable)

    def _loop_over(self, s, frame, iterable: Value) -> Flow:
        items = self.caller.iterate(iterable, frame)
        if isinstance(items, list):
            return self._unrolled_loop(s, frame, items)
        elem, count = items
        if isinstance(iterable, UnionV) and len(iterable.options) <= MAX_LOOP_SPLITS:
            return self._loop_per_option(s, frame, iterable)
        return self._summarized_loop(s, frame, elem, count)

    def _loop_per_option(self, s, frame, iterable: UnionV) -> Flow:
        """A loop over values that differ by path (5 steps on one, T on another): the
        loop runs once per path, under its condition, and the paths are joined after."""
        flows = []
        for cond, option in iterable.options:
            if infeasible(sympy.And(frame.pc, cond)):
                continue
            flows.append(self._loop_over(s, frame.fork(cond), option))
        return Flow(join_frames([f.normal for f in flows], parent_pc=frame.pc))

    def stmt_While(self, s, frame):
        for _ in range(MAX_UNROLL):
            verdict, _cond = self.truth(self.eval(s.test, frame), frame)
            if verdict is False:
                return self.exec_block(s.orelse, frame)
            if verdict is None:
                return self._summarized_loop(s, frame, None, None)
            body = self.exec_block(s.body, frame)
            nxt = join_frames([body.normal] + body.continues)
            if body.breaks:
                return Flow(join_frames(body.breaks + [nxt]))
            if nxt is None:
                return Flow(None)
            frame = nxt
        self.ctx.report("SI004", f"while loop unrolled {MAX_UNROLL} times without ending")
        return Flow(frame)

    def _loop_test_condition(self, test: ast.expr, frame: Frame):
        """What one more iteration of a while loop adds to the path condition: the test's
        condition on these values (nothing for a test on data or on lost values)."""
        verdict, cond = self.truth(self.eval(test, frame), frame)
        return cond if verdict is None and cond is not None else sympy.true

    def _unrolled_loop(self, s, frame, items) -> Flow:
        if len(items) > MAX_UNROLL:
            self.ctx.report("SI004", f"loop over {len(items)} items summarized")
            return self._summarized_loop(s, frame, _join_items(items), len(items))
        breaks = []
        cur: Optional[Frame] = frame
        for item in items:
            self.assign(s.target, item, cur, s.lineno)
            body = self.exec_block(s.body, cur)
            breaks += body.breaks
            cur = join_frames([body.normal] + body.continues)
            if cur is None:
                break
        if cur is not None and s.orelse:
            tail = self.exec_block(s.orelse, cur)
            cur = tail.normal
        return Flow(join_frames([cur] + breaks))

    def _summarized_loop(self, s, frame, elem: Optional[Value], count) -> Flow:
        """Analyze a loop with a symbolic number of iterations.

        The body runs on a copy until the loop-carried variables stop changing (at most
        a few rounds, then what still differs is widened). Lists that grow by k items
        per iteration become lists with a tail of k*count items.
        """
        list_names = {n: v for n, v in frame.env.items() if isinstance(v, ListV)}
        state = frame
        after = frame
        new_names: list = []
        # over an unknown iterable the elements say nothing: one pass, then widen
        rounds = 1 if isinstance(elem, Unknown) else MAX_FIXPOINT
        for _ in range(rounds):
            trial = state.fork()
            if elem is not None:
                self.assign(s.target, elem, trial, s.lineno)
            if isinstance(s, ast.While):  # the body runs only where the test holds
                trial = trial.fork(self._loop_test_condition(s.test, trial))
            body = self.exec_block(s.body, trial)
            after = join_frames([body.normal] + body.continues + body.breaks) or trial
            changed = [n for n in state.env if n in after.env and n not in list_names
                       and not _same_value(state.env[n], after.env[n])]
            new_names = [n for n in after.env if n not in state.env]
            if not changed:
                break
            state = state.fork()
            state.env.update({n: widen_values([state.env[n], after.env[n]]) for n in changed})
        else:
            if rounds == MAX_FIXPOINT:
                self.ctx.report("SI004", "loop-carried values did not settle; widened")
        result = state.fork()
        for n in new_names:  # names first bound inside the loop keep their last value
            result.env[n] = after.env[n]
        for n, orig in list_names.items():  # lists grown in the body: growth per iteration
            grown, target = after.env.get(n), result.env.get(n)
            if not isinstance(grown, ListV) or not isinstance(target, ListV):
                continue
            n_before = len(orig.items)
            if len(grown.items) == n_before and grown.tail == orig.tail:
                continue
            added = grown.items[n_before:]
            if grown.tail != orig.tail or not added:
                target.items, target.tail = list(orig.items), Unknown("list changed inside a loop")
                target.tail_count = None
                continue
            target.items = list(orig.items)
            target.tail = widen_values(added)
            target.tail_count = sym.mul(len(added), count) if count is not None else None
        return Flow(result)

    # ================================================================== assignment
    def assign(self, target: ast.expr, value: Value, frame: Frame, lineno: int) -> None:
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
            self.ctx.record(frame.filename, lineno, target.id, value, frame.pc)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self._unpack(target, value, frame, lineno)
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, frame)
            self.caller.set_attr(obj, target.attr, value)
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value, frame)
            index = self.eval(target.slice, frame)
            self.caller.set_item(obj, index, value, frame)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, value, frame, lineno)

    def _unpack(self, target, value, frame, lineno):
        n = len(target.elts)
        star = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
        if isinstance(value, UnionV):
            parts = []
            saved = self.ctx.pc
            try:
                for c, v in value.options:  # an error unpacking one option is reported under its condition
                    self.ctx.pc = sympy.And(saved, c)
                    parts.append(self._split_for_unpack(v, n, star))
            finally:
                self.ctx.pc = saved
            if all(p is not None for p in parts):
                for i, elt in enumerate(target.elts):
                    self.assign(elt, make_union([(c, p[i]) for (c, _), p in zip(value.options, parts)]),
                                frame, lineno)
                return
            items = None
        else:
            items = self._split_for_unpack(value, n, star)
        if items is None:
            reason = value.reason if isinstance(value, Unknown) else f"cannot unpack {_kind(value)}"
            items = [Unknown(reason)] * n
        for elt, item in zip(target.elts, items):
            self.assign(elt, item, frame, lineno)

    def _split_for_unpack(self, value, n, star):
        seq = self.caller.iterate(value, None)
        if not isinstance(seq, list):
            elem, count = seq
            if elem is None:
                return None
            if star:
                s = star[0]
                rest = ListV(tail=elem, tail_count=sym.sub(count, n - 1) if count is not None else None)
                return [elem] * s + [rest] + [elem] * (n - s - 1)
            return [elem] * n
        if star:
            s = star[0]
            tail_n = n - s - 1
            mid = seq[s:len(seq) - tail_n]
            return seq[:s] + [ListV(mid)] + seq[len(seq) - tail_n:]
        if len(seq) != n:
            self.ctx.report("SI007", f"cannot unpack {len(seq)} values into {n} names", severity="error")
            return None
        return seq

    # ================================================================== expressions
    def eval(self, node: ast.expr, frame: Frame) -> Value:
        method = getattr(self, "ex_" + type(node).__name__, None)
        if method is None:
            self.ctx.report("SI002", f"expression '{type(node).__name__}' is not modelled")
            return Unknown(f"{type(node).__name__} expressions are not modelled")
        v = method(node, frame)
        audit = self.ctx.size_audit
        if audit is not None:
            audit.note(v, self.ctx.loc)
        return v

    def ex_Constant(self, n, frame):
        return Const(n.value)

    def ex_Name(self, n, frame):
        return self.lookup(n.id, frame, n)

    def lookup(self, name: str, frame: Frame, node=None) -> Value:
        if name in frame.env:
            return _narrow(frame.env[name], frame.pc)
        scope = frame.scope
        while scope is not None:
            if name in scope.env:
                return scope.env[name]
            scope = scope.scope
        if name in frame.cells:
            return frame.cells[name]
        if name in frame.globals:
            return self.caller.wrap(frame.globals[name])
        import builtins

        if hasattr(builtins, name):
            return Const(getattr(builtins, name))
        self.ctx.report("SI008", f"name '{name}' is not defined", severity="error")
        return Unknown(f"undefined name {name}")

    def ex_Attribute(self, n, frame):
        obj = self.eval(n.value, frame)
        return self.lift(lambda o: self.caller.get_attr(o, n.attr), obj)

    def ex_Subscript(self, n, frame):
        obj = self.eval(n.value, frame)
        index = self.eval(n.slice, frame)
        return self.lift(lambda o, i: self.caller.get_item(o, i, frame), obj, index)

    def ex_Slice(self, n, frame):
        parts = []
        for p in (n.lower, n.upper, n.step):
            if p is None:
                parts.append(None)
                continue
            v = self.eval(p, frame)
            d = as_dim(v)
            parts.append(d if d is not None else (None if v == NONE else v))
        return Const(slice(*parts))

    def ex_Tuple(self, n, frame):
        items = self._elements(n.elts, frame)
        return TupleV(tuple(items)) if items is not None else Unknown("tuple built from a *sequence of unknown length")

    def ex_List(self, n, frame):
        items = self._elements(n.elts, frame)
        return ListV(items) if items is not None else Unknown("list built from a *sequence of unknown length")

    ex_Set = ex_List

    def _elements(self, elts, frame) -> Optional[list]:
        """The items of a display; None when a *starred part has an unknown length."""
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                seq = self.caller.iterate(self.eval(e.value, frame), frame)
                if not isinstance(seq, list):
                    return None
                out.extend(seq)
            else:
                out.append(self.eval(e, frame))
        return out

    def ex_Dict(self, n, frame):
        d = DictV()
        for k, v in zip(n.keys, n.values):
            if k is None:
                other = self.eval(v, frame)
                if isinstance(other, DictV):
                    d.items.update(other.items)
                elif isinstance(other, Const) and isinstance(other.obj, dict):
                    d.items.update({kk: self.caller.wrap(vv) for kk, vv in other.obj.items()})
                continue
            key = self.eval(k, frame)
            d.items[key.obj if isinstance(key, Const) else key] = self.eval(v, frame)
        return d

    def ex_BinOp(self, n, frame):
        left, right = self.eval(n.left, frame), self.eval(n.right, frame)
        return ops.binop(self, type(n.op).__name__, left, right, frame)

    def ex_UnaryOp(self, n, frame):
        operand = self.eval(n.operand, frame)
        if isinstance(n.op, ast.Not):
            verdict, cond = self.truth(operand, frame)
            if verdict is not None:
                return Const(not verdict)
            return SymScalar(bool, sympy.Not(cond) if cond is not None else None)
        return ops.unaryop(self, type(n.op).__name__, operand, frame)

    def ex_BoolOp(self, n, frame):
        saved_pc = frame.pc
        try:
            return self._bool_op(n, frame)
        finally:
            frame.pc = saved_pc

    def _bool_op(self, n, frame):
        """``a and b`` / ``a or b``; later operands are evaluated only on the paths where
        the earlier ones did not decide (``x is None or x.shape[1] == 1``)."""
        is_and = isinstance(n.op, ast.And)
        conds = []
        last = None
        lost = False  # an undecided operand is so because the analysis lost a value
        for v_node in n.values:
            v = self.eval(v_node, frame)
            verdict, cond = self.truth(v, frame)
            lost = lost or (verdict is None and cond is None and _lost_by_analysis(v))
            if verdict is None and cond is not None:
                frame.pc = sympy.And(frame.pc, cond if is_and else sympy.Not(cond))
            last = v
            if verdict is (not is_and):  # short circuit: `a or b` with a truthy returns a
                return v if not conds else (Const(verdict) if isinstance(v, Const) else v)
            if verdict is None:
                conds.append(cond)
        if not conds:
            return last
        if any(c is None for c in conds):
            return SymScalar(bool, None, "depends on an unknown value" if lost else "depends on tensor values")
        combined = sympy.And(*conds) if is_and else sympy.Or(*conds)
        if all(isinstance(x, (SymScalar, Const)) for x in [last]) and isinstance(last, SymScalar) \
                and last.kind is bool:
            return SymScalar(bool, combined)
        # `a and b` returns one of the operands: a union over which one it is
        return SymScalar(bool, combined) if isinstance(last, (Const, SymScalar)) else \
            make_union([(combined, last), (sympy.Not(combined), NONE)])

    def ex_Compare(self, n, frame):
        left = self.eval(n.left, frame)
        result: Optional[Value] = None
        for op_node, right_node in zip(n.ops, n.comparators):
            right = self.eval(right_node, frame)
            r = ops.compare(self, type(op_node).__name__, left, right, frame)
            result = r if result is None else ops.logical_and(result, r)
            left = right
        return result

    def ex_IfExp(self, n, frame):
        test = self.eval(n.test, frame)
        verdict, cond = self.truth(test, frame)
        if verdict is True:
            return self.eval(n.body, frame)
        if verdict is False:
            return self.eval(n.orelse, frame)
        if cond is None:
            cond = self._opaque_condition(test, n.lineno, report=False)
        saved_pc = frame.pc
        try:
            frame.pc = sympy.And(saved_pc, cond)
            a = self.eval(n.body, frame)
            frame.pc = sympy.And(saved_pc, sympy.Not(cond))
            b = self.eval(n.orelse, frame)
        finally:
            frame.pc = saved_pc
        return make_union([(cond, a), (sympy.Not(cond), b)])

    def ex_Call(self, n, frame):
        func = self.eval(n.func, frame)
        # arguments in source order; *xs and **kw are expanded once their values are
        # known, per path when they differ by path (a union)
        parts = []
        for a in n.args:
            if isinstance(a, ast.Starred):
                parts.append(("*", self.eval(a.value, frame)))
            else:
                parts.append(("", self.eval(a, frame)))
        for k in n.keywords:
            parts.append(("**", self.eval(k.value, frame)) if k.arg is None else (k.arg, self.eval(k.value, frame)))
        self.ctx.at(frame.filename, n)
        starred = [i for i, (kind, v) in enumerate(parts) if kind in ("*", "**") and isinstance(v, UnionV)]

        def call_with(*star_values):
            chosen = list(parts)
            for i, v in zip(starred, star_values):
                chosen[i] = (chosen[i][0], v)
            return self._call_parts(func, chosen, frame, n)

        return self.lift(call_with, *[parts[i][1] for i in starred])

    def _call_parts(self, func, parts, frame, n):
        args, kwargs = [], {}
        for kind, v in parts:
            if kind == "":
                args.append(v)
            elif kind == "*":
                seq = self.caller.iterate(v, frame)
                if not isinstance(seq, list):
                    return Unknown("call with *args of symbolic length")
                args.extend(seq)
            elif kind == "**":
                if isinstance(v, DictV):
                    kwargs.update({str(kk): vv for kk, vv in v.items.items()})
                elif isinstance(v, ObjV) and v.mapping is not None:
                    kwargs.update({str(kk): vv for kk, vv in v.mapping.items()})
                elif isinstance(v, Const) and isinstance(v.obj, dict):
                    kwargs.update({kk: self.caller.wrap(vv) for kk, vv in v.obj.items()})
                else:
                    return Unknown("call with **kwargs of unknown keys")
            else:
                kwargs[kind] = v
        return self.caller.call(func, args, kwargs, frame, node=n)

    def ex_Lambda(self, n, frame):
        defaults = tuple(self.eval(d, frame) for d in n.args.defaults)
        kw_defaults = tuple(None if d is None else self.eval(d, frame) for d in n.args.kw_defaults)
        return Closure(n, frame, frame.globals, defaults, kw_defaults, frame.filename)

    def ex_NamedExpr(self, n, frame):
        v = self.eval(n.value, frame)
        self.assign(n.target, v, frame, n.lineno)
        return v

    def ex_JoinedStr(self, n, frame):
        parts = []
        for v in n.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                x = self.eval(v.value, frame)
                if not isinstance(x, Const):
                    return Unknown("formatted string of abstract values")
                parts.append(format(x.obj, self.eval(v.format_spec, frame).obj if v.format_spec else ""))
        return Const("".join(parts))

    def ex_FormattedValue(self, n, frame):
        return Unknown("formatted value")

    def ex_Starred(self, n, frame):
        return self.eval(n.value, frame)

    def ex_Yield(self, n, frame):
        value = self.eval(n.value, frame) if n.value is not None else NONE
        getattr(frame, "yields", []).append(value)
        return Unknown("value sent into a generator")

    def ex_YieldFrom(self, n, frame):
        seq = self.caller.iterate(self.eval(n.value, frame), frame)
        if isinstance(seq, list):
            getattr(frame, "yields", []).extend(seq)
        return Unknown("value of yield from")

    def ex_Await(self, n, frame):
        return Unknown("await is not modelled")

    # comprehensions: lists and generators become lists; symbolic lengths are summarized
    def ex_ListComp(self, n, frame):
        return self._comprehension(n, frame, lambda f: [self.eval(n.elt, f)])

    ex_GeneratorExp = ex_ListComp
    ex_SetComp = ex_ListComp

    def ex_DictComp(self, n, frame):
        pairs = self._comprehension(n, frame, lambda f: [(self.eval(n.key, f), self.eval(n.value, f))])
        if not isinstance(pairs, ListV) or not pairs.is_concrete:
            return Unknown("dict comprehension over a symbolic number of items")
        d = DictV()
        for item in pairs.items:
            if not isinstance(item, tuple):
                return Unknown("dict comprehension")
            k, v = item
            d.items[k.obj if isinstance(k, Const) else k] = v
        return d

    def _comprehension(self, n, frame, produce) -> Value:
        inner = Frame(frame.filename, frame.globals, {}, frame.pc, frame, frame.cells, frame.func)
        inner.returns = frame.returns
        results: list = []
        symbolic_count = [1]

        def run(gens, f):
            if not gens:
                results.extend(produce(f))
                return
            g = gens[0]
            seq = self.caller.iterate(self.eval(g.iter, f), f)
            if not isinstance(seq, list):
                elem, count = seq
                symbolic_count[0] = sym.mul(symbolic_count[0], count) if count is not None else None
                seq = [elem if elem is not None else Unknown("element of an unknown iterable")]
            for item in seq:
                self.assign(g.target, item, f, n.lineno)
                keep = True
                for cond in g.ifs:
                    verdict, _ = self.truth(self.eval(cond, f), f)
                    if verdict is False:
                        keep = False
                    elif verdict is None:
                        symbolic_count[0] = None
                if keep:
                    run(gens[1:], f)

        run(n.generators, inner)
        if symbolic_count[0] == 1:
            return ListV(results)
        if not results:
            return ListV()
        elem = widen_values([r for r in results]) if not isinstance(results[0], tuple) else results[0]
        return ListV(tail=elem, tail_count=symbolic_count[0])

    # ================================================================== helpers
    def truth(self, v: Value, frame: Frame):
        """(True|False|None, condition) for the truthiness of ``v`` on this path.

        The condition is a sympy boolean over the symbols when the answer depends on
        them, or None when it depends on tensor values (or cannot be expressed)."""
        if isinstance(v, Const):
            try:
                return bool(v.obj), None
            except Exception:
                return None, None
        if isinstance(v, SymScalar):
            if v.expr is None:
                return None, None
            cond = v.expr if v.kind is bool else sympy.Ne(v.expr, 0)
            return _decide(cond, frame.pc)
        if isinstance(v, (TupleV,)):
            return len(v.items) > 0, None
        if isinstance(v, ListV):
            if v.items:
                return True, None
            if v.tail is None:
                return False, None
            return _decide(sympy.Ne(sympy.sympify(v.tail_count), 0), frame.pc) if v.tail_count is not None \
                else (None, None)
        if isinstance(v, DictV):
            return len(v.items) > 0, None
        if isinstance(v, (ObjV, Closure, BoundMethod)):
            return True, None
        if isinstance(v, TensorType):
            return None, None
        if isinstance(v, UnionV):
            verdicts = []
            for cond, option in v.options:
                verdict, c = self.truth(option, frame)
                if verdict is None and c is None:
                    return None, None
                verdicts.append(sympy.And(cond, c) if verdict is None else (cond if verdict else sympy.false))
            total = sympy.Or(*verdicts)
            return _decide(total, frame.pc)
        return None, None

    def _opaque_condition(self, test: Value, line: int, report: bool = True):
        """The condition both paths of an undecided branch are analyzed under. When the
        test is undecided because the analysis lost a value (not because of tensor data),
        errors found under it are speculative (see AnalysisContext.report)."""
        speculative = _lost_by_analysis(test)
        if report:
            self.ctx.report("SI003", "branch condition is unknown to the analysis; both branches analyzed"
                            if speculative else "branch condition depends on tensor values; both branches analyzed")
        return self.ctx.data_condition(line, speculative)

    def lift(self, fn, *values):
        """Apply ``fn`` to each combination of union options; join the results."""
        if not any(isinstance(v, UnionV) for v in values):
            return fn(*values)
        combos = [(sympy.true, [])]
        for v in values:
            opts = flatten_union(v) if isinstance(v, UnionV) else [(sympy.true, v)]
            combos = [(sympy.And(c, oc), args + [ov]) for c, args in combos for oc, ov in opts]
            # drop combinations the current path rules out (an outer split on the same
            # condition, e.g. a call made per option of its **kwargs)
            combos = [(c, a) for c, a in combos if not infeasible(sympy.And(self.ctx.pc, c))]
        if len(combos) > 16:
            return Unknown("too many shape variants")
        results = []
        saved = self.ctx.pc
        try:
            for c, args in combos:
                self.ctx.pc = sympy.And(saved, c)
                with sym.assuming(self.ctx.pc):
                    results.append((c, fn(*args)))
        finally:
            self.ctx.pc = saved
        return make_union(results)


# ---- module helpers ---------------------------------------------------------------------


_LOST_REASONS = ("unknown", "undecided", "abstract")


def _lost_by_analysis(v: Value) -> bool:
    """Whether ``v`` is undecided because the analysis lost track of a value (an Unknown,
    a test over one) rather than because it depends on tensor data."""
    if isinstance(v, Unknown):
        return True
    if isinstance(v, SymScalar) and v.expr is None:
        return any(word in (v.reason or "") for word in _LOST_REASONS)
    if isinstance(v, UnionV):
        return any(_lost_by_analysis(o) for _, o in v.options)
    return False


def _decide(cond, pc):
    cond = simplify_condition(cond) if not isinstance(cond, sympy.Rel) else cond
    if cond is sympy.true or cond is True:
        return True, None
    if cond is sympy.false or cond is False:
        return False, None
    if isinstance(cond, sympy.Rel):
        verdict = sym.compare(_REL_OPS.get(type(cond), "=="), cond.lhs, cond.rhs) \
            if type(cond) in _REL_OPS else None
        if verdict is not None:
            return verdict, None
    facts = sympy.And.make_args(pc) if pc is not sympy.true else ()
    if cond in facts:
        return True, None
    if sympy.Not(cond) in facts or any(sympy.Not(f) == cond for f in facts):
        return False, None
    return None, cond


_REL_OPS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
            sympy.Ge: ">="}


def _narrow(value: Value, pc) -> Value:
    """A union read on a path keeps only the options that path allows."""
    if not isinstance(value, UnionV) or pc is sympy.true:
        return value
    kept = [(c, v) for c, v in value.options if _decide(sympy.And(pc, c), sympy.true)[0] is not False
            and _decide(c, pc)[0] is not False]
    if len(kept) == len(value.options):
        return value
    return make_union(kept) if kept else value


def _merge_flows(a: Flow, b: Flow, parent_pc=None) -> Flow:
    return Flow(join_frames([a.normal, b.normal], parent_pc=parent_pc), a.breaks + b.breaks,
                a.continues + b.continues)


def _load(target: ast.expr) -> ast.expr:
    """The target of an augmented assignment, read as an expression."""
    import copy

    node = copy.copy(target)
    node.ctx = ast.Load()
    return node


def _cond_str(cond) -> str:
    return str(cond)


def _kind(v) -> str:
    return type(v).__name__


def _same_value(a, b) -> bool:
    try:
        return a == b
    except Exception:
        return a is b


def _lose_statement(stmt: ast.stmt, frame: Frame, lost: Unknown) -> Flow:
    """The flow after a statement whose analysis failed: every name it may bind is
    ``lost`` (in a compound statement, those of all its branches: a failure deep inside an
    ``if`` must not leave its names undefined after it), and where it may return, it
    returns ``lost`` too (a ``return`` always does; a compound statement holding one also
    falls through)."""
    for name in _bound_names(stmt):
        frame.env[name] = lost
    if isinstance(stmt, ast.Return):
        frame.returns.append((frame.pc, lost))
        return Flow(None)
    if any(isinstance(n, ast.Return) for n in _own_nodes(stmt)):
        frame.returns.append((frame.pc, lost))
    return Flow(frame)


def _own_nodes(stmt: ast.stmt):
    """The nodes of ``stmt`` in its own scope: not inside a function, lambda, class body or
    comprehension it defines (their names and returns are their own)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if node is not stmt and isinstance(node, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(node))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _bound_names(stmt: ast.stmt) -> list:
    """The names ``stmt`` may bind in the running scope, each once."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    names = []
    for node in _own_nodes(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    return list(dict.fromkeys(names))


def _join_items(items: list) -> Value:
    return widen_values(items) if items else Unknown("empty sequence")
