"""Calls, attributes, items and iteration: where the concrete and static halves meet.

A call goes to (in order) a module rule, a function rule, a modelled builtin, the
interpreted source of a Python function, or, when every argument is concrete and the
callee is not torch's, the real function. Anything else gives Unknown with a reason.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import inspect
import types
from typing import Any, Optional

import sympy
import torch

from .. import symbolic as sym
from ..diagnostics import render_dims
from ..ops.registry import METHOD_RULES, MODULE_RULES, Rule, lookup_function
from ..shape_fns import ShapeError
from ..values import (NONE, BoundMethod, Closure, Const, DictV, ListV, ObjV, SuperV, SymScalar, TensorType,
                      TupleV, UnionV, Unknown, Value, from_python)
from .state import MAX_DEPTH, Frame, is_library_file, is_stdlib_file, make_union, widen_values

_NO_OP_CALLS = {print}
# Looked up by name: importing torch._dynamo just to get these objects costs a second.
_FALSE_IN_ANALYSIS = {"is_scripting", "is_tracing", "is_compiling", "is_dynamo_compiling",
                      "is_exporting"}
_MAX_REAL_ITER = 100_000


class RuleUnknown(Exception):
    """Raised by a rule that cannot decide its result; the message is the reason."""


def _is_torch_callable(obj) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod.startswith("torch") or isinstance(obj, torch._ops.OpOverloadPacket)


class Caller:
    def __init__(self, interp):
        self.interp = interp
        self.ctx = interp.ctx
        from . import builtins_model

        self.builtins = builtins_model.HANDLERS
        self.container_methods = builtins_model.CONTAINER_METHODS
        self.bound_methods = builtins_model.BOUND_METHODS

    # ------------------------------------------------------------------ values
    def wrap(self, obj: Any) -> Value:
        if isinstance(obj, Value):
            return obj
        if _is_numpy_scalar(obj):  # np.sqrt(d) in model code: the Python number it stands for
            obj = obj.item()
        return from_python(obj)

    # ------------------------------------------------------------------ calls
    def call(self, func: Value, args: list, kwargs: dict, frame: Frame, node=None) -> Value:
        """The result of calling ``func``; an analyzer failure inside the call makes the
        result unknown (with an SI005 at the call) and the analysis goes on."""
        try:
            return self._call(func, args, kwargs, frame, node)
        except RecursionError:
            raise  # unwound to the statement, where the depth is reported
        except Exception as e:
            return self.ctx.internal_failure(f"call of {_describe_callee(func)}", e)

    def _call(self, func: Value, args: list, kwargs: dict, frame: Frame, node=None) -> Value:
        if isinstance(func, UnionV):
            return self.interp.lift(lambda f: self.call(f, args, kwargs, frame, node), func)
        if isinstance(func, Closure):
            return self.call_closure(func, args, kwargs, frame)
        if isinstance(func, BoundMethod):
            if isinstance(func.func, str):
                if isinstance(func.self_value, TensorType):
                    return self.call_tensor_method(func.self_value, func.func, args, kwargs, frame)
                handler = self.container_methods.get((type(func.self_value), func.func))
                if handler is not None:
                    return handler(self, func.self_value, args, kwargs, frame)
                return Unknown(f"method {func.func} of {type(func.self_value).__name__}")
            return self.call_callable(func.func, [func.self_value] + list(args), kwargs, frame)
        if isinstance(func, Const):
            return self.call_object(func.obj, args, kwargs, frame)
        if isinstance(func, ObjV):
            call = _class_attr(func.cls, "__call__")
            if call is not None:
                return self.call_callable(call, [func] + list(args), kwargs, frame)
        if isinstance(func, Unknown):
            return func
        return Unknown(f"call of {type(func).__name__}")

    def call_callable(self, fn, args, kwargs, frame) -> Value:
        if isinstance(fn, Closure):
            return self.call_closure(fn, args, kwargs, frame)
        return self.call_object(fn, args, kwargs, frame)

    def call_object(self, obj, args, kwargs, frame) -> Value:
        if isinstance(obj, torch.nn.Module):
            return self.call_module(obj, args, kwargs, frame)
        rule = lookup_function(obj)
        if rule is not None:
            return self.apply_rule(rule, args, kwargs, frame)
        handler = _lookup(self.builtins, obj)
        if handler is not None:
            return handler(self, args, kwargs, frame)
        if isinstance(obj, types.BuiltinMethodType) and obj.__self__ is not None:
            method = self.bound_methods.get((type(obj.__self__), obj.__name__))
            if method is not None:
                return method(self, obj.__self__, args, kwargs, frame)
        if obj in _NO_OP_CALLS or _is_logging_call(obj):
            return NONE
        if getattr(obj, "__name__", None) in _FALSE_IN_ANALYSIS and _is_torch_callable(obj):
            return Const(False)  # torch.jit.is_scripting(), torch.compiler.is_compiling(), ...
        if isinstance(obj, functools.partial):
            return self.call_object(obj.func, [self.wrap(a) for a in obj.args] + list(args),
                                    {**{k: self.wrap(v) for k, v in obj.keywords.items()}, **kwargs}, frame)
        if isinstance(obj, types.MethodType):
            return self.call_callable(obj.__func__, [self.wrap(obj.__self__)] + list(args), kwargs, frame)
        if isinstance(obj, (classmethod, staticmethod)):
            return self.call_object(obj.__func__, args, kwargs, frame)
        if isinstance(obj, type):
            return self.construct(obj, args, kwargs, frame)
        if isinstance(obj, types.FunctionType):
            module_rule = _forward_rule(obj)
            if module_rule is not None and args and isinstance(args[0], Const):
                return self.apply_module_rule(module_rule, args[0].obj, args[1:], kwargs, frame)
            if not _is_torch_callable(obj) or not _all_const(args, kwargs):
                return self.call_function(obj, args, kwargs, frame)
        if _all_const(args, kwargs) and callable(obj):
            return self.real_call(obj, args, kwargs)
        name = _qualname(obj)
        self.ctx.report("SI001", f"no shape rule for {name}; its result is unknown")
        return Unknown(f"no shape rule for {name}")

    def real_call(self, obj, args, kwargs) -> Value:
        """Call a function for real: every argument is a concrete Python object."""
        try:
            result = obj(*[a.obj for a in args], **{k: v.obj for k, v in kwargs.items()})
        except Exception as e:
            self.ctx.report("SI007", f"{_qualname(obj)}(...) raises {type(e).__name__}: {e}",
                            severity="warning")
            return Unknown(f"{type(e).__name__}: {e}")
        return self.wrap(result)

    def call_module(self, module: torch.nn.Module, args, kwargs, frame) -> Value:
        """``module(*args, **kwargs)``: its forward pre-hooks, forward and forward hooks,
        as ``nn.Module.__call__`` runs them (transformers collects hidden states with
        forward hooks). Backward hooks do not change shapes."""
        pre_hooks, hooks = self._forward_hooks(module)
        for hook_id, hook in pre_hooks:
            if self._has_key(module._forward_pre_hooks_with_kwargs, hook_id):
                new = self.call_hook(hook, [Const(module), TupleV(tuple(args)), DictV(kwargs)], frame)
                pair = new.items if isinstance(new, TupleV) and len(new.items) == 2 else None
                if new != NONE and (pair is None or not isinstance(pair[1], DictV)):
                    return Unknown("a forward pre-hook changed the arguments in a way not followed")
                if pair is not None:
                    args = self.iterate(pair[0], frame)
                    if not isinstance(args, list):
                        return Unknown("a forward pre-hook returned arguments of unknown number")
                    kwargs = dict(pair[1].items)
            else:
                new = self.call_hook(hook, [Const(module), TupleV(tuple(args))], frame)
                if new != NONE:
                    items = self.iterate(new, frame) if isinstance(new, TupleV) else [new]
                    if not isinstance(items, list) or isinstance(new, UnionV):
                        return Unknown("a forward pre-hook changed the arguments in a way not followed")
                    args = items
        result = self._call_forward(module, args, kwargs, frame)
        for hook_id, hook in hooks:
            with_kwargs = self._has_key(module._forward_hooks_with_kwargs, hook_id) or \
                self._has_key(torch.nn.modules.module._global_forward_hooks_with_kwargs, hook_id)
            hook_args = [Const(module), TupleV(tuple(args))] + ([DictV(kwargs)] if with_kwargs else []) + [result]
            new = self.call_hook(hook, hook_args, frame)
            before = result
            result = self.interp.lift(lambda r: before if r == NONE else r, new)
        return result

    def call_hook(self, hook, args, frame) -> Value:
        if isinstance(hook, Value):   # registered during the analysis (``_forward_hooks``)
            return self.call(hook, args, {}, frame)
        return self.call_callable(hook, args, {}, frame) if isinstance(hook, types.FunctionType) \
            else self.call_object(hook, args, {}, frame)

    def _forward_hooks(self, module: torch.nn.Module) -> tuple[list, list]:
        """(forward pre-hooks, forward hooks) as (id, hook) pairs, global ones first, in the
        order ``nn.Module.__call__`` runs them; a hook registered during the analysis comes
        after the real ones, as the Value it was given."""
        g = torch.nn.modules.module
        return tuple([pair for table in tables for pair in self._dict_items(table)]
                     for tables in ((g._global_forward_pre_hooks, module._forward_pre_hooks),
                                    (g._global_forward_hooks, module._forward_hooks)))

    def _dict_items(self, d: dict) -> list:
        """A real dict's items as the analysis sees them: values set in the overlay, then
        the keys it added."""
        overlay = self.ctx.attr_overlay
        items = [(k, overlay.get((id(d), ("item", k)), v)) for k, v in d.items()]
        added = self.ctx.added_keys.get(id(d))
        if added is not None:
            items += [(k, overlay[(id(d), ("item", k))]) for k in added[1]]
        return items

    def _has_key(self, d: dict, key) -> bool:
        added = self.ctx.added_keys.get(id(d))
        return key in d or added is not None and key in added[1]

    def _call_forward(self, module: torch.nn.Module, args, kwargs, frame) -> Value:
        if type(module).forward is torch.nn.Sequential.forward:
            value = args[0] if args else Unknown("Sequential called without input")
            for child in module:
                value = self.call_module(child, [value], {}, frame)
            return value
        rule = _module_rule(type(module))
        if rule is not None:
            return self.apply_module_rule(rule, module, args, kwargs, frame)
        forward = type(module).forward
        return self.call_callable(forward, [Const(module)] + list(args), kwargs, frame)

    def apply_module_rule(self, rule: Rule, module, args, kwargs, frame) -> Value:
        return self.apply_rule(rule, [module] + list(args), kwargs, frame, label=type(module).__name__)

    def call_tensor_method(self, t: TensorType, name: str, args, kwargs, frame) -> Value:
        rule = METHOD_RULES.get(name)
        if rule is not None:
            return self.apply_rule(rule, [t] + list(args), kwargs, frame)
        if name.endswith("_") and not name.endswith("__") and name[:-1] in METHOD_RULES:
            # in-place variant: same shape rule; the tensor keeps its shape and dtype
            out = self.apply_rule(METHOD_RULES[name[:-1]], [t] + list(args), kwargs, frame)
            if isinstance(out, TensorType) and out.shape is not None and t.shape is not None \
                    and len(out.shape) != len(t.shape):
                self.ctx.report("SI101", f"in-place {name} would change the shape "
                                f"{sym.shape_str(t.shape)}", severity="error")
            return t
        self.ctx.report("SI001", f"no shape rule for Tensor.{name}; its result is unknown")
        return Unknown(f"no shape rule for Tensor.{name}")

    def apply_rule(self, rule: Rule, args, kwargs, frame, label: Optional[str] = None) -> Value:
        label = label or rule.name

        def one(*flat):
            a, kw = flat[:len(args)], dict(zip(kwargs.keys(), flat[len(args):]))
            for v in list(a) + list(kw.values()):
                if isinstance(v, Unknown):
                    return v
            try:
                bound = rule.signature.bind(self.ctx, *a, **kw)
            except TypeError as e:
                self.ctx.report("SI007", f"{label}: {e}", severity="error")
                return Unknown(f"bad call to {label}: {e}")
            try:
                return rule.fn(*bound.args, **bound.kwargs)
            except ShapeError as e:
                when = sympy.And(self.ctx.pc, sympy.Not(e.unless)) if e.unless is not None else None
                self.ctx.report(e.code, f"{label}: {e.message}", severity="error", when=when,
                                dims=render_dims(e.dims) if e.dims else None)
                return Unknown(f"shape error in {label}: {e.message}")
            except RuleUnknown as e:
                self.ctx.report("SI001", f"{label}: {e}")
                return Unknown(f"{label}: {e}")
            except Exception as e:  # a bug in a rule must not stop the analysis
                return self.ctx.internal_failure(f"rule {label}", e)

        flat = [_widen_nested(v) for v in list(args) + list(kwargs.values())]
        return self.interp.lift(one, *flat)

    def call_function(self, func, args, kwargs, frame, final_env: Optional[dict] = None) -> Value:
        func = _skip_library_wrappers(func)
        code = getattr(func, "__code__", None)
        node = self.ctx.sources.function_node(code) if code is not None else None
        if code is not None and is_stdlib_file(code.co_filename):
            # the standard library is not model code: run it on concrete values only
            if _all_const(args, kwargs):
                return self.real_call(func, args, kwargs)
            self.ctx.report("SI006", f"{_qualname(func)} (standard library) called with abstract "
                            f"arguments; result unknown")
            return Unknown(f"{_qualname(func)} with abstract arguments")
        if node is None or isinstance(node, ast.Lambda) and code.co_name != "<lambda>":
            if _all_const(args, kwargs):
                return self.real_call(func, args, kwargs)
            self.ctx.report("SI006", f"source of {_qualname(func)} is not available; result unknown")
            return Unknown(f"no source for {_qualname(func)}")
        try:
            sig = _signature(func)
            bound = sig.bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            self.ctx.report("SI007", f"{_qualname(func)}(): {e}", severity="error")
            return Unknown(f"bad call to {_qualname(func)}")
        env = self._bind_env(sig, bound, lambda default: self.wrap(default))
        cells = {}
        if func.__closure__:
            for name, cell in zip(code.co_freevars, func.__closure__):
                try:
                    cells[name] = self.wrap(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
        callee = Frame(code.co_filename, func.__globals__, env, self._callee_pc(frame), None, cells, func)
        if isinstance(node, ast.Lambda):
            return self._run_lambda(node, code, callee)
        return self._run(node, callee, _qualname(func), final_env)

    def _run_lambda(self, node, code, callee: Frame) -> Value:
        """A lambda made by real Python (a module attribute, a default argument): its
        body is an expression. Only a lambda alone on its line can be told apart."""
        tree = self.ctx.sources.module(code.co_filename)
        line = code.co_firstlineno
        if sum(isinstance(n, ast.Lambda) and n.lineno == line for n in ast.walk(tree)) != 1:
            self.ctx.report("SI006", f"several lambdas on line {line}: which one was called is "
                            "not known; result unknown")
            return Unknown(f"a lambda on line {line} among several")
        saved_loc, saved_pc = self.ctx.loc, self.ctx.pc
        try:
            return self.interp.eval(node.body, callee)
        finally:
            self.ctx.loc, self.ctx.pc = saved_loc, saved_pc

    def call_closure(self, fn: Closure, args, kwargs, frame) -> Value:
        try:
            sig = _closure_signature(fn)
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            self.ctx.report("SI007", f"call of a local function: {e}", severity="error")
            return Unknown("bad call to a local function")
        env = self._bind_env(sig, bound, lambda default: default)
        callee = Frame(fn.filename, fn.globals, env, self._callee_pc(frame), fn.scope, fn.scope.cells if fn.scope else {},
                       fn.scope.func if fn.scope else None)
        if isinstance(fn.node, ast.Lambda):
            return self.interp.eval(fn.node.body, callee)
        return self._run(fn.node, callee, fn.node.name)

    def _callee_pc(self, frame) -> Any:
        """The path condition a call runs under: the caller's, and the condition of the
        union option the call is made for (``lift`` narrows ``ctx.pc`` per option), so
        that what the callee reports stays under that option's condition."""
        pc = self.ctx.pc
        if frame is None or frame.pc is pc or frame.pc == pc:
            return pc
        return sympy.And(frame.pc, pc)

    def _bind_env(self, sig, bound, default_value) -> dict:
        env = {}
        for name, param in sig.parameters.items():
            if name in bound.arguments:
                v = bound.arguments[name]
                if param.kind is param.VAR_POSITIONAL:
                    v = TupleV(tuple(v))
                elif param.kind is param.VAR_KEYWORD:
                    v = DictV(v)
                env[name] = v
            elif param.kind is param.VAR_POSITIONAL:
                env[name] = TupleV(())
            elif param.kind is param.VAR_KEYWORD:
                env[name] = DictV()
            elif param.default is not param.empty:
                env[name] = default_value(param.default)
        return env

    def _run(self, node, callee: Frame, name: str, final_env: Optional[dict] = None) -> Value:
        if self.ctx.depth >= MAX_DEPTH:
            self.ctx.report("SI004", f"call depth limit reached at {name}")
            return Unknown("call depth limit")
        saved_loc, saved_pc = self.ctx.loc, self.ctx.pc
        self.ctx.depth += 1
        self.ctx.call_stack.append(saved_loc)
        try:
            flow = self.interp.exec_block(node.body, callee)
            if final_env is not None and flow.normal is not None:
                final_env.update(flow.normal.env)
        finally:
            self.ctx.call_stack.pop()
            self.ctx.depth -= 1
            self.ctx.loc, self.ctx.pc = saved_loc, saved_pc
        if _is_generator(node):
            return ListV(callee.yields)
        returns = list(callee.returns)
        if flow.normal is not None:
            returns.append((flow.normal.pc, NONE))
        if not returns:
            return Unknown(f"{name} raises on every path")
        return make_union(returns)

    def construct(self, cls: type, args, kwargs, frame) -> Value:
        handler = _lookup(self.builtins, cls)
        if handler is not None:
            return handler(self, args, kwargs, frame)
        if _all_const(args, kwargs):  # every argument concrete: build the real object
            return self.real_call(cls, args, kwargs)
        if issubclass(cls, (torch.nn.Module, torch.Tensor)):
            return Unknown(f"{cls.__name__} built from abstract arguments")
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # namedtuple
            sig = inspect.signature(cls)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                self.ctx.report("SI007", f"{cls.__name__}(): {e}", severity="error")
                return Unknown(f"bad call to {cls.__name__}")
            bound.apply_defaults()
            return ObjV(cls, {f: self.wrap(bound.arguments[f]) for f in cls._fields})
        obj = ObjV(cls)
        if dataclasses.is_dataclass(cls):
            fields = [f for f in dataclasses.fields(cls) if f.init]
            try:
                bound = inspect.signature(cls).bind(*args, **kwargs)
            except TypeError as e:
                self.ctx.report("SI007", f"{cls.__name__}(): {e}", severity="error")
                return Unknown(f"bad call to {cls.__name__}")
            for f in fields:
                if f.name in bound.arguments:
                    obj.attrs[f.name] = bound.arguments[f.name]
                elif f.default is not dataclasses.MISSING:
                    obj.attrs[f.name] = self.wrap(f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    obj.attrs[f.name] = self.wrap(f.default_factory())
            post = _class_attr(cls, "__post_init__")
            if post is not None:
                return self._initialize(post, obj, [], {}, frame)
            return obj
        init = _class_attr(cls, "__init__")
        if init is not None and init is not object.__init__:
            return self._initialize(init, obj, args, kwargs, frame)
        return obj

    def _initialize(self, method, obj: ObjV, args, kwargs, frame) -> Value:
        """Run ``__init__``/``__post_init__`` on ``obj`` and return the object as the method
        left it: paths forked inside the method mutate copies of it, joined at its end."""
        if not isinstance(method, types.FunctionType):
            self.call_callable(method, [obj] + list(args), kwargs, frame)
            return obj
        final_env: dict = {}
        self.call_function(method, [obj] + list(args), kwargs, frame, final_env)
        params = list(_signature(method).parameters)
        final = final_env.get(params[0]) if params else None
        if isinstance(final, ObjV) and final.cls is obj.cls:
            return final
        if isinstance(final, UnionV) and any(isinstance(o, ObjV) and o.cls is obj.cls for _, o in final.options):
            return final  # per path (options the join could not keep apart are Unknown)
        if final is not None:
            # the paths' objects could not be joined: what the method set is lost, and the
            # object as it was before the method ran would be a wrong value
            return final if isinstance(final, Unknown) else Unknown(f"{obj.cls.__name__} differs across paths")
        return obj

    # ------------------------------------------------------------------ attributes
    def get_attr(self, obj: Value, name: str) -> Value:
        if isinstance(obj, Const):
            return self._const_attr(obj.obj, name)
        if isinstance(obj, TensorType):
            from ..ops.tensor_attrs import tensor_attribute

            return tensor_attribute(obj, name)
        if isinstance(obj, ObjV):
            if name in obj.attrs:
                return obj.attrs[name]
            if name == "__dict__":
                view = DictV()
                view.items = obj.attrs  # shares the attributes, as Python's __dict__ does
                return view
            if name == "__class__":
                return Const(obj.cls)
            attr = _class_attr(obj.cls, name)
            if attr is None:
                self.ctx.report("SI009", f"'{obj.cls.__name__}' object has no attribute '{name}'",
                                severity="error")
                return Unknown(f"no attribute {name}")
            return self._bind_class_attr(obj, attr)
        if isinstance(obj, SuperV):
            mro = _mro_of(obj.self_value)
            if obj.cls in mro:
                for klass in mro[mro.index(obj.cls) + 1:]:
                    if name in klass.__dict__:
                        return self._bind_class_attr(obj.self_value, klass.__dict__[name])
            return Unknown(f"super() has no attribute {name}")
        if isinstance(obj, (TupleV, ListV, DictV, SymScalar)):
            return BoundMethod(obj, name)
        if isinstance(obj, Unknown):
            return obj
        return Unknown(f"attribute {name} of {type(obj).__name__}")

    def _bind_class_attr(self, self_value, attr) -> Value:
        if isinstance(attr, (types.FunctionType, Closure)):
            return BoundMethod(self_value, attr)
        if isinstance(self_value, ObjV) and attr in _OBJECT_ATTRIBUTE_SLOTS:
            # object.__setattr__ (super().__setattr__ in a class that defines its own):
            # acts on the instance's attributes, never on a dict subclass's items
            return BoundMethod(self_value, attr.__name__)
        if isinstance(self_value, ObjV) and self_value.mapping is not None and \
                isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
            # dict's own C methods on a dict subclass: act on the object's items
            return BoundMethod(self_value.mapping_view(), attr.__name__)
        if isinstance(attr, property):
            return self.call_callable(attr.fget, [self_value], {}, None)
        if isinstance(attr, staticmethod):
            return Const(attr.__func__)
        if isinstance(attr, classmethod):
            return Const(types.MethodType(attr.__func__, _cls_of(self_value)))
        if isinstance(self_value, Const) and \
                isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
            # a C method found on a base class (super().get(...) in a dict subclass): bound
            # to the concrete object, as attribute lookup on it would
            return self.wrap(attr.__get__(self_value.obj, type(self_value.obj)))
        return self.wrap(attr)

    def _const_attr(self, obj, name) -> Value:
        key = (id(obj), name)
        if key in self.ctx.attr_overlay:
            return self.ctx.attr_overlay[key]
        if isinstance(obj, torch.nn.Module):
            d = obj.__dict__
            for table in ("_parameters", "_buffers", "_modules"):
                if name in d.get(table, {}):
                    v = d[table][name]
                    return NONE if v is None else self.wrap(v)
        try:
            value = getattr(obj, name)
        except AttributeError:
            self.ctx.report("SI009", f"'{type(obj).__name__}' object has no attribute '{name}'",
                            severity="error")
            return Unknown(f"no attribute {name}")
        except Exception as e:
            return Unknown(f"reading {name} raised {type(e).__name__}")
        return self.wrap(value)

    def set_attr(self, obj: Value, name: str, value: Value) -> None:
        if isinstance(obj, ObjV):
            setattr_ = _class_attr(obj.cls, "__setattr__")
            if isinstance(setattr_, types.FunctionType):
                # the class's own __setattr__ runs, as in Python (ModelOutput keeps its
                # items in step with its fields there)
                self.call_callable(setattr_, [obj, Const(name), value], {}, None)
            else:
                obj.attrs[name] = value
        elif isinstance(obj, Const):
            self.ctx.attr_overlay[(id(obj.obj), name)] = value

    # ------------------------------------------------------------------ items
    def get_item(self, obj: Value, index: Value, frame) -> Value:
        if isinstance(obj, TensorType):
            return self.apply_rule(METHOD_RULES["__getitem__"], [obj, index], {}, frame)
        if isinstance(obj, (TupleV, ListV)):
            if isinstance(obj, TupleV) and isinstance(index, Const) and type(index.obj) is int \
                    and not -len(obj.items) <= index.obj < len(obj.items):
                self.ctx.report("SI120", f"tuple index {index.obj} out of range for a tuple of "
                                f"length {len(obj.items)}", severity="error")
            return _sequence_item(obj, index)
        if isinstance(obj, DictV):
            key = index.obj if isinstance(index, Const) else index
            try:
                if key in obj.items:
                    return obj.items[key]
            except TypeError:
                pass
            return Unknown(f"key {key!r} not in dict")
        if isinstance(obj, ObjV) and issubclass(obj.cls, tuple) and hasattr(obj.cls, "_fields"):
            return _sequence_item(TupleV(tuple(obj.attrs[f] for f in obj.cls._fields)), index)
        if isinstance(obj, ObjV):
            getitem = _class_attr(obj.cls, "__getitem__")
            if isinstance(getitem, types.FunctionType):
                return self.call_callable(getitem, [obj, index], {}, frame)
            if obj.mapping is not None:
                return self.get_item(obj.mapping_view(), index, frame)
        if isinstance(obj, Const):
            if isinstance(index, Const):
                key = _item_overlay_key(obj.obj, index.obj) or _new_key(obj.obj, index.obj)
                if key in self.ctx.attr_overlay:
                    return self.ctx.attr_overlay[key]
                try:
                    return self.wrap(obj.obj[index.obj])
                except Exception as e:
                    self.ctx.report("SI120", f"indexing raised {type(e).__name__}: {e}", severity="error")
                    return Unknown(f"indexing raised {type(e).__name__}")
            if isinstance(obj.obj, (tuple, list)):
                return _sequence_item(TupleV(tuple(self.wrap(x) for x in obj.obj)), index)
        if isinstance(obj, Unknown):
            return obj
        return Unknown(f"item of {type(obj).__name__}")

    def set_item(self, obj: Value, index: Value, value: Value, frame) -> None:
        if isinstance(obj, ObjV):
            setitem = _class_attr(obj.cls, "__setitem__")
            if isinstance(setitem, types.FunctionType):
                self.call_callable(setitem, [obj, index, value], {}, frame)
            elif obj.mapping is not None:
                self.set_item(obj.mapping_view(), index, value, frame)
            return
        if isinstance(obj, ListV) and isinstance(index, Const) and isinstance(index.obj, int) \
                and obj.is_concrete and -len(obj.items) <= index.obj < len(obj.items):
            obj.items[index.obj] = value
        elif isinstance(obj, DictV):
            obj.items[index.obj if isinstance(index, Const) else index] = value
        elif isinstance(obj, TensorType):
            # x[idx] = v keeps x's shape; the indexing rule still checks the index
            self.apply_rule(METHOD_RULES["__getitem__"], [obj, index], {}, frame)
        elif isinstance(obj, ListV):
            if obj.tail is not None:
                obj.tail = widen_values([obj.tail, value])
            obj.items = [widen_values([x, value]) for x in obj.items]
        elif isinstance(obj, Const) and isinstance(index, Const):
            # an item of a real list or dict (a cache's per-layer states): kept in the
            # overlay, the real object is never changed
            key = _item_overlay_key(obj.obj, index.obj)
            if key is None:
                key = _new_key(obj.obj, index.obj)
                if key is not None:   # a new key of a real dict: listed (``_dict_items``)
                    added = self.ctx.added_keys.setdefault(id(obj.obj), (obj.obj, []))[1]
                    if index.obj not in added:   # (set again: listed once)
                        added.append(index.obj)
            if key is not None:
                self.ctx.attr_overlay[key] = value

    # ------------------------------------------------------------------ iteration
    def iterate(self, value: Value, frame):
        """The items of an iterable: a list of values, or (element, count) when the
        number of items is symbolic (count may be None when unknown)."""
        if isinstance(value, TupleV):
            return list(value.items)
        if isinstance(value, ListV):
            if value.is_concrete:
                return list(value.items)
            if not value.items:
                return value.tail, value.tail_count
            return widen_values(value.items + [value.tail]), value.length
        if isinstance(value, DictV):
            return [k if isinstance(k, Value) else Const(k) for k in value.items]
        if isinstance(value, ObjV) and issubclass(value.cls, tuple) and hasattr(value.cls, "_fields"):
            return [value.attrs[f] for f in value.cls._fields]
        if isinstance(value, ObjV) and value.mapping is not None:
            return [Const(k) for k in value.mapping]
        if isinstance(value, TensorType):
            from ..ops.tensor_attrs import iterate_tensor

            return iterate_tensor(value)
        if isinstance(value, Const):
            obj = value.obj
            if isinstance(obj, torch.Tensor):
                return self.iterate(self.wrap(obj), frame)
            try:
                n = len(obj)
            except TypeError:
                n = None
            if n is not None and n > _MAX_REAL_ITER:
                return Unknown("very long iterable"), n
            try:
                items = [self.wrap(x) for x in obj]
            except TypeError:
                return Unknown(f"{type(obj).__name__} is not iterable"), None
            if isinstance(obj, list):  # items assigned during the analysis
                items = [self.ctx.attr_overlay.get(_item_overlay_key(obj, i), x) for i, x in enumerate(items)]
            elif type(obj) in _DICTS and id(obj) in self.ctx.added_keys:   # keys it added
                items += [Const(k) for k in self.ctx.added_keys[id(obj)][1]]
            return items
        if isinstance(value, UnionV):
            opts = [self.iterate(v, frame) for _, v in value.options]
            if all(isinstance(o, list) for o in opts) and len({len(o) for o in opts}) == 1:
                return [make_union([(c, o[i]) for (c, _), o in zip(value.options, opts)])
                        for i in range(len(opts[0]))]
            return Unknown("iteration over values that differ by path"), None
        if isinstance(value, Unknown):
            return value, None
        return Unknown(f"iteration over {type(value).__name__}"), None

    def enter_context(self, value: Value, frame) -> Value:
        if isinstance(value, Const):
            enter = getattr(type(value.obj), "__enter__", None)
            if enter is not None and _is_torch_callable(type(value.obj)) or value.obj is None:
                return value  # torch.no_grad() and friends: no effect on shapes
            if enter is not None:
                return self.call_callable(enter, [value], {}, frame)
        if isinstance(value, ObjV):
            enter = _class_attr(value.cls, "__enter__")
            if enter is not None:
                return self.call_callable(enter, [value], {}, frame)
        return value


# ---- helpers -----------------------------------------------------------------------------


_OBJECT_ATTRIBUTE_SLOTS = (object.__setattr__, object.__delattr__)


# real dicts whose items the overlay tracks (a module's hook tables are ordered dicts)
_DICTS = (dict, collections.OrderedDict)


def _new_key(container, index) -> Optional[tuple]:
    """The overlay key of ``container[index]`` for a key the analysis may add to a real
    dict (any hashable one); None for anything else."""
    if type(container) not in _DICTS:
        return None
    try:
        hash(index)
    except TypeError:
        return None
    return id(container), ("item", index)


def _item_overlay_key(container, index) -> Optional[tuple]:
    """The overlay key of ``container[index]`` for a real list (an index in range) or dict
    (a key it has); None for anything else, whose items are not tracked."""
    if type(container) is list and type(index) is int and -len(container) <= index < len(container):
        return id(container), ("item", index % len(container))
    if type(container) in _DICTS:
        try:
            if index in container:
                return id(container), ("item", index)
        except TypeError:
            return None
    return None


def _is_numpy_scalar(obj) -> bool:
    return type(obj).__module__ == "numpy" and hasattr(obj, "item") and getattr(obj, "ndim", None) == 0


def _describe_callee(func: Value) -> str:
    if isinstance(func, Const):
        return _qualname(func.obj)
    if isinstance(func, BoundMethod):
        return func.func if isinstance(func.func, str) else _qualname(func.func)
    if isinstance(func, Closure):
        return getattr(func.node, "name", "a lambda")
    return type(func).__name__


def _lookup(table: dict, obj):
    try:
        return table.get(obj)
    except TypeError:
        return None


def _all_const(args, kwargs) -> bool:
    return all(isinstance(a, Const) for a in args) and all(isinstance(v, Const) for v in kwargs.values())


def _qualname(obj) -> str:
    mod = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}.{name}" if mod and mod != "builtins" else name


