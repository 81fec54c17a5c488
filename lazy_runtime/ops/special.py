"""Special functions: torch.special's Bessel, Airy, zeta, polygamma, erfcx, ndtri and the
orthogonal polynomials, digamma, nextafter, signbit, frexp, and the regularized incomplete
gamma functions igamma/igammac (torch's algorithm replayed: jax's gammainc/gammaincc miss
torch's accuracy).

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
from .registry import decomposed_in_own_type, lowering, refuse, rule

aten = torch.ops.aten
prims = torch.ops.prims


def _special(*ops, fn, operands=(0,), kind=D.INT_TO_FLOAT, half=False, integral=True):
    """An elementwise special function; ``half``: torch has 16-bit kernels for it;
    ``integral``: torch accepts integer and bool inputs (promoted to float)."""
    elementwise(*ops, fn=fn, kind=kind, operands=operands)
    if not half:
        refuse(ops, lambda args, dt: dt in D.HALF_TYPES,
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


# ---- incomplete gamma functions: torch's algorithm (SciPy's, from Cephes and Boost) -------

_MACHEP = {jnp.dtype(jnp.float64): 1.11022302462515654042e-16,
           jnp.dtype(jnp.float32): 5.9604644775390625e-8}
_MAXLOG = {jnp.dtype(jnp.float64): 7.09782712893383996843e2,
           jnp.dtype(jnp.float32): 88.72283905206835}
_BIG = {jnp.dtype(jnp.float64): (4.503599627370496e15, 2.22044604925031308085e-16),
        jnp.dtype(jnp.float32): (16777216.0, 5.9604644775390625e-8)}
_LANCZOS_G = 6.024680040776729583740234375
_TWO_PI_FLOAT = 6.2831854820251465   # 2 * float32(pi): torch's constant, in double too
_IGAMMA_MAXITER = 2000


def _wide(fn, *xs):
    """``fn`` in double precision, rounded to the arguments' type. torch's float32 kernel
    calls C's float functions (expf, logf, lgammaf, ...): correctly rounded or nearly, as
    XLA's float32 ones are not (its lgamma is off by 1e-2 near 2, erfc by 4e-6)."""
    dtype = xs[0].dtype
    if dtype == jnp.float64:
        return fn(*xs)
    return fn(*(v.astype(jnp.float64) for v in xs)).astype(dtype)


def _to64(v):
    return v.astype(jnp.float64)


def _lanczos_sum_expg_scaled(a):
    """Boost's Lanczos sum (torch's ratevl: a polynomial in 1/a past 1)."""
    big = jnp.abs(a) > 1
    y = jnp.where(big, 1.0 / a, a)
    num = jnp.where(big, _horner(y, _LANCZOS_NUM[::-1]), _horner(y, _LANCZOS_NUM))
    den = jnp.where(big, _horner(y, _LANCZOS_DEN[::-1]), _horner(y, _LANCZOS_DEN))
    return num / den


def _rounded(v):
    """``v`` as computed: XLA folds constants across sums ((a + c1) + c2 to a + (c1 + c2),
    (1 + a) - 1 to a), which rounds otherwise than torch's C; a barrier keeps the step."""
    return lax.optimization_barrier(v)


def _log1p(x):
    """log(1 + x) from log(u), u = 1 + x rounded, corrected by x / (u - 1): within 2 units
    in the last place of C's log1p where XLA's is off by 128. (The barrier keeps XLA from
    simplifying (1 + x) - 1 to x.)"""
    u = _rounded(1.0 + x)
    return jnp.where(u == 1.0, x, jnp.log(u) * (x / (u - 1.0)))


