"""torch.fft: the transforms (shapes from shape_fns.fft_shape, dtypes complex or real by
kind), fftshift and the frequency helpers; complex views (view_as_real/complex) and
complex values built from parts (complex, polar)."""

from __future__ import annotations

import torch

from .. import shape_fns
from .. import symbolic as sym
from .common import T, default_float, dim_arg, dims_arg, is_none, like, py, shape_of, tensor, to_dtype
from .registry import op

_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}


def complex_of(dtype):
    return _COMPLEX_OF.get(dtype)


def real_of(dtype):
    """The dtype of a complex tensor's parts (a real dtype is its own)."""
    return _REAL_OF.get(dtype, dtype) if dtype is not None else None


def _fft_dtype(dtype, kind: str, name: str):
    """The output dtype: integers compute in the default float; half types have no CPU
    kernel (CUDA runs some sizes only), so their result dtype is left unknown."""
    if dtype is None:
        return None
    if kind == "r2c" and dtype.is_complex:
        raise shape_fns.ShapeError("SI160", f"{name} expects a real input tensor, got {str(dtype)[6:]}")
    if not dtype.is_floating_point and not dtype.is_complex:
        dtype = default_float()
    if dtype in (torch.float16, torch.bfloat16, torch.complex32):
        return None
    return real_of(dtype) if kind == "c2r" else dtype if dtype.is_complex else complex_of(dtype)


def _transform(name, input, s, dim, kind, default_dims=None):
    t = T(input)
    shape = shape_fns.fft_shape(shape_of(t), s, dim, kind, default_dims)
    dtype = _fft_dtype(t.dtype, kind, name)
    if dtype is None and t.dtype is not None:
        return tensor(None, shape, t.device, f"{name} of {str(t.dtype)[6:]} is not modelled")
    return like(t, shape, dtype)


def _one_dim(name, kind):
    def rule(ctx, input, n=None, dim=-1, norm=None, *, out=None):
        s = None if is_none(n) else (dim_arg(n, "n"),)
        if s is not None and s[0] == -1:  # fft(n=-1) is an error (fftn(s=(-1,)) is not)
            raise shape_fns.ShapeError("SI143", f"{name}: invalid number of data points (-1)")
        return _transform(name, input, s, (py(dim, "dim"),), kind)

    return rule


def _many_dims(name, kind, default_dims=None):
    def rule(ctx, input, s=None, dim=default_dims, norm=None, *, out=None):
        sizes = None if is_none(s) else dims_arg(s, "s")
        dims = None if is_none(dim) else py(dim, "dim")
        dims = (dims,) if isinstance(dims, int) else dims
        return _transform(name, input, sizes, dims, kind)

    return rule


for _name, _kind in (("fft", "c2c"), ("ifft", "c2c"), ("rfft", "r2c"), ("irfft", "c2r"), ("hfft", "c2r"),
                     ("ihfft", "r2c")):
    op(f"fft.{_name}", getattr(torch.fft, _name))(_one_dim(_name, _kind))
    op(f"fft.{_name}2", getattr(torch.fft, f"{_name}2"))(_many_dims(f"{_name}2", _kind, (-2, -1)))
    op(f"fft.{_name}n", getattr(torch.fft, f"{_name}n"))(_many_dims(f"{_name}n", _kind))


@op("fft.fftshift", torch.fft.fftshift, torch.fft.ifftshift)
def fftshift(ctx, input, dim=None):
    return T(input)


@op("fft.fftfreq", torch.fft.fftfreq)
def fftfreq(ctx, n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    return tensor(to_dtype(dtype, default_float()), (dim_arg(n, "n"),))


@op("fft.rfftfreq", torch.fft.rfftfreq)
def rfftfreq(ctx, n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    size = dim_arg(n, "n")
    return tensor(to_dtype(dtype, default_float()), (sym.add(sym.floordiv(size, 2), 1),))


@op("view_as_real", torch.view_as_real)
def view_as_real(ctx, input):
    t = T(input)
    if t.dtype is not None and not t.dtype.is_complex:
        raise shape_fns.ShapeError("SI160", f"view_as_real is only supported for complex tensors, got "
                                   f"{str(t.dtype)[6:]}")
    return like(t, tuple(shape_of(t)) + (2,), real_of(t.dtype))


@op("view_as_complex", torch.view_as_complex)
def view_as_complex(ctx, input):
    t = T(input)
    s = shape_of(t)
    if t.dtype is not None and t.dtype not in _COMPLEX_OF:
        raise shape_fns.ShapeError("SI160", f"view_as_complex is only supported for float64, float32 and "
                                   f"float16 tensors, got {str(t.dtype)[6:]}")
    if not s:
        raise shape_fns.ShapeError("SI161", "view_as_complex of a 0-d tensor")
    shape_fns.require_equal(s[-1], 2, "SI161", "view_as_complex: the last dim must have size 2")
    return like(t, s[:-1], complex_of(t.dtype))


def _from_parts(name: str, a, b):
    """torch.complex(real, imag) and torch.polar(abs, angle): parts of one float type,
    broadcast; the complex type of theirs (rotary embeddings' ``torch.polar(ones, freqs)``,
    DeepSeek-V2's). polar has no float16 kernel on the CPU: its type is left unknown."""
    x, y = T(a), T(b, "second argument")
    for t in (x, y):
        if t.dtype is not None and t.dtype not in _COMPLEX_OF:
            raise shape_fns.ShapeError("SI160", f"{name}: parts must be float16, float32 or "
                                       f"float64 tensors, got {str(t.dtype)[6:]}")
    if x.dtype is not None and y.dtype is not None and x.dtype != y.dtype:
        raise shape_fns.ShapeError("SI160", f"{name}: parts of two types, {str(x.dtype)[6:]} "
                                   f"and {str(y.dtype)[6:]}")
    dtype = x.dtype if x.dtype is not None else y.dtype
    shape = None if x.shape is None or y.shape is None else shape_fns.broadcast_shapes(x.shape, y.shape)
    if dtype == torch.float16 and name == "polar":
        return tensor(None, shape, x.device, "polar of float16 is not modelled (no CPU kernel)")
    return like(x, shape, complex_of(dtype))


@op("complex", torch.complex)
def complex_(ctx, real, imag, *, out=None):
    return _from_parts("complex", real, imag)


@op("polar", torch.polar)
def polar(ctx, abs, angle, *, out=None):
    return _from_parts("polar", abs, angle)