def _is_logging_call(obj) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    self_obj = getattr(obj, "__self__", None)
    return mod in ("logging", "warnings") or type(self_obj).__module__ == "logging" \
        or (mod.startswith("transformers.utils.logging"))


@functools.lru_cache(maxsize=None)
def _module_rule(cls: type) -> Optional[Rule]:
    for klass in cls.__mro__:
        rule = MODULE_RULES.get(klass)
        if rule is not None:
            return rule if cls.forward is klass.forward else None
    return None


def _forward_rule(func) -> Optional[Rule]:
    """The module rule for ``SomeTorchModule.forward`` called as a plain function
    (``super().forward(x)`` in a subclass)."""
    if getattr(func, "__name__", "") != "forward":
        return None
    for cls, rule in MODULE_RULES.items():
        if cls.__dict__.get("forward") is func:
            return rule
    return None


def _skip_library_wrappers(func):
    """The function a decorator of torch or the standard library wraps (no_grad,
    functools.wraps-based helpers): their wrappers only set up context that does not
    change shapes. Model code's own wrappers are interpreted, since they can change
    what the wrapped function sees (transformers fills ``use_cache`` from the config)."""
    while hasattr(func, "__wrapped__"):
        code = getattr(func, "__code__", None)
        if code is not None and not is_library_file(code.co_filename):
            break
        func = func.__wrapped__
    return func


