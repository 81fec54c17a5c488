"""Special functions: torch.special's Bessel, Airy, zeta, polygamma, erfcx, ndtri and the
orthogonal polynomials, digamma, nextafter, signbit, frexp. (igamma/igammac stay eager:
jax's gammainc/gammaincc miss torch's accuracy, and torch's algorithm is not replayed.)

``jax.scipy.special`` is used where it agrees with torch's CPU kernels to rounding in
float64 (checked at many points, large arguments and poles included); elsewhere the
function follows torch's algorithm (its rational approximations and Chebyshev series,
which come from the Cephes library, and its recurrences with their special cases), so
that values agree where the approximation, not the function, decides the result.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jss
import torch
from jax import lax

from .. import dtypes as D
from ..errors import NoLowering
from .common import is_array
from .elementwise import elementwise, plus_zero_at_zero
from .registry import lowering, refuse, rule

aten = torch.ops.aten
prims = torch.ops.prims
_HALF = (torch.float16, torch.bfloat16)


def _special(*ops, fn, operands=(0,), kind=D.INT_TO_FLOAT, half=False, integral=True):
    """An elementwise special function; ``half``: torch has 16-bit kernels for it;
    ``integral``: torch accepts integer and bool inputs (promoted to float)."""
    elementwise(*ops, fn=fn, kind=kind, operands=operands)
    if not half:
        refuse(ops, lambda args, dt: dt in (torch.float16, torch.bfloat16),
                "torch has no 16-bit kernel for it")
    if not integral:
        refuse(ops, lambda args, dt: not dt.is_floating_point,
                "torch's kernel is for floating-point tensors only")


def _horner(z, coefs):
    """sum(c * z**k), the first coefficient the highest power (torch's loops)."""
    r = 0.0
    for c in coefs:
        r = r * z + c
    return r


def _chebyshev_series(t, coefs):
    """Clenshaw's sum of a Chebyshev series at ``t`` (Cephes's chbevl: ``t`` is twice the
    argument; half the sum, as torch returns it)."""
    b0, b1, b2 = coefs[0], 0.0, 0.0
    for c in coefs[1:]:
        b2, b1 = b1, b0
        b0 = t * b1 - b2 + c
    return 0.5 * (b0 - b2)


# ---- Bessel and Airy functions: torch's approximations (Cephes's) ------------------------

_SQRT_2_OVER_PI = 0.7978845608028654
_TWO_OVER_PI = 0.6366197723675814
_PI_4, _3PI_4 = 0.7853981633974483, 2.356194490192345


def _hankel_asymptotic(x, w, p, q, shift, second_kind):
    """J or Y of order 0 or 1 past 5: amplitude ratios ``p`` and ``q`` in ``w`` (25/x**2,
    rounded as torch computes it for that order) and the phase ``x - shift``."""
    pp = _horner(w, p[0]) / _horner(w, p[1])
    qq = 5.0 / x * (_horner(w, q[0]) / _horner(w, q[1]))
    c, s = jnp.cos(x - shift), jnp.sin(x - shift)
    v = pp * s + qq * c if second_kind else pp * c - qq * s
    return v * _SQRT_2_OVER_PI / jnp.sqrt(x)


def _j0(x):
    x = jnp.abs(x)
    z = x * x
    small = jnp.where(x < 1e-5, 1.0 - z / 4.0,
                      (z - 5.783185962946784) * (z - 30.471262343662087)
                      * _horner(z, _J0_N) / _horner(z, _J0_D))
    big = _hankel_asymptotic(x, 25.0 / z, (_P0_N, _P0_D), (_Q0_N, _Q0_D), _PI_4, False)
    return jnp.where(x <= 5.0, small, big)


def _j1_positive(x):
    z = x * x
    small = _horner(z, _J1_N) / _horner(z, _J1_D) * x * (z - 14.681970642123893) \
        * (z - 49.2184563216946)
    big = _hankel_asymptotic(x, 5.0 / x * (5.0 / x), (_P1_N, _P1_D), (_Q1_N, _Q1_D),
                             _3PI_4, False)
    return jnp.where(x <= 5.0, small, big)


def _j1(x):
    return jnp.where(x < 0, -_j1_positive(-x), _j1_positive(x))


def _y_small_domain(x, small):
    """Y0 and Y1 below 5: -inf at 0, NaN for negative arguments."""
    return jnp.where(x == 0, -jnp.inf, jnp.where(x < 0, jnp.nan, small))


def _y0(x):
    z = x * x
    small = _horner(z, _Y0_N) / _horner(z, _Y0_D) + _TWO_OVER_PI * jnp.log(x) * _j0(x)
    big = _hankel_asymptotic(x, 25.0 / z, (_P0_N, _P0_D), (_Q0_N, _Q0_D), _PI_4, True)
    return jnp.where(x <= 5.0, _y_small_domain(x, small), big)


def _y1(x):
    z = x * x
    small = x * (_horner(z, _Y1_N) / _horner(z, _Y1_D)) \
        + _TWO_OVER_PI * (_j1(x) * jnp.log(x) - 1.0 / x)
    big = _hankel_asymptotic(x, 5.0 / x * (5.0 / x), (_P1_N, _P1_D), (_Q1_N, _Q1_D),
                             _3PI_4, True)
    return jnp.where(x <= 5.0, _y_small_domain(x, small), big)


def _k_small(x, order, double_log):
    """K0 or K1 up to 2: a Chebyshev series and the I term (torch's K0 takes log(x/2) and
    the sum in double precision; so does this, the result rounded)."""
    log_half = jnp.log(0.5 * (x.astype(jnp.float64) if double_log else x))
    if order == 0:
        v = _chebyshev_series(x * x - 2.0, _K0_SMALL) - log_half * jss.i0(x)
    else:
        v = log_half * jss.i1(x) + _chebyshev_series(x * x - 2.0, _K1_SMALL) / x
    return v.astype(x.dtype)


def _modified_k(order, scaled):
    """K0, K1 or their scaled forms exp(x) K(x): inf at 0, NaN for negative x."""
    def k(x):
        small = _k_small(x, order, order == 0 and not scaled)
        series = _chebyshev_series(8.0 / x - 2.0, _K1_LARGE if order else _K0_LARGE)
        if scaled:
            small, large = small * jnp.exp(x), series / jnp.sqrt(x)
        else:
            large = jnp.exp(-x) * series / jnp.sqrt(x)
        v = jnp.where(x <= 2.0, small, large)
        return jnp.where(x == 0, jnp.inf, jnp.where(x < 0, jnp.nan, v))
    return k


def _airy_series(x):
    """Ai's Maclaurin series, summed until a term no longer changes it (torch's loop)."""
    eps = jnp.finfo(x.dtype).eps
    z = x * x * x

    def step(c):
        k, m, n, f, g, t = c
        go = t > eps
        m1 = m * z / (k + 1.0)
        n1 = n * z / (k + 2.0)
        m1 = m1 / (k + 2.0)
        f1 = f + m1
        n1 = n1 / (k + 3.0)
        return (jnp.where(go, k + 3.0, k), jnp.where(go, m1, m), jnp.where(go, n1, n),
                jnp.where(go, f1, f), jnp.where(go, g + n1, g),
                jnp.where(go, jnp.abs(m1 / f1), t))

    one = jnp.ones_like(x)
    init = (one, one, x, one, x, one)
    k, m, n, f, g, t = lax.while_loop(lambda c: jnp.any(c[5] > eps), step, init)
    return 0.355028053887817239260 * f - 0.258819403792806798405 * g


def _airy_ai(x):
    # oscillating side (x < -2.09): modulus and phase in 1/zeta
    xn = jnp.minimum(x, -2.09)
    zeta = -2.0 * xn * jnp.sqrt(-xn) / 3.0
    z = 1.0 / zeta
    zz = z * z
    t = zeta + 0.25 * math.pi
    neg = 0.5641895835477563 / jnp.sqrt(jnp.sqrt(-xn)) * (
        jnp.sin(t) * (1.0 + zz * _horner(zz, _AIF_N) / _horner(zz, _AIF_D))
        - jnp.cos(t) * (z * _horner(zz, _AIG_N) / _horner(zz, _AIG_D)))
    # decaying side (x >= 2.09): a rational function of 1/zeta times exp(-zeta)
    xp = jnp.maximum(x, 2.09)
    zeta_p = 2.0 * xp * jnp.sqrt(xp) / 3.0
    pos = 0.5641895835477563 * (_horner(1.0 / zeta_p, _AI_N) / _horner(1.0 / zeta_p, _AI_D)) \
        / (2.0 * jnp.sqrt(jnp.sqrt(xp)) * jnp.exp(zeta_p))
    mid = _airy_series(jnp.where((x < -2.09) | (x >= 2.09), 0.0, x))
    v = jnp.where(x < -2.09, neg, jnp.where(x >= 2.09, pos, mid))
    v = jnp.where(x > 103.892, 0.0, v)
    return jnp.where(jnp.isinf(x), jnp.nan, v)


def _spherical_j0(x):
    z = x * x
    series = 1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (
        1.0 / 362880.0 + z * (-1.0 / 39916800.0 + z * (1.0 / 6227020800.0))))))
    v = jnp.where(jnp.abs(x) < 0.5, series, jnp.sin(x) / x)
    return jnp.where(jnp.isinf(x), 0.0, v)


