"""torch.fft against torch at random sizes: every transform with n/s, dim and norm, for
real, integer and complex inputs (dtypes included); fftshift and the frequency helpers;
.real/.imag, abs/angle of complex tensors, view_as_real/view_as_complex, complex values
built from parts (complex, polar); and the errors torch raises."""

import pytest
import torch

from rule_harness import Input, check, check_error

RANGES = {"B": (1, 5), "T": (2, 11), "D": (2, 9)}


def transforms(x):
    B, T, D = x.shape
    a = torch.fft.fft(x)
    b = torch.fft.ifft(x, n=T, dim=1, norm="ortho")
    c = torch.fft.rfft(x.real if x.is_complex() else x)
    d = torch.fft.irfft(x)
    e = torch.fft.irfft(x, n=2 * D, dim=-1)
    f = torch.fft.hfft(x, dim=1)
    g = torch.fft.ihfft(x.real if x.is_complex() else x, n=5)
    h = torch.fft.fft2(x)
    i = torch.fft.ifft2(x, s=(3, D + 1))
    j = torch.fft.rfft2(x.real if x.is_complex() else x, dim=(0, 1))
    k = torch.fft.irfft2(x, s=(T, 6))
    m = torch.fft.fftn(x, dim=(1, 2)).real  # fnet's token mixing
    n = torch.fft.ifftn(x, s=(2, 4))
    o = torch.fft.rfftn(x.real if x.is_complex() else x)
    p = torch.fft.irfftn(x, s=(-1, -1))
    q = torch.fft.hfftn(x, dim=(0, 2))
    r = torch.fft.ihfftn(x.real if x.is_complex() else x, dim=0)
    s = torch.fft.hfft2(x)
    t = torch.fft.ihfft2(x.real if x.is_complex() else x)
    u = torch.fft.fftshift(torch.fft.fft(x), dim=-1)
    v = torch.fft.ifftshift(x)
    w = torch.fft.fftfreq(T)
    y = torch.fft.rfftfreq(D, d=0.5, dtype=torch.float64)
    z = torch.fft.fftn(x)
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.int64, torch.complex64, torch.complex128],
                         ids=str)
def test_fft_transforms(dt):
    check(transforms, {"x": Input(("B", "T", "D"), dt)}, RANGES)


def complex_parts(x):
    X = torch.fft.fft(x)
    a = X.real
    b = X.imag
    c = x.real
    d = X.abs()
    e = torch.abs(X)
    f = X.angle()
    g = torch.angle(x)
    h = torch.view_as_real(X)
    i = torch.view_as_complex(h)
    j = torch.view_as_complex(torch.stack([x, x], dim=-1).float())
    k = torch.view_as_real(torch.view_as_complex(torch.stack([x, x], dim=-1).double()))
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.int64], ids=str)
def test_complex_parts_and_views(dt):
    check(complex_parts, {"x": Input(("B", "T"), dt)}, {"B": (1, 5), "T": (1, 9)})


def from_parts(x, freqs):
    a = torch.polar(torch.ones_like(x), x)
    b = torch.polar(x[:, None, :], freqs[None, :, None])   # broadcast: (B, D, T)
    c = torch.complex(x, x * 2)
    d = torch.complex(x[0], freqs[:, None])
    e = torch.view_as_real(torch.polar(x.double(), x.double()))
    return a


@pytest.mark.parametrize("dt", [torch.float32, torch.float64], ids=str)
def test_complex_values_from_parts(dt):
    check(from_parts, {"x": Input(("B", "T"), dt), "freqs": Input(("D",), dt)},
          {"B": (1, 5), "T": (1, 9), "D": (1, 6)})


def polar_of_ints(x):
    y = torch.polar(x.long(), x.long())  # error: SI160
    return y


def complex_of_two_types(x):
    y = torch.complex(x, x.double())  # error: SI160
    return y


def polar_not_broadcast(x):
    y = torch.polar(x, x[:, :2])  # error: SI300
    return y


@pytest.mark.parametrize("model", [polar_of_ints, complex_of_two_types, polar_not_broadcast],
                         ids=lambda f: f.__name__)
def test_complex_from_parts_errors(model):
    check_error(model, {"x": ("B", "T")}, {"B": 3, "T": 5})


def rfft_of_complex(x):
    y = torch.fft.rfft(torch.fft.fft(x))  # error: SI160
    return y


def fft_zero_points(x):
    y = torch.fft.fft(x, n=0)  # error: SI143
    return y


def irfft_of_one(x):
    y = torch.fft.irfft(x[:, :1])  # error: SI143
    return y


def fftn_s_and_dim(x):
    y = torch.fft.fftn(x, s=(2, 3), dim=(0,))  # error: SI132
    return y


def fft_dim_out_of_range(x):
    y = torch.fft.fft(x, dim=2)  # error: SI201
    return y


def view_as_complex_odd(x):
    y = torch.view_as_complex(x.new_zeros(x.shape[0], 3))  # error: SI161
    return y


def view_as_real_of_real(x):
    y = torch.view_as_real(x)  # error: SI160
    return y


@pytest.mark.parametrize("model", [rfft_of_complex, fft_zero_points, irfft_of_one, fftn_s_and_dim,
                                   fft_dim_out_of_range, view_as_complex_odd, view_as_real_of_real],
                         ids=lambda f: f.__name__)
def test_fft_errors(model):
    check_error(model, {"x": ("B", "T")}, {"B": 3, "T": 5})