_SIGS: dict = {}


def _signature(func) -> inspect.Signature:
    sig = _SIGS.get(func)
    if sig is None:
        # the function's own parameters: a decorator's wrapper(*args, **kwargs), not the
        # signature functools.wraps advertises
        sig = _SIGS[func] = inspect.signature(func, follow_wrapped=False)
    return sig


def _closure_signature(fn: Closure) -> inspect.Signature:
    a = fn.node.args
    params = []
    positional = a.posonlyargs + a.args
    n_defaults = len(fn.defaults)
    for i, arg in enumerate(positional):
        kind = inspect.Parameter.POSITIONAL_ONLY if i < len(a.posonlyargs) else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        di = i - (len(positional) - n_defaults)
        default = fn.defaults[di] if di >= 0 else inspect.Parameter.empty
        params.append(inspect.Parameter(arg.arg, kind, default=default))
    if a.vararg:
        params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, fn.kw_defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=inspect.Parameter.empty if default is None else default))
    if a.kwarg:
        params.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def _is_generator(node) -> bool:
    for n in ast.walk(node):
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            # only yields of this function, not of nested ones
            return True
        if n is not node and isinstance(n, (ast.FunctionDef, ast.Lambda, ast.AsyncFunctionDef)):
            continue
    return False


def _class_attr(cls: type, name: str):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _mro_of(value) -> tuple:
    return _cls_of(value).__mro__