_special(prims.bessel_j0.default, aten.special_bessel_j0.default, fn=_j0)
_special(prims.bessel_j1.default, aten.special_bessel_j1.default, fn=_j1)
_special(aten.special_bessel_y0.default, fn=_y0)
_special(aten.special_bessel_y1.default, fn=_y1)
# (torch's modified_bessel_i0/i1 and jax's i0/i1 are Cephes's series: equal to rounding)
_special(aten.special_modified_bessel_i0.default, fn=jss.i0)
_special(aten.special_modified_bessel_i1.default, fn=plus_zero_at_zero(jss.i1))
_special(aten.special_modified_bessel_k0.default, fn=_modified_k(0, False))
_special(aten.special_modified_bessel_k1.default, fn=_modified_k(1, False))
_special(aten.special_scaled_modified_bessel_k0.default, fn=_modified_k(0, True))
_special(aten.special_scaled_modified_bessel_k1.default, fn=_modified_k(1, True))
_special(aten.special_airy_ai.default, fn=_airy_ai)
_special(prims.spherical_bessel_j0.default, aten.special_spherical_bessel_j0.default,
         fn=_spherical_j0)


# ---- orthogonal polynomials: torch's recurrences and special cases ----------------------


def _operands(x, n):
    """x and the degree broadcast together: (x, degree as int64, degree as x's dtype).
    The degree is torch's int64 cast of a float: truncated, and outside int64's range
    (inf, NaN) x86's INT64_MIN, a negative degree. One of x, n may be a Python number."""
    dtype = (x if is_array(x) else n).dtype
    x, n = jnp.broadcast_arrays(jnp.asarray(x, dtype), jnp.asarray(n, dtype))
    ni = jnp.where(jnp.isfinite(n) & (jnp.abs(n) < 2.0 ** 63), n, -1.0).astype(jnp.int64)
    return x, ni, ni.astype(dtype)