def _lgamma_positive(x):
    """C's lgamma (glibc's: fdlibm's algorithm) for x > 0, in double precision: XLA's is
    off by a few units in the last place (3e-12 at 1e3; near 1 and 2, where its value
    vanishes, by 4e-11 of it), which x**a exp(-x) / Gamma(a) would carry. The branches
    by the high word of x, as fdlibm's: below 2 polynomials around 1, 2 and lgamma's
    minimum, up to 8 a rational function on [2, 3] and the recurrence, then Stirling's
    series."""
    hi = (lax.bitcast_convert_type(x, jnp.uint64) >> jnp.uint64(32)).astype(jnp.int64)
    below_one = hi <= 0x3FECCCCC
    r = jnp.where(below_one, -jnp.log(x), 0.0)
    case0 = jnp.where(below_one, hi >= 0x3FE76944, hi >= 0x3FFBB4C3)
    case1 = ~case0 & jnp.where(below_one, hi >= 0x3FCDA661, hi >= 0x3FF3B4C4)
    y = jnp.where(below_one,
                  jnp.where(case0, 1.0 - x, jnp.where(case1, x - (_LG_TC - 1.0), x)),
                  jnp.where(case0, 2.0 - x, jnp.where(case1, x - _LG_TC, x - 1.0)))
    z = y * y
    a = _LG_A
    p = y * _horner(z, a[10::-2]) + z * _horner(z, a[11::-2])
    near_two = r + (p - 0.5 * y)
    w = z * y
    t = _LG_T
    p = z * _horner(w, t[12::-3]) - (_LG_TT - w * (_horner(w, t[13::-3])
                                                   + y * _horner(w, t[14::-3])))
    near_min = r + (_LG_TF + p)
    near_one = r + (-0.5 * y + y * _horner(y, _LG_U[::-1]) / _horner(y, _LG_V[::-1]))
    below_two = jnp.where(case0, near_two, jnp.where(case1, near_min, near_one))
    # [2, 8): lgamma(2 + s) by a rational function, and the logarithm of the recurrence
    i = jnp.trunc(jnp.clip(x, 2.0, 7.0))
    s = jnp.clip(x, 2.0, 8.0) - i
    v = 0.5 * s + s * _horner(s, _LG_S[::-1]) / _horner(s, _LG_R[::-1])
    prod = jnp.ones_like(s)
    for k in (6.0, 5.0, 4.0, 3.0, 2.0):
        prod = jnp.where(i > k, prod * (s + k), prod)
    below_eight = v + jnp.log(prod)
    # [8, 2**58): Stirling's series in 1/x
    big = jnp.maximum(x, 8.0)
    zi = 1.0 / big
    w = _horner(zi * zi, _LG_W[:0:-1]) * zi + _LG_W[0]
    stirling = (big - 0.5) * (jnp.log(big) - 1.0) + w
    v = jnp.where(hi < 0x40000000, below_two,
                  jnp.where(hi < 0x40200000, below_eight,
                            jnp.where(hi < 0x43900000, stirling, x * (jnp.log(x) - 1.0))))
    v = jnp.where((x == 1.0) | (x == 2.0), 0.0, v)
    return jnp.where(hi < 0x3B900000, -jnp.log(x), v)


def _igamma_factor(a, x):
    """x**a exp(-x) / Gamma(a), torch's _igam_helper_fac: directly where x is far from a,
    else by the Lanczos approximation. (In float32 torch's C mixes in double constants:
    the comparison with 0.4 a, the -0.5 and +0.5, and the large arguments' exponent are
    computed in double; so here.)"""
    dtype = a.dtype
    direct = a * _wide(jnp.log, x) - x - _wide(_lgamma_positive, a)
    direct = jnp.where(direct < -_MAXLOG[dtype], 0.0, _wide(jnp.exp, direct))
    fac = (_to64(_rounded(a + _LANCZOS_G)) - 0.5).astype(dtype)
    res = jnp.sqrt(fac / 2.718281828459045) / _lanczos_sum_expg_scaled(a)
    # (in float32 the product in double: its power factor may be subnormal, which XLA's
    # CPU arithmetic flushes to zero)
    near = res * _wide(lambda d, r, p: jnp.exp(d) * jnp.power(r, p), a - x, x / fac, a)
    numfac = (_to64(_rounded(x - a - _LANCZOS_G)) + 0.5).astype(dtype) / fac
    exponent = _to64(a * (_wide(_log1p, numfac) - numfac)) \
        + _to64(x) * (0.5 - _LANCZOS_G) / _to64(fac)
    large = (_to64(res) * jnp.exp(exponent)).astype(dtype)
    lanczos = jnp.where((a < 200) & (x < 200), near, large)
    return jnp.where(_to64(jnp.abs(a - x)) > 0.4 * _to64(jnp.abs(a)), direct, lanczos)


def _masked_loop(step, state, live, limit):
    """``state`` advanced by ``step`` where ``live`` (``step`` returns the new state and
    the elements that stop), up to ``limit`` steps: torch's per-element loops with their
    breaks, one loop over all elements that runs while any element goes on."""
    def body(c):
        i, live, s = c
        new, stop = step(i, s)
        return (i + 1, live & ~stop,
                tuple(jnp.where(live, n, o) for n, o in zip(new, s)))

    init = (jnp.int32(0), live, tuple(jnp.broadcast_to(v, live.shape) for v in state))
    return lax.while_loop(lambda c: (c[0] < limit) & jnp.any(c[1]), body, init)[2]


def _igamma_series(a, x, active):
    """The lower function's power series (DLMF 8.11.4), torch's _igam_helper_series."""
    eps = _MACHEP[a.dtype]
    ax = _igamma_factor(a, x)

    def step(i, s):
        r, c, total = s
        r = r + 1.0
        c = c * (x / r)
        total = total + c
        return (r, c, total), c <= eps * total

    one = jnp.ones_like(a)
    _, _, total = _masked_loop(step, (a, one, one), active & (ax != 0), _IGAMMA_MAXITER)
    return jnp.where(ax == 0, 0.0, total * ax / a)