def _cls_of(value) -> type:
    if isinstance(value, ObjV):
        return value.cls
    if isinstance(value, Const):
        return type(value.obj)
    if isinstance(value, TensorType):
        return torch.Tensor
    return object


def _widen_nested(v: Value) -> Value:
    """Rules see unions only at the top level: unions inside containers are widened."""
    if isinstance(v, TupleV) and any(isinstance(x, UnionV) for x in v.items):
        return TupleV(tuple(widen_values([o for _, o in x.options]) if isinstance(x, UnionV) else x
                            for x in v.items))
    if isinstance(v, ListV) and any(isinstance(x, UnionV) for x in v.items):
        return ListV([widen_values([o for _, o in x.options]) if isinstance(x, UnionV) else x
                      for x in v.items], v.tail, v.tail_count)
    return v


def _sequence_item(seq, index: Value) -> Value:
    items = list(seq.items)
    if isinstance(index, Const) and isinstance(index.obj, slice):
        sl = index.obj
        if isinstance(seq, ListV) and not seq.is_concrete:
            return Unknown("slice of a symbolic-length list")
        if all(x is None or isinstance(x, int) for x in (sl.start, sl.stop, sl.step)):
            part = items[sl]
            return TupleV(tuple(part)) if isinstance(seq, TupleV) else ListV(part)
        return Unknown("slice with symbolic bounds of a sequence")
    if isinstance(index, Const) and isinstance(index.obj, int) and not isinstance(index.obj, bool):
        i = index.obj
        if isinstance(seq, ListV) and not seq.is_concrete:
            if 0 <= i < len(items):
                return items[i]
            if i < 0 and seq.tail is not None:
                return seq.tail
            return widen_values(items[i:] + [seq.tail]) if i >= 0 else Unknown("list index")
        if -len(items) <= i < len(items):
            return items[i]
        return Unknown(f"index {i} out of range for a sequence of length {len(items)}")
    all_items = items + ([seq.tail] if isinstance(seq, ListV) and seq.tail is not None else [])
    if all_items:
        return widen_values(all_items)
    return Unknown("index into an empty sequence")