def _recurrence(n, p, q, step, active):
    """q after n - 1 steps (p, q) -> (q, step(j, p, q)), j = 1, 2, ...; an element stops
    early where ``active`` is false or q is NaN (torch's loops)."""
    def going(c):
        return active & (c[0] < n) & ~jnp.isnan(c[2])

    def body(c):
        j, p, q = c
        go = going(c)
        r = step(j.astype(q.dtype), p, q)
        return j + 1, jnp.where(go, q, p), jnp.where(go, r, q)

    init = (jnp.int64(1), jnp.full(q.shape, p, q.dtype), q)
    return lax.while_loop(lambda c: jnp.any(going(c)), body, init)[2]


def _parity(n, even, odd):
    return jnp.where(n % 2 == 0, even, odd)


def _chebyshev(kind, trig_from, shifted=False):
    """Chebyshev polynomial T, U, V or W (``shifted``: of 2x - 1) at degree n: the
    recurrence, the trigonometric form inside (-1, 1) past degree ``trig_from`` and the
    closed values at the ends, as torch's kernels take them."""
    def poly(x, n):
        x, ni, nf = _operands(x, n)
        y = x + x - 1.0 if shifted else x
        theta = jnp.arccos(y)
        top = y == 1.0 if not shifted else x == 1.0
        bottom = (y == -1.0) if not shifted else (x == 0.0)
        if kind == "t":
            first = y
            ends = jnp.where(top, 1.0, _parity(ni, 1.0, -1.0))
            trig = jnp.cos(nf * theta)
        elif kind == "u":
            first = y + y
            ends = jnp.where(top, nf + 1, _parity(ni, nf + 1, -(nf + 1)))
            s = jnp.sin(theta)
            trig = jnp.where(s != 0, jnp.sin((nf + 1) * theta) / s,
                             (nf + 1) * jnp.cos((nf + 1) * theta) / y)
        elif kind == "v":
            first = y + y - 1.0
            ends = jnp.where(top, 1.0, _parity(ni, nf + nf + 1, -(nf + nf + 1)))
            trig = jnp.where(jnp.sin(theta / 2.0) != 1.0,
                             jnp.cos((nf + 0.5) * theta) / jnp.cos(theta / 2.0),
                             _parity(ni, nf + nf + 1, -(nf + nf + 1)))
        else:
            first = y + y + 1.0
            ends = jnp.where(top, nf + nf + 1, _parity(ni, 1.0, -1.0))
            trig = jnp.where(jnp.cos(theta / 2.0) != 1.0,
                             jnp.sin((nf + 0.5) * theta) / jnp.sin(theta / 2.0),
                             jnp.where(y > 0, nf + nf + 1, _parity(ni, 1.0, -1.0)))
        at_end = top | bottom
        use_trig = (ni > trig_from) & (jnp.abs(y) < 1.0) & ~at_end
        rec = _recurrence(ni, 1.0, first, lambda j, p, q: (y + y) * q - p,
                          (ni >= 2) & ~at_end & ~use_trig)
        v = jnp.where(ni == 0, 1.0, jnp.where(ni == 1, first, rec))
        v = jnp.where(at_end, ends, jnp.where(use_trig, trig, v))
        return jnp.where(ni < 0, 0.0, v)
    return poly