def _igammac_series(a, x, active):
    """The upper function for small x (DLMF 8.7.3), torch's _igamc_helper_series."""
    eps = _MACHEP[a.dtype]

    def step(i, s):
        fac, total = s
        n = (i + 1).astype(a.dtype)
        fac = fac * (-x / n)
        term = fac / (a + n)
        total = total + term
        return (fac, total), jnp.abs(term) <= eps * jnp.abs(total)

    zero = jnp.zeros_like(a)
    _, total = _masked_loop(step, (zero + 1.0, zero), active, _IGAMMA_MAXITER - 1)
    a_log_x = a * _wide(jnp.log, x)
    return -_wide(jnp.expm1, a_log_x - _wide(_lgamma_positive, _rounded(1.0 + a))) \
        - _wide(jnp.exp, a_log_x - _wide(_lgamma_positive, a)) * total


def _igammac_continued_fraction(a, x, active):
    """The upper function's continued fraction (DLMF 8.9.2), torch's
    _igamc_helper_continued_fraction, its rescaling of large convergents included."""
    eps = _MACHEP[a.dtype]
    big, big_inv = _BIG[a.dtype]
    ax = _igamma_factor(a, x)

    def step(i, s):
        c, y, z, pkm2, pkm1, qkm2, qkm1, ans = s
        c, y, z = c + 1.0, y + 1.0, z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        nonzero = qk != 0
        r = pk / jnp.where(nonzero, qk, 1.0)
        t = jnp.where(nonzero, jnp.abs((ans - r) / r), 1.0)
        ans = jnp.where(nonzero, r, ans)
        scale = jnp.where(jnp.abs(pk) > big, big_inv, 1.0)
        return (c, y, z, pkm1 * scale, pk * scale, qkm1 * scale, qk * scale, ans), t <= eps

    y = 1.0 - a
    z = x + y + 1.0
    state = (jnp.zeros_like(a), y, z, jnp.ones_like(a), x + 1.0, x, z * x, (x + 1.0) / (z * x))
    ans = _masked_loop(step, state, active & (ax != 0), _IGAMMA_MAXITER)[-1]
    return jnp.where(ax == 0, 0.0, ans * ax)


def _igamma_asymptotic(a, x, lower, active):
    """The uniform asymptotic expansion for large a near x (DLMF 8.12.3/8.12.4), torch's
    _igam_helper_asymptotic_series: 25 coefficients c_k, each a series in eta summed until
    a term no longer changes it, the sum over k stopped when a term grows or no longer
    changes it."""
    dtype, eps = a.dtype, _MACHEP[a.dtype]
    sign = -1.0 if lower else 1.0
    lam = x / a
    sigma = (x - a) / a
    root = jnp.sqrt(-2.0 * (_wide(_log1p, sigma) - sigma))
    eta = jnp.where(lam > 1, root, jnp.where(lam < 1, -root, 0.0))
    res = 0.5 * _wide(lax.erfc, sign * eta * jnp.sqrt(a / 2.0))
    powers = [jnp.ones_like(eta)]
    for _ in range(24):
        powers.append(eta * powers[-1])
    table = jnp.asarray(_IGAM_D, dtype)

    def outer(k, s):
        total, old, afac, live = s
        d = table[k]
        ck, going = jnp.broadcast_to(d[0], eta.shape), jnp.ones(eta.shape, bool)
        for n in range(1, 25):
            term = d[n] * powers[n]
            ck = jnp.where(going, ck + term, ck)
            going = going & ~(jnp.abs(term) < eps * jnp.abs(ck))
        term = ck * afac
        size = jnp.abs(term)
        live = live & ~(size > old)
        total = jnp.where(live, total + term, total)
        live = live & ~(size < eps * jnp.abs(total))
        return (total, jnp.where(live, size, old), jnp.where(live, afac / a, afac), live)

    zero = jnp.zeros_like(a)
    total = lax.fori_loop(0, 25, outer, (zero, zero + jnp.inf, zero + 1.0, active))[0]
    a64, eta64 = _to64(a), _to64(eta)
    tail = sign * jnp.exp(-0.5 * a64 * eta64 * eta64) * _to64(total) \
        / _to64(jnp.sqrt(_TWO_PI_FLOAT * a))
    return (_to64(res) + tail).astype(dtype)