def _hermite(physicists):
    """H (physicists') or He (probabilists'); NaN past torch's degree limit."""
    def poly(x, n):
        x, ni, _ = _operands(x, n)
        limit = 128 if x.dtype == jnp.float32 else 512
        first = x + x if physicists else x
        if physicists:
            def step(j, p, q):
                return (x + x) * q - (j + j) * p
        else:
            def step(j, p, q):
                return x * q - j * p
        rec = _recurrence(ni, 1.0, first, step, (ni >= 2) & (ni <= limit))
        v = jnp.where(ni == 0, 1.0, jnp.where(ni == 1, first, rec))
        return jnp.where(ni < 0, 0.0, jnp.where(ni > limit, jnp.nan, v))
    return poly


def _laguerre(x, n):
    x, ni, _ = _operands(x, n)
    rec = _recurrence(ni, 1.0, 1.0 - x,
                      lambda j, p, q: (((j + j) + (1.0 - x)) * q - j * p) / (j + 1.0),
                      (ni >= 2) & (x != 0))
    v = jnp.where((x == 0) | (ni == 0), 1.0, jnp.where(ni == 1, 1.0 - x, rec))
    return jnp.where(ni < 0, 0.0, v)


def _legendre(x, n):
    x, ni, _ = _operands(x, n)
    at_end = jnp.abs(x) == 1.0
    rec = _recurrence(ni, 1.0, x, lambda j, p, q: ((j + j + 1.0) * x * q - j * p) / (j + 1.0),
                      (ni >= 2) & ~at_end)
    v = jnp.where(ni == 0, 1.0, jnp.where(ni == 1, x, rec))
    v = jnp.where(at_end, jnp.where(x > 0, 1.0, _parity(ni, 1.0, -1.0)), v)
    return jnp.where(ni < 0, 0.0, v)

for _name, _fn in (("chebyshev_polynomial_t", _chebyshev("t", 6)),
                   ("chebyshev_polynomial_u", _chebyshev("u", 8)),
                   ("chebyshev_polynomial_v", _chebyshev("v", 8)),
                   ("chebyshev_polynomial_w", _chebyshev("w", 8)),
                   ("shifted_chebyshev_polynomial_t", _chebyshev("t", 6, True)),
                   ("shifted_chebyshev_polynomial_u", _chebyshev("u", 6, True)),
                   ("shifted_chebyshev_polynomial_v", _chebyshev("v", 6, True)),
                   ("shifted_chebyshev_polynomial_w", _chebyshev("w", 4, True)),
                   ("hermite_polynomial_h", _hermite(True)),
                   ("hermite_polynomial_he", _hermite(False)),
                   ("laguerre_polynomial_l", _laguerre),
                   ("legendre_polynomial_p", _legendre)):
    _packet = getattr(aten, "special_" + _name)
    _special(_packet.default, _packet.x_scalar, _packet.n_scalar, fn=_fn, operands=(0, 1))


# ---- zeta, polygamma ---------------------------------------------------------------------


def _zeta(x, q):
    """Hurwitz zeta with torch's domain: inf at x == 1 and at non-positive integers q, NaN
    for x < 1 and for q <= 0 with x not an integer. torch computes it in double precision
    (float32 too); jax's zeta agrees with it for q > 0. A negative q is first moved above
    0 by zeta(x, q) = q**-x + zeta(x, q + 1): the terms torch's direct sum adds (its first
    in the operands' type: it may overflow there)."""
    dtype = jnp.result_type(x, q)
    first = jnp.power(q, -x).astype(jnp.float64)
    x, q = jnp.broadcast_arrays(x.astype(jnp.float64), q.astype(jnp.float64))
    x_int, q_int = x == jnp.floor(x), q == jnp.floor(q)
    shift = (q < 0) & ~q_int & x_int

    def moving(c):
        return shift & (c[0] < 1.0)

    def step(c):
        qq, s = c
        m = moving(c)
        return jnp.where(m, qq + 1.0, qq), jnp.where(m, s + jnp.power(qq, -x), s)

    init = (jnp.where(shift, q + 1.0, q), jnp.where(shift, first, 0.0))
    q1, head = lax.while_loop(lambda c: jnp.any(moving(c)), step, init)
    v = head + jss.zeta(x, jnp.where((q <= 0) & ~shift, 1.0, q1))
    v = jnp.where((q <= 0) & ~x_int, jnp.nan, v)
    v = jnp.where((q <= 0) & q_int, jnp.inf, v)
    # x = inf: the first term decides (torch's loop gives NaN past q = 1)
    v = jnp.where(x == jnp.inf, jnp.where(q < 1, jnp.inf, jnp.where(q == 1, 1.0, jnp.nan)), v)
    v = jnp.where(x < 1.0, jnp.nan, v)
    return jnp.where(x == 1.0, jnp.inf, v).astype(dtype)


_PSI_10 = 2.25175258906672110764
_DIGAMMA_ASYMPTOTIC = (1 / 12, -691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12)


def _digamma(x):
    """torch's digamma: reflection for x < 0 (pi / tan(pi * frac(x)), in double precision
    for float32 too), the recurrence up to 10, the asymptotic series; +-inf at +-0, NaN at
    negative integers."""
    neg = x < 0
    frac = (x - jnp.trunc(x)).astype(jnp.float64)
    reflection = (math.pi / jnp.tan(math.pi * frac)).astype(x.dtype)
    y = jnp.where(neg, 1.0 - x, x)
    acc = jnp.zeros_like(x)
    for _ in range(10):   # y >= 0 here: ten steps reach 10
        low = y < 10.0
        acc = jnp.where(low, acc - 1.0 / y, acc)
        y = jnp.where(low, y + 1.0, y)
    z = 1.0 / (y * y)
    tail = jnp.where(y < 1e17, z * _horner(z, _DIGAMMA_ASYMPTOTIC), 0.0)
    v = jnp.where(y == 10.0, acc + _PSI_10, acc + jnp.log(y) - 0.5 / y - tail)
    v = jnp.where(neg, jnp.where(x == jnp.trunc(x), jnp.nan, v - reflection), v)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), v)