def _incomplete_gamma(lower):
    """torch's calc_igamma (``lower``) or calc_igammac: the values at the ends of the domain
    first, then per element the branch torch's kernel takes (the asymptotic expansion for
    large a near x, the series, the continued fraction, or one minus the other function),
    each branch evaluated only where it is taken. float32 in float32, as torch's kernel
    (16-bit inputs too, in float32), except where its C promotes to double."""
    def fn(a, x):
        a, x = jnp.broadcast_arrays(a, x)
        dtype = a.dtype
        x64 = _to64(x)
        nan = jnp.isnan(a) | jnp.isnan(x)
        ratio = jnp.abs(x - a) / a
        asym = ((a > 20.0) & (a < 200.0) & (ratio < 0.3)) \
            | ((a > 200.0) & (ratio < 4.5 / jnp.sqrt(a)))
        general = ~nan & (a > 0) & (x > 0) & jnp.isfinite(a) & jnp.isfinite(x)
        rest = general & ~asym
        if lower:
            upper = (x > 1.0) & (x > a)
            series = rest & ~upper
            fraction = rest & upper & (x64 > 1.1)
            small_x = rest & upper & ~(x64 > 1.1)
        else:
            log_x = _wide(jnp.log, x)
            series = rest & jnp.where(
                x64 > 1.1, x < a, jnp.where(x <= 0.5, -0.4 / _to64(log_x) < _to64(a),
                                            x64 * 1.1 < _to64(a)))
            fraction = rest & ~series & (x64 > 1.1)
            small_x = rest & ~series & ~(x64 > 1.1)
        # the unused elements' arguments are 1 (finite values, short loops)
        a1, x1 = jnp.where(general, a, 1.0), jnp.where(general, x, 1.0)
        s = _igamma_series(a1, x1, series)
        c = jnp.where(fraction, _igammac_continued_fraction(a1, x1, fraction),
                      _igammac_series(a1, x1, small_x))
        v = jnp.where(series, s if lower else 1.0 - s, 1.0 - c if lower else c)
        v = jnp.where(asym, _igamma_asymptotic(a1, x1, lower, asym & general), v)
        v = jnp.where(nan, jnp.nan, v)
        # the ends, in torch's order: x = +-inf, a = +-inf, x = 0, a = 0, a or x negative
        one, zero = (1.0, 0.0) if lower else (0.0, 1.0)
        v = jnp.where(jnp.isinf(x), one, v)
        v = jnp.where(jnp.isinf(a), jnp.where(jnp.isinf(x), jnp.nan, zero), v)
        v = jnp.where(x == 0, zero, v)
        v = jnp.where(a == 0, jnp.where(x > 0, one, jnp.nan), v)
        return jnp.where((x < 0) | (a < 0), jnp.nan, v).astype(dtype)
    return fn


_BUCKET_MAX = 4096


def _flat_buckets(fn):
    """``fn`` of two arrays on their broadcast elements, flattened and padded with ones to
    a power of two (at least 64, up to ``_BUCKET_MAX`` elements): XLA compiles each
    shape's loops anew (about 1.3 s a shape here), and small shapes then share them."""
    def run(a, x):
        a, x = jnp.broadcast_arrays(a, x)
        shape, n = a.shape, a.size
        if n == 0 or n > _BUCKET_MAX:
            return fn(a, x)
        pad = (0, max(64, 1 << (n - 1).bit_length()) - n)
        out = fn(jnp.pad(a.reshape(-1), pad, constant_values=1),
                 jnp.pad(x.reshape(-1), pad, constant_values=1))
        return out[:n].reshape(shape)
    return run


for _ops, _lower in (((prims.igamma.default, aten.igamma.default), True),
                     ((prims.igammac.default, aten.igammac.default), False)):
    _special(*_ops, fn=_flat_buckets(_incomplete_gamma(_lower)), operands=(0, 1),
             kind=D.DEFAULT, half=True, integral=False)


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
# C's lgamma (fdlibm's): around 2 (a), around its minimum tc (t, tf, tt), around 1 (u, v),
# on [2, 3] (s, r), and Stirling's correction (w)
_LG_A = (7.72156649015328655494e-02, 3.22467033424113591611e-01, 6.73523010531292681824e-02,
    2.05808084325167332806e-02, 7.38555086081402883957e-03, 2.89051383673415629091e-03,
    1.19270763183362067845e-03, 5.10069792153511336608e-04, 2.20862790713908385557e-04,
    1.08011567247583939954e-04, 2.52144565451257326939e-05, 4.48640949618915160150e-05)
_LG_TC, _LG_TF, _LG_TT = (1.46163214496836224576e+00, -1.21486290535849611461e-01,
                          -3.63867699703950536541e-18)
_LG_T = (4.83836122723810047042e-01, -1.47587722994593911752e-01, 6.46249402391333854778e-02,
    -3.27885410759859649565e-02, 1.79706750811820387126e-02, -1.03142241298341437450e-02,
    6.10053870246291332635e-03, -3.68452016781138256760e-03, 2.25964780900612472250e-03,
    -1.40346469989232843813e-03, 8.81081882437654011382e-04, -5.38595305356740546715e-04,
    3.15632070903625950361e-04, -3.12754168375120860518e-04, 3.35529192635519073543e-04)
_LG_U = (-7.72156649015328655494e-02, 6.32827064025093366517e-01, 1.45492250137234768737e+00,
    9.77717527963372745603e-01, 2.28963728064692451092e-01, 1.33810918536787660377e-02)
_LG_V = (1.0, 2.45597793713041134822e+00, 2.12848976379893395361e+00,
    7.69285150456672783825e-01, 1.04222645593369134254e-01, 3.21709242282423911810e-03)
_LG_S = (-7.72156649015328655494e-02, 2.14982415960608852501e-01, 3.25778796408930981787e-01,
    1.46350472652464452805e-01, 2.66422703033638609560e-02, 1.84028451407337715652e-03,
    3.19475326584100867617e-05)
_LG_R = (1.0, 1.39200533467621045958e+00, 7.21935547567138069525e-01,
    1.71933865632803078993e-01, 1.86459191715652901344e-02, 7.77942496381893596434e-04,
    7.32668430744625636189e-06)