def _trigamma(x):
    """torch's trigamma: reflection below 1/2, six recurrence steps, asymptotic series."""
    low = x < 0.5
    s = jnp.sin(math.pi * x)
    acc = jnp.where(low, -(math.pi * math.pi) / (s * s), 0.0)
    y = jnp.where(low, 1.0 - x, x)
    for _ in range(6):
        acc = acc + 1.0 / (y * y)
        y = y + 1.0
    ixx = 1.0 / (y * y)
    acc = acc + (1.0 + 1.0 / (2.0 * y) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / y
    return jnp.where(low, -acc, acc)


def _polygamma(n, x):
    if n == 0:
        return _digamma(x)
    if n == 1:
        return _trigamma(x)
    v = math.exp(math.lgamma(n + 1.0)) * _zeta(jnp.full_like(x, n + 1.0, jnp.float64), x)
    return (v if n % 2 else -v).astype(x.dtype)


# (digamma here, not with the other unary ops: lax.digamma loses accuracy near the poles)
_special(aten.digamma.default, fn=_digamma, half=True)
_special(aten.polygamma.default, fn=_polygamma, operands=(1,), half=True)
refuse((aten.polygamma.default,), lambda args, dt: args[0] < 0, "negative n: torch's error")


_special(prims.zeta.default, aten.special_zeta.default, fn=_zeta, operands=(0, 1))


# ---- error function, normal quantile, exponentially scaled Bessel functions --------------


def _erfcx(x):
    """exp(x**2) erfc(x), in double precision (jax's float32 erfcx overflows past 9). jax's
    erfcx agrees with torch's below 25 but returns 0 past about 26.5: there, the Laplace
    continued fraction (30 terms reach rounding from 25 on; torch's own is a shorter one
    past 50)."""
    dtype, x = x.dtype, x.astype(jnp.float64)
    big = jnp.maximum(x, 25.0)
    t = big
    for k in range(30, 0, -1):
        t = big + (k / 2.0) / t
    return jnp.where(x < 25.0, jss.erfcx(jnp.minimum(x, 25.0)),
                     1.0 / (math.sqrt(math.pi) * t)).astype(dtype)


_special(prims.erfcx.default, aten.special_erfcx.default, fn=_erfcx)
_special(prims.ndtri.default, aten.special_ndtri.default, fn=jss.ndtri)
_special(prims.bessel_i0e.default, aten.special_i0e.default, fn=jss.i0e, half=True)
_special(prims.bessel_i1e.default, aten.special_i1e.default, fn=plus_zero_at_zero(jss.i1e),
         half=True)


# ---- floating-point bits ----------------------------------------------------------------


def _frexp(x):
    """Mantissa in [0.5, 1) and exponent, from the bits: XLA's CPU arithmetic flushes
    subnormal numbers to zero (and jax's frexp misses them in double precision)."""
    info = jnp.finfo(x.dtype)
    width, m, bias = info.bits, info.nmant, info.maxexp - 1
    ut = jnp.dtype(f"uint{width}").type   # (constants of the width: 1 << 63 is no int64)
    bits = lax.bitcast_convert_type(x, ut)
    field = ((bits >> ut(m)) & ut((1 << (width - 1 - m)) - 1)).astype(jnp.int32)
    frac = bits & ut((1 << m) - 1)
    top = (width - 1) - lax.clz(frac).astype(jnp.int32)     # a subnormal's leading bit
    sub = (field == 0) & (frac != 0)
    frac = jnp.where(sub, (frac << jnp.maximum(m - top, 0).astype(ut)) & ut((1 << m) - 1), frac)
    e = jnp.where(sub, top + 2 - bias - m, field - bias + 1)
    out = (bits & ut(1 << (width - 1))) | ut(bias - 1 << m) | frac
    special = (field == 0) & ~sub | (field == (1 << (width - 1 - m)) - 1)
    mant = jnp.where(special, x, lax.bitcast_convert_type(out, x.dtype))
    return mant, jnp.where(special, 0, e).astype(jnp.int32)


@rule(prims.frexp.default, aten.frexp.Tensor, multi=True)
def frexp_rule(x):
    if not x.dtype.is_floating_point:
        raise NoLowering(prims.frexp.default, "torch's kernel is for floating-point tensors")
    return [(tuple(x.shape), x.dtype), (tuple(x.shape), torch.int32)]


@lowering(prims.frexp.default, aten.frexp.Tensor)
def lower_frexp(x):
    return _frexp(x)


# nextafter steps in the operands' own type: no wider compute type for 16-bit floats
_special(prims.nextafter.default, aten.nextafter.default, fn=jnp.nextafter, operands=(0, 1),
         kind=D.NO_OPMATH, half=True, integral=False)
_special(prims.signbit.default, aten.signbit.default, fn=jnp.signbit, kind=D.ALWAYS_BOOL,
         half=True)


# ---- torch's coefficients (Cephes's): see aten/src/ATen/native/Math.h -------------------
# J0/Y0 and J1/Y1 past 5: numerators and denominators of P and Q
_P0_N = (0.0007969367292973471, 0.08283523921074408, 1.239533716464143, 5.447250030587687,
    8.74716500199817, 5.303240382353949, 1.0)
_P0_D = (0.0009244088105588637, 0.08562884743544745, 1.2535274390105895, 5.470977403304171,
    8.761908832370695, 5.306052882353947, 1.0)
_Q0_N = (-0.011366383889846916, -1.2825271867050931, -19.553954425773597, -93.20601521237683,
    -177.68116798048806, -147.07750515495118, -51.41053267665993, -6.050143506007285)
_Q0_D = (64.3178256118178, 856.4300259769806, 3882.4018360540163, 7240.467741956525,
    5930.727011873169, 2062.0933166032783, 242.0057402402914)
_J0_N = (-4794432209.782018, 1956174919465.5657, -249248344360967.72, 9708622510473064.0)
_J0_D = (499.563147152651, 173785.4016763747, 48440965.83399621, 11185553704.535683,
    2112775201154.892, 310518229857422.56, 3.1812195594320496e+16, 1.7108629408104315e+18)
_P1_N = (0.0007621256162081731, 0.07313970569409176, 1.1271960812968493, 5.112079511468076,
    8.424045901417724, 5.214515986823615, 1.0)
_P1_D = (0.0005713231280725487, 0.06884559087544954, 1.105142326340617, 5.073863861286015,
    8.399855543276042, 5.209828486823619, 1.0)
_Q1_N = (0.05108625947501766, 4.982138729512334, 75.82382841325453, 366.7796093601508,
    710.8563049989261, 597.4896124006136, 211.68875710057213, 25.207020585802372)
_Q1_D = (74.23732770356752, 1056.4488603826283, 4986.410583376536, 9562.318924047562,
    7997.041604473507, 2826.1927851763908, 336.0936078106983)
_J1_N = (-899971225.7055594, 452228297998.19403, -72749424522181.83, 3682957328638529.0)
_J1_D = (620.8364781180543, 256987.25675774884, 83514679.14319493, 22151159547.97925,
    4749141220799.914, 784369607876235.9, 8.952223361846274e+16, 5.322786203326801e+18)
_Y0_N = (15592.436785523574, -14663929.59039716, 5435264770.518765, -982136065717.9115,
    87590639439536.7, -3466283033847297.0, 4.4273326857256984e+16, -1.8495080043698668e+16)
_Y0_D = (1041.2835366425984, 626107.330137135, 268919633.39381415, 86400248710.3935,
    20297961275010.555, 3171577528429750.5, 2.5059625617265306e+17)
_Y1_N = (1263204747.9017804, -647355876379.1603, 114509511541823.73, -8127702555013251.0,
    2.024394757135949e+17, -7.788771962659501e+17)
_Y1_D = (594.3015923461282, 235564.09294306856, 73481194.44597217, 18760131610.870617,
    3882312774962.3857, 620557727146953.8, 6.871410873553005e+16, 3.9727060811656064e+18)
_K0_SMALL = (1.374465435613523e-16, 4.25981614279661e-14, 1.0349695257633842e-11,
    1.904516377220209e-09, 2.5347910790261494e-07, 2.286212103119452e-05, 0.001264615411446926,
    0.0359799365153615, 0.3442898999246285, -0.5353273932339028)
_K0_LARGE = (5.300433772686263e-18, -1.6475804301524212e-17, 5.2103915050390274e-17,
    -1.678231096805412e-16, 5.512055978524319e-16, -1.848593377343779e-15, 6.3400764774050706e-15,
    -2.2275133269916698e-14, 8.032890775363575e-14, -2.9800969231727303e-13,
    1.140340588208475e-12, -4.514597883373944e-12, 1.8559491149547177e-11, -7.957489244477107e-11,
    3.577397281400301e-10, -1.69753450938906e-09, 8.574034017414225e-09, -4.660489897687948e-08,
    2.766813639445015e-07, -1.8317555227191195e-06, 1.39498137188765e-05, -0.00012849549581627802,
    0.0015698838857300533, -0.0314481013119645, 2.4403030820659555)
_K1_SMALL = (-7.023863479386288e-18, -2.427449850519366e-15, -6.666901694199329e-13,
    -1.4114883926335278e-10, -2.213387630734726e-08, -2.4334061415659684e-06,
    -0.0001730288957513052, -0.006975723859639864, -0.12261118082265715, -0.3531559607765449,
    1.5253002273389478)
_K1_LARGE = (-5.756744483665017e-18, 1.7940508731475592e-17, -5.689462558442859e-17,
    1.838093544366639e-16, -6.057047248373319e-16, 2.038703165624334e-15, -7.019837090418314e-15,
    2.4771544244813043e-14, -8.976705182324994e-14, 3.3484196660784293e-13,
    -1.2891739609510289e-12, 5.13963967348173e-12, -2.1299678384275683e-11, 9.218315187605006e-11,
    -4.1903547593418965e-10, 2.015049755197033e-09, -1.0345762465678097e-08,
    5.7410841254500495e-08, -3.5019606030878126e-07, 2.406484947837217e-06,
    -1.936197974166083e-05, 0.00019521551847135162, -0.002857816859622779, 0.10392373657681724,
    2.7206261904844427)
_AI_N = (0.346538101525629, 12.007595273964581, 76.27960536152345, 168.08922493463058,
    159.75639135016442, 70.53609068404442, 14.026469116338967, 1.0)
_AI_D = (0.5675945326387702, 14.75625625848472, 84.51389701414746, 177.31808814540045,
    164.2346928715297, 71.47784008255756, 14.095913560783403, 1.0)
_AIF_N = (-0.1316963234183318, -0.6264565444319123, -0.6931580360369335, -0.2797799815451191,
    -0.04919001326095003, -0.004062659235948854, -0.0001592764962392621, -2.776491081552329e-06,
    -1.6778769848911465e-08)
_AIF_D = (13.356042070655324, 32.682503279522464, 26.736704094149957, 9.187074029072596,
    1.4752914677166642, 0.11568717379518804, 0.004402916416152112, 7.547203482874142e-05,
    4.5185009297058035e-07)
_AIG_N = (0.01973399320916857, 0.39110302961568827, 1.0657989759959559, 0.9391692298166502,
    0.35146565610554764, 0.06338889196289255, 0.005858041130483885, 0.000282851600836737,
    6.98793669997261e-06, 8.117892395543892e-08, 3.415517847659236e-10)
_AIG_D = (9.30892908077442, 19.835292871831214, 15.564662893286462, 5.476860694229755,
    0.9542936116189619, 0.08645808263523921, 0.004126565238242226, 0.00010125908511650914,
    1.1716673321441352e-06, 4.9183457006293e-09)