_LG_W = (4.18938533204672725052e-01, 8.33333333333329678849e-02, -2.77777777728775536470e-03,
    7.93650558643019558500e-04, -5.95187557450339963135e-04, 8.36339918996282139126e-04,
    -1.63092934096575273989e-03)
# the incomplete gamma functions: Boost's Lanczos sum (numerator, denominator; the first
# the highest power) and the coefficients d[k][n] of the asymptotic expansion (SciPy's)
_LANCZOS_NUM = (0.006061842346248907, 0.5098416655656676, 19.519927882476175, 449.9445569063168,
    6955.999602515376, 75999.29304014542, 601859.6171681099, 3481712.154980646,
    14605578.087685067, 43338889.32467614, 86363131.2881386, 103794043.11634454, 56906521.913471565)
_LANCZOS_DEN = (1.0, 66.0, 1925.0, 32670.0, 357423.0, 2637558.0, 13339535.0, 45995730.0,
    105258076.0, 150917976.0, 120543840.0, 39916800.0, 0.0)
_IGAM_D = (
    (-0.3333333333333333, 0.08333333333333333, -0.014814814814814815, 0.0011574074074074073,
     0.0003527336860670194, -0.0001787551440329218, 3.919263178522438e-05,
     -2.1854485106799924e-06, -1.85406221071516e-06, 8.296711340953087e-07,
     -1.7665952736826078e-07, 6.707853543401498e-09, 1.0261809784240309e-08,
     -4.382036018453353e-09, 9.14769958223679e-10, -2.551419399494625e-11,
     -5.830772132550426e-11, 2.4361948020667415e-11, -5.0276692801141755e-12,
     1.1004392031956135e-13, 3.3717632624009856e-13, -1.392388722418162e-13,
     2.8534893807047445e-14, -5.139111834242572e-16, -1.9752288294349442e-15),
    (-0.001851851851851852, -0.003472222222222222, 0.0026455026455026454,
     -0.0009902263374485596, 0.00020576131687242798, -4.018775720164609e-07,
     -1.8098550334489977e-05, 7.64916091608111e-06, -1.6120900894563446e-06,
     4.647127802807434e-09, 1.378633446915721e-07, -5.752545603517705e-08,
     1.1951628599778148e-08, -1.7543241719747647e-11, -1.0091543710600413e-09,
     4.162792991842583e-10, -8.56390702649298e-11, 6.067215101604758e-14,
     7.1624989648114856e-12, -2.933186643771437e-12, 5.996696365683689e-13,
     -2.1671786527323313e-16, -4.978339972369262e-14, 2.0291628823713425e-14,
     -4.13125571381061e-15),
    (0.004133597883597883, -0.0026813271604938273, 0.0007716049382716049,
     2.0093878600823047e-06, -0.00010736653226365161, 5.2923448829120125e-05,
     -1.2760635188618728e-05, 3.423578734096138e-08, 1.3721957309062932e-06,
     -6.298992138380055e-07, 1.4280614206064242e-07, -2.0477098421990866e-10,
     -1.409252991086752e-08, 6.228974084922022e-09, -1.3670488396617112e-09,
     9.428356159014678e-13, 1.2872252400089318e-10, -5.5645956134363323e-11,
     1.197593554636698e-11, -4.1689782251838634e-15, -1.0940640427884595e-12,
     4.662239946390136e-13, -9.905105763906907e-14, 1.8931876768373515e-17,
     8.859221872591127e-15),
    (0.0006494341563786008, 0.00022947209362139917, -0.0004691894943952557,
     0.00026772063206283885, -7.561801671883977e-05, -2.396505113867297e-07,
     1.1082654115347302e-05, -5.6749528269915965e-06, 1.4230900732435883e-06,
     -2.7861080291528143e-11, -1.6958404091930278e-07, 8.099464905388083e-08,
     -1.9111168485973655e-08, 2.3928620439808118e-12, 2.0620131815488797e-09,
     -9.460496661855133e-10, 2.1541049775774907e-10, -1.388823336813903e-14,
     -2.1894761681963938e-11, 9.790998951171684e-12, -2.178219188018096e-12,
     6.208819573407901e-17, 2.126978363279737e-13, -9.344688791517433e-14,
     2.045367122678285e-14),
    (-0.0008618882909167117, 0.0007840392217200666, -0.0002990724803031902,
     -1.4638452578843418e-06, 6.641498215465122e-05, -3.968365047179435e-05,
     1.1375726970678419e-05, 2.507497226237533e-10, -1.6954149536558305e-06,
     8.907507532205309e-07, -2.292934834000805e-07, 2.956794137544049e-11,
     2.8865829742708783e-08, -1.4189739437803219e-08, 3.4463580499464896e-09,
     -2.3024517174528067e-13, -3.9409233028046403e-10, 1.86023389685045e-10,
     -4.356323005056618e-11, 1.278600101629623e-15, 4.67927502665792e-12,
     -2.149246470613483e-12, 4.908815614809652e-13, -6.33859148489156e-18,
     -5.045332069080094e-14),
    (-0.00033679855336635813, -6.972813758365858e-05, 0.0002772753244959392,
     -0.00019932570516188847, 6.797780477937208e-05, 1.419062920643967e-07,
     -1.3594048189768693e-05, 8.018470256334202e-06, -2.291481176508095e-06,
     -3.252473551298454e-10, 3.4652846491085265e-07, -1.8447187191171344e-07,
     4.8240967037894184e-08, -1.7989466721743514e-14, -6.306194500013523e-09,
     3.162417628774568e-09, -7.840924253697429e-10, 5.192679165254041e-15,
     9.358944242306784e-11, -4.513426216163278e-11, 1.0799129993116828e-11,
     -3.661886712685252e-17, -1.210902069055155e-12, 5.680743584990564e-13,
     -1.3249659916340829e-13),
    (0.0005313079364639922, -0.0005921664373536939, 0.0002708782096718045,
     7.902353232660328e-07, -8.153969367561969e-05, 5.61168275310625e-05,
     -1.8329116582843375e-05, -3.0796134506033047e-09, 3.465155368803609e-06,
     -2.0291327396058603e-06, 5.788792863149004e-07, 2.338630673826657e-13,
     -8.828600746330484e-08, 4.7435958880408125e-08, -1.2545415020710382e-08,
     8.649648858010293e-14, 1.6846058979264062e-09, -8.575492823577594e-10,
     2.1598224929232125e-10, -7.613230520476153e-16, -2.6639822008536144e-11,
     1.3065700536611057e-11, -3.1799163902367977e-12, 4.710976121367431e-18,
     3.6902800842763465e-13),
    (0.00034436760689237765, 5.171790908260592e-05, -0.00033493161081142234,
     0.0002812695154763237, -0.00010976582244684731, -1.2741009095484485e-07,
     2.7744451511563645e-05, -1.8263488805711332e-05, 5.7876949497350525e-06,
     4.93875893393627e-10, -1.0595367014026043e-06, 6.166714376110408e-07,
     -1.7562973359060463e-07, -1.297447328701544e-12, 2.695423606288966e-08,
     -1.4578352908731272e-08, 3.887645959386175e-09, -3.881002251019412e-17,
     -5.327994173877286e-10, 2.7437977643314844e-10, -6.995796092070568e-11,
     2.589986387486848e-17, 8.856689099669639e-12, -4.403168815871311e-12,
     1.0865561947091654e-12),
    (-0.0006526239185953094, 0.0008394987206720873, -0.000438297098541721,
     -6.969091458420552e-07, 0.00016644846642067547, -0.00012783517679769218,
     4.629953263691304e-05, 4.557909867922708e-09, -1.0595271125805195e-05,
     6.783342904865167e-06, -2.1075476666258803e-06, -1.7213731432817144e-11,
     3.773587741611098e-07, -2.1867506700122867e-07, 6.220228804018927e-08, 6.597703826733e-16,
     -9.590386497425686e-09, 5.213214492280807e-09, -1.3991589583935709e-09,
     5.382058999060575e-16, 1.9484714275467745e-10, -1.0127287556389682e-10,
     2.6077347197254926e-11, -5.090418699993299e-18, -3.3721464474854593e-12),
    (-0.0005967612901927463, -7.204895416020011e-05, 0.0006782308837667328,
     -0.0006401475260262758, 0.00027750107634328704, 1.819700838046515e-07,
     -8.479507117068503e-05, 6.105192082501531e-05, -2.1073920183404862e-05,
     -8.858589014125599e-10, 4.5284535953805374e-06, -2.8427815022504407e-06,
     8.708234177864641e-07, 3.6886101871706966e-12, -1.534469519070206e-07,
     8.862466778790695e-08, -2.5184812301826817e-08, -1.0225912098215092e-14,
     3.896947075815478e-09, -2.1267304792235634e-09, 5.737013552805138e-10,
     -1.887749850169741e-19, -8.093153869465787e-11, 4.23827232834492e-11,
     -1.1002224534207727e-11),
    (0.0013324454494800656, -0.0019144384985654776, 0.0011089369134596636, 9.9324041226423e-07,
     -0.0005087450129309319, 0.00042735056665392886, -0.000168588537679108,
     -8.1301893922785e-09, 4.5284402370562144e-05, -3.127053674781734e-05,
     1.044986828530338e-05, 4.8435226265680926e-11, -2.148256587345626e-06,
     1.329369701097492e-06, -4.029569309210103e-07, -1.756787766632329e-13,
     7.014504316366825e-08, -4.040787734999483e-08, 1.1474026743371962e-08,
     3.9642746853563326e-18, -1.7804938269892715e-09, 9.748026254873165e-10,
     -2.6405338676507616e-10, 5.794875163403742e-18, 3.764774955354384e-11),
    (0.001579727660730835, 0.00016251626278391583, -0.0020633421035543276, 0.00213896861856891,
     -0.0010108559391263003, -3.99127055299192e-07, 0.0003623502508476469,
     -0.00028143901463712157, 0.00010449513336495887, 2.12114184918303e-09,
     -2.5779417251947842e-05, 1.7281818956040464e-05, -5.641377387290428e-06,
     -1.1024320105776174e-11, 1.1223224418895176e-06, -6.869339637952674e-07,
     2.0653236975414888e-07, 4.6714772409838506e-14, -3.5609886164949055e-08,
     2.0470855345905963e-08, -5.809173863328336e-09, -1.332821287582869e-16,
     9.035460439133513e-10, -4.959878251733084e-10, 1.3481607129399748e-10),
    (-0.004072512119514016, 0.00640336283380807, -0.004041016108167662, -2.183732802866233e-06,
     0.002174044180125464, -0.001970044051841889, 0.0008359546974796246,
     1.9445447567109655e-08, -0.000257793871204217, 0.00019009987368139304,
     -6.769649993743896e-05, -1.4440629666426571e-10, 1.5712512518742267e-05,
     -1.0304008744776892e-05, 3.304517767401387e-06, 7.982976024232571e-13,
     -6.4097794149313e-07, 3.8894624761300054e-07, -1.161834764494887e-07,
     -2.816808630596451e-15, 1.9878012911297094e-08, -1.1407719956357511e-08,
     3.2355857064185554e-09, 4.175946829345594e-20, -5.042311271810582e-10),
    (-0.0059475779383993, -0.0005401647678926045, 0.00879104135507679, -0.009857631558785612,
     0.005013469503102154, 1.2807521786221875e-06, -0.0020626019342754685,
     0.0017109128573523059, -0.000676953127141338, -6.901154567656214e-09,
     0.00018855128143995903, -0.0001339521566349197, 4.626318303352804e-05,
     4.003423061332135e-11, -1.0255652921494033e-05, 6.612086372797651e-06,
     -2.0913022027253007e-06, -2.0951775649603836e-13, 3.975602904199325e-07,
     -2.395621197881589e-07, 7.118288338214586e-08, 8.925574873053455e-16,
     -1.2101547235064675e-08, 6.935061824833439e-09, -1.96614644538561e-09),
    (0.01740202778752271, -0.029527880945699123, 0.020045875571402798, 7.0289515966903405e-06,
     -0.012375421071343148, 0.011976293444235253, -0.0054156038466518525,
     -6.329089339641862e-08, 0.0018855118129005065, -0.001473473274825001,
     0.0005551581009770838, 5.240683441255066e-10, -0.00014357913535784837,
     9.91812932249433e-05, -3.346083474947831e-05, -3.575583729109899e-12,
     7.1560851960630075e-06, -4.551680262815553e-06, 1.4236576649271474e-06,
     1.8803149082089665e-14, -2.662340389892921e-07, 1.5950642189595716e-07,
     -4.71875146738411e-08, -6.510787295875518e-17, 7.979509102674624e-09),
    (0.03024912416090589, 0.0024817436002649977, -0.049939134373457025, 0.05991564300930787,
     -0.03248320760162339, -5.721296865210344e-06, 0.015085251778569354, -0.013261324005088445,
     0.0055515262632426145, 3.026318225703001e-08, -0.0017229548406756724,
     0.0012893570099929638, -0.00046845138348319875, -1.830259937893045e-10,
     0.00011449739014822654, -7.737856522124447e-05, 2.5625836246985202e-05,
     1.0766165333192815e-12, -5.324680928242262e-06, 3.349634863064464e-06,
     -1.0381253128684019e-06, -5.608909920621128e-15, 1.9150821930676592e-07,
     -1.1418365800203487e-07, 3.3654425209171787e-08),
    (-0.09905102088015905, 0.17954011706123485, -0.12989606383463778, -3.1478872752284355e-05,
     0.09051063527684813, -0.0928288244111844, 0.04441211283987781, 2.7779236316835886e-07,
     -0.017229543805449696, 0.014182925050891573, -0.005621416163374734, -2.39598509186381e-09,
     0.0016029634366079909, -0.0011606784674435774, 0.00041001337768153875,
     1.836580075409066e-11, -9.58442565636559e-05, 6.364306233776471e-05,
     -2.076250624489065e-05, -1.1806020912804483e-13, 4.213180823912065e-06,
     -2.626224133701247e-06, 8.077062049493066e-07, 6.012591212363273e-16,
     -1.472973737401884e-07),
    (-0.19994542198219728, -0.015056113040026424, 0.36470239469348487, -0.4643519231173355,
     0.26640934719197895, 3.403826602714719e-05, -0.13784338709329624, 0.1276467178337056,
     -0.056213828755200985, -1.753150885483011e-07, 0.019235592956768112,
     -0.015088821281095314, 0.005740185445135012, 1.0622382710310225e-09,
     -0.0015335082692563998, 0.0010819320643228215, -0.0003737251019394566,
     -6.617090972903199e-12, 8.426361738090962e-05, -5.515070682748348e-05,
     1.776953644834807e-05, 3.882792321020553e-14, -3.53513697488768e-06,
     2.186583213004527e-06, -6.68128494476256e-07),
    (0.7243860850402943, -1.3918010932653375, 1.0654143352413967, 0.0001876173868950258,
     -0.827055011761527, 0.8935243334782842, -0.44971003995291337, -1.6107401567546651e-06,
     0.1923559016527109, -0.1659770216004261, 0.06888222268181433, 1.3910091724608687e-08,
     -0.02146911561508663, 0.016228980898865892, -0.005979601617258426,
     -1.1287469112826745e-10, 0.0015167451119784856, -0.00104786342935539,
     0.0003553907288912642, 8.170432211180152e-13, -7.77730134424524e-05,
     5.029141389700772e-05, -1.6035083867000518e-05, 1.2469354315487606e-14,
     3.1369106244517616e-06),
    (1.6668949727276812, 0.1165462765994632, -3.3288393225018904, 4.469232548286404,
     -2.6977693045875806, -0.0002600667859891061, 1.5389017615694538, -1.4937962361134611,
     0.6888196463323315, 1.3077482004552384e-06, -0.2576296332559629, 0.21097676102125448,
     -0.08371440835921988, -7.792042888135476e-09, 0.0242679230648336, -0.017813678334552312,
     0.006397033038890006, 4.943080709048052e-11, -0.0015554602758465635,
     0.0010561196919903215, -0.000352771844604729, 9.300233464502246e-14,
     7.528585502655717e-05, -4.818651556915635e-05, 1.5227271505597605e-05),
    (-6.618829886137293, 13.397985455142589, -10.789350606845145, -0.0014352254537875018,
     9.23336945961898, -10.456552819547769, 5.510552602903347, 1.2024439690716742e-05,
     -2.5762961164755818, 2.320744274538718, -1.0045728797216285, -1.0207833290021913e-07,
     0.3397509217116947, -0.2672051745075747, 0.10235252851562705, 8.432973048487163e-10,
     -0.027998284958442594, 0.020066274144976814, -0.007055436891508624,
     1.9402238183698188e-12, 0.0016562888105449611, -0.0011082898580743682,
     0.0003654545161310169, -5.129003202697179e-11, -7.634010369686903e-05),
    (-17.112706061976095, -1.1208044642899115, 37.131966511885445, -52.29827102534896,
     33.058589696624615, 0.002479129897620022, -20.61089403411526, 20.88672775145582,
     -10.045703956517752, -1.2238783449063012e-05, 4.077013427422114, -3.473667358470195,
     1.4329352617312006, 7.135991441187971e-08, -0.4479725715911561, 0.3411266608064446,
     -0.12699786326594922, -2.895367726908153e-10, 0.03312577627825986, -0.023274087021036102,
     0.008039999350364889, -1.177805216235265e-09, -0.001832162489107167,
     0.0012108282933588664, -0.0003947994124682252),
    (73.89033153567425, -156.80141270402274, 132.2177542759164, 0.013692876877324546,
     -123.66496885920151, 146.2068939106273, -80.36558772486535, -0.00011259851148881298,
     40.77013219617994, -38.21034001327303, 17.19522294277362, 9.351970795516835e-07,
     -6.271615990774704, 5.116899907185264, -2.0319658112299095, -4.950721558276154e-09,
     0.596263972943326, -0.44220765337238094, 0.16079998700166273, -2.4733786203223403e-08,
     -0.040307574759979765, 0.02784905074709787, -0.009475185899205422, 6.419922235909132e-06,
     0.002125018077469946),
    (212.1683709838252, 13.107863022633868, -496.9828593287175, 731.215952669692,
     -482.1382172089085, -0.028817248692894887, 326.167203029471, -343.8934028008712,
     171.95193870816232, 0.00014038077378096157, -75.2594195897599, 66.51969984520935,
     -28.447519748152462, -7.613702615875392e-07, 9.540223710530437, -7.517530111331138,
     2.894399756887196, -4.66121949995382e-07, -0.8061514959879409, 0.5848300657063102,
     -0.20845408972964957, 0.00014765818959305816, 0.05100043386375302, -0.03306625214188366,
     0.015109265210467774),
    (-989.5964309832236, 2192.555536090523, -1928.3586782723355, -0.15925738122215252,
     1956.9985945919857, -2407.2514765081555, 1375.6149959336497, 0.0012920735237496668,
     -752.5941715948055, 731.7166874220871, -341.37023466220063, -9.985739026060805e-06,
     133.56313181291574, -112.76295161252794, 46.31039609820446, -7.923738713361476e-06,
     -14.510726927018647, 11.111771248100563, -4.169081794527089, 0.0031008219800117806,
     1.1220095449981469, -0.7605237992614992, 0.36262236505085255, 0.2216867741940747,
     0.48683443692930506),
)


# torch's decompositions, 16-bit tensors computed in their own type (as torch's kernels)
decomposed_in_own_type(aten.special_entr.default, aten.special_xlog1py.default,
                       aten.special_xlog1py.self_scalar, aten.special_xlog1py.other_scalar,
                       aten.mvlgamma.default)
