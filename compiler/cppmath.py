"""The generated header's own transcendental functions (no libm), for float or double.

``math_source(scalar, functions)`` returns C++17 text that the emitter pastes inside
``namespace <model> { namespace detail { ... } }``: only ``inline`` functions and the flag
``kVectorUnit`` (SSE2 or NEON present), no ``#include``, no namespaces, no statics, no
loops, no tables, no recursion, no heap. Every copy is self-contained, so two models'
headers in one program link fine (inline functions in different namespaces), and the text
is a pure function of ``scalar``.

Public functions (T = the scalar), each ``inline T f(T x) noexcept``: m_exp, m_expm1,
m_log1p, m_tanh, m_erf, m_sin, m_cos, m_sqrt, m_atan, and ``inline T m_atan2(T y, T x)
noexcept``, ``inline void m_sincos(T x, T& s, T& c) noexcept`` (both of one angle from one
reduction, bit-identical to m_sin and m_cos). Internal helpers are prefixed ``mx_``.
``functions`` names the ones wanted (e.g. ["expm1"]); the text then carries those, the ones
they call (tanh needs expm1, erf needs exp) and the small mx_ helpers, nothing else.

Measured max error, in ulps of the exact result (float: exhaustive over all 2^32 inputs
against double libm; double: 2.25M random points over the interesting ranges against long
double libm, erf on 60k of them against mpmath; tests/test_cppmath.py re-measures on ~216k
points per scalar, also with FMA contraction, and asserts the bound):

  function   float   double   bound (asserted)   float / double range of the claim
  m_exp      0.77    0.75     1                  all inputs (subnormal results in subnormal ulps)
  m_expm1    0.95    0.92     1                  all inputs
  m_log1p    0.88    0.82     1                  x > -1
  m_tanh     1.34    1.32     2                  all inputs
  m_erf      1.14    0.98     2                  all inputs
  m_sin      0.81    0.86     1                  |x| <= 12800 / 1.6e6, NaN beyond
  m_cos      0.81    0.83     1                  |x| <= 12800 / 1.6e6, NaN beyond
  m_sqrt     0.5     0.5      0.5                IEEE correctly rounded
  m_atan     0.83    0.82     1                  all inputs
  m_atan2    1.44    1.56     2                  all inputs

(atan, atan2: 3M random points per scalar, log-uniform magnitudes and every angle, against
float64 numpy (float) and long double libm (double); tests/test_cppmath_atan.py re-measures
on ~143k points against those and mpmath, C99 special values included.)

Special values: NaN in gives NaN out (the input's own bits, except sin/cos: the default
quiet NaN, and sqrt: the hardware's quieted NaN); exp(+inf) = inf, exp(-inf) = 0,
overflow gives +inf, underflow a subnormal (within the bound, in subnormal ulps) or 0,
never flushed; expm1(-inf) = -1; log1p(-1) = -inf, log1p(x < -1) = NaN,
log1p(inf) = inf; tanh, erf saturate to +-1; -0 is returned unchanged by expm1, log1p,
tanh, erf, sin. sin and cos return NaN for |x| > 12800 (float) / 1.6e6 (double) and for
+-inf: beyond that the reduction below is no longer exact, and NaN is better than a
plausible wrong value. Results for inputs outside a branch's range are computed and
discarded, so floating-point exception flags may be raised spuriously (never trapped
by default); the code never relies on them.

Algorithms. Coefficients are minimax polynomials from a Remez exchange run with mpmath
at 60 digits (relative error of the approximated kernel unless noted), rounded to the
nearest float / double; "err" is the kernel's approximation error before rounding, far
below the result's rounding in every case.

* exp, expm1: k = round(x / ln2) by adding and subtracting 1.5 * 2^23 / 2^52 (round to
  nearest without any float->int conversion, so NaN or huge inputs are never UB; the
  integer k is read from the bits of the sum); expm1 only: k = 0 for |x| < 1/2 (exp
  rounds for every x, so its instruction count does not depend on x: a select there is
  a branch on scalar cores, and softplus / sigmoid layers took one side or the other per
  neuron -- 1% instruction jitter per call on a Cortex-M4F).
  r = x - k ln2 with ln2 = LN2_HI + LN2_LO (Cody-Waite; LN2_HI has 15 / 32 significant
  bits, so k LN2_HI and x - k LN2_HI are exact), |r| <= 1/2, kept as r + rc.
  e^r - 1 - r = r^2 P(r), P of degree 6 / 11 on |r| <= 0.5005 (err 2^-30.5 / 2^-58.3).
  exp = 2^k (1 + r + ...) with Fast2Sum(1, r) so that the only large rounding is the last
  addition; expm1 = 2^k ((1 - 2^-k) + r + ...) with 1 - 2^-k formed exactly by TwoSum, so
  no k cancels (k = 0 below 1/2 avoids 2 (1/2 + r) with r near -ln2/2). 2^k is applied as
  2^k1 * 2^k2 built from exponent bits, so results near overflow and subnormal results are
  rounded once. Beyond 89 / 710 (+inf) and below -104 / -746 (0; expm1: -18 / -40, -1)
  the result is selected.
* log1p: 1 + x = u + ue exactly (TwoSum); u = 2^k m with m in [sqrt(2)/2, sqrt(2)) by
  integer arithmetic on the bits (u >= 2^-24 / 2^-53 is normal for x > -1); f = m - 1
  (exact), s = f / (2 + f), log(1 + f) = f - hfsq + s (hfsq + R) with hfsq = f^2 / 2,
  R = z Q(z), z = s^2 <= 0.0295, Q of degree 2 / 6 (err 2^-21.8 / 2^-50.9, scaled by z/3
  in the result); ue / u and k LN2_LO are added before the large k LN2_HI (fdlibm's
  arrangement).
* tanh: |x| < 0.625: x + x^3 T(x^2), T of degree 5 / 11 (err 2^-27.6 / 2^-56.2); else
  1 - 2 / (expm1(2|x|) + 2) (2 / inf = 0 gives 1 for large |x|).
* erf: |x| < 1: x + x (E(z) - 1), z = x^2, E ~ erf(x)/x of degree 6 / 12 in z - 1/2
  (err 2^-29.6 / 2^-62.7); 1 <= |x| < 3.92 / 5.93: 1 - exp(-x^2) G(|x| - c) with
  G ~ erfc(x) exp(x^2) of degree 8 / 21 around c = 2.46 / 3.465, fitted for the absolute
  error of erfc (weight exp(-x^2); err 2^-28.6 / 2^-58.7); beyond that erf rounds to +-1.
* sin, cos: k = round(x 2/pi) (same 1.5 * 2^p trick; k & 3 is the quadrant),
  r = x - k pi/2 with pi/2 in 5 parts: the first four are pi/2 truncated to multiples
  of 2^-10, 2^-21, 2^-32, 2^-43 (float) / 2^-32, 2^-53, 2^-86, 2^-119 (double), at most
  11 / 33 significant bits each, so k * part is exact for |k| <= 2^13 / < 2^20; the first
  two subtractions are exact (the difference is a multiple of ulp(x) below 1), the next
  two are TwoSums, and the fifth part (the rest, rounded) goes into the low word. r + rr is
  thereby exact far below the closest approach of a float in range to a multiple of pi/2
  (2^-28 at x = 252.898209, found by an exhaustive search). sin r = r + r^3 S(r^2), S of
  degree 3 / 5; cos r = 1 - r^2/2 + r^4 C(r^2) with the rounding error of 1 - r^2/2
  recovered exactly (fdlibm), C of degree 2 / 5; both on r^2 <= 1.002 (pi/4)^2 (err
  2^-32.4 / 2^-52.8 and 2^-24.3 / 2^-54.8, scaled by r^2/6 and r^4/24 in the result); rr
  enters to first order.
* atan: fdlibm's reduction, branch-free: c = 0, 1/2, 1, 3/2 on [0, 7/16), [7/16, 11/16),
  [11/16, 19/16), [19/16, 39/16) (|x| - c exact by Sterbenz), t = (|x| - c) / (1 + c|x|),
  and t = -1/|x| with atan c = pi/2 beyond, so |t| <= 7/16; atan c is carried as hi + lo
  and the result summed hi - ((t^3 Q(t^2) - lo) - t), Q ~ (t - atan t) / t^3 of degree
  5 / 11 in t^2 (relative err 2^-28.4 / 2^-56.3, scaled by t^2/3 <= 0.064 in the result).
* atan2: a = atan(min(|x|,|y|) / max(|x|,|y|)) (one extra rounding, the quotient's), then
  hi + (+-a + lo) with hi + lo = 0, pi/2 or pi chosen by the octant; 0/0 and inf/inf are
  replaced by 0 and 1 first, which gives C99's values for signed zeros and infinities.
* sqrt: __builtin_sqrtf / __builtin_sqrt, IEEE correctly rounded, one instruction on an
  FPU. NOTE: unless compiled with -fno-math-errno, GCC keeps a call to libm's sqrt /
  sqrtf for negative arguments (to set errno), so the object then needs libm (a loop
  over m_sqrt also does not vectorize). With -fno-math-errno no call remains. On a
  target without an FPU for T it is a libm call regardless.

Builtins used: __builtin_memcpy (bit reinterpretation between T and std::uint32_t /
std::uint64_t, the defined way to type-pun; compiles to a register move) and
__builtin_sqrtf / __builtin_sqrt. All integer bit manipulation is on unsigned words (no
signed overflow, no implementation-defined shifts or conversions).

Determinism and vectorization: branch-free; on targets with a vector unit (SSE2, NEON)
every select is a bit-mask select (mx_select) because GCC, under the default
-ftrapping-math, sinks the arithmetic of a floating-point ?: into a branch and then refuses
to if-convert it; scalar cores keep the ?: (cheaper there; the same value, so the same
bits: tests/test_firmware.py compares every activation on the Cortex-M4F with the host).
Every expression is written in the order it is to be evaluated, so with -ffp-contract=off
the results are bit-identical between -O0, -O2 and -O3 -march=x86-64-v3. GCC -O3
vectorizes a loop over any of the functions (float: from SSE2 on; double: needs SSE4.1
64-bit compares, e.g. -march=x86-64-v2 or later). With FMA contraction the accuracy still
holds (every step is at least as accurate), only the bit-identity across builds is lost;
-ffast-math is not supported (it removes the NaN tests and may reassociate the compensated
sums). The float code uses float arithmetic only (every literal is suffixed f).
"""
from __future__ import annotations

from string import Template

__all__ = ["MATH_FUNCTIONS", "math_source"]

# In the order the text defines them; each calls only functions listed before it.
MATH_FUNCTIONS = ("exp", "expm1", "log1p", "tanh", "erf", "sin", "cos", "sincos", "sqrt", "atan", "atan2")
_CALLS = {"tanh": ("expm1",), "erf": ("exp",), "atan2": ("atan",)}


def _horner(var: str, coeffs: list[str], suffix: str) -> str:
    """c0 + var * (c1 + var * (... + var * cn)) with suffixed literals, wrapped at ~90 columns."""
    pieces = [f"{c}{suffix} + {var} * (" for c in coeffs[:-1]]
    pieces.append(f"{coeffs[-1]}{suffix}" + ")" * (len(coeffs) - 1))
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece) > 72:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return "\n        ".join(lines + [line])


# Per-scalar constants. Polynomial coefficients are written with the shortest decimal that
# reads back as the rounded value (exact), low degree first.
_FLOAT = {
    "T": "float", "U": "std::uint32_t", "SUF": "f", "MANT": "23", "BIAS": "127u",
    "ABS": "0x7fffffffu", "SIGN": "0x80000000u", "SIGN_SHIFT": "30", "QNAN": "0x7fc00000u",
    "INF": "0x7f800000u", "MANT_MASK": "0x007fffffu", "ONE_BITS": "0x3f800000u",
    "SQRTH_BITS": "0x3f3504f3u", "KOFF": "512u", "SQRT": "__builtin_sqrtf",
    "MAGIC": "0x1.8p+23f",                      # 1.5 * 2^23
    "LOG2E": "1.44269504f", "LN2_HI": "0x1.62e4p-1f", "LN2_LO": "1.42860677e-06f",
    "EXP_HI": "89.0f", "EXP_LO": "-104.0f", "EXPM1_LO": "-18.0f",
    "TANH_SMALL": "0.625f", "ERF_SAT": "3.92f", "ERFC_C": "2.46f",
    "SIN_MAX": "12800.0f", "TWO_OVER_PI": "0.636619747f",
    "PIO2_1": "0x1.92p+0f", "PIO2_2": "0x1.fbp-12f", "PIO2_3": "0x1.51p-22f",
    "PIO2_4": "0x1.0bp-34f", "PIO2_5": "0x1.184698p-44f",
    "exp": ["0.5", "0.16666667", "0.041666664", "0.008333182", "0.001388904", "0.000199622",
            "2.484177e-05"],
    "log": ["0.66666687", "0.39988717", "0.29582587"],
    "tanh": ["-0.33333334", "0.13333304", "-0.053959265", "0.021768948", "-0.008344029",
             "0.0022928303"],
    "erf": ["-0.03453126", "-0.2810722", "0.07940998", "-0.018283358", "0.0034802991",
            "-0.00056540355", "7.853861e-05"],
    "erfc": ["0.21382168", "-0.07637499", "0.025913045", "-0.0085119065", "0.0024472799",
             "-0.0007843417", "0.0004850862", "0.00019087187", "0.00010684303"],
    "sin": ["-0.16666667", "0.008333332", "-0.00019840077", "2.7248798e-06"],
    "cos": ["0.041666664", "-0.0013888299", "2.4547102e-05"],
    # atan c + its low part for c = 1/2, 1, 3/2, inf; pi (exact hex: hi = atan c rounded, lo = the rest)
    "ATAN_HI1": "0x1.dac67p-2f", "ATAN_LO1": "0x1.586ed4p-28f",
    "ATAN_HI2": "0x1.921fb6p-1f", "ATAN_LO2": "-0x1.777a5cp-26f",
    "ATAN_HI3": "0x1.f730bep-1f", "ATAN_LO3": "-0x1.afc12cp-26f",
    "PIO2_HI": "0x1.921fb6p+0f", "PIO2_LO": "-0x1.777a5cp-25f",
    "PI_HI": "0x1.921fb6p+1f", "PI_LO": "-0x1.777a5cp-24f",
    "atan": ["0.33333334", "-0.19999963", "0.14283425", "-0.11058585", "0.08534249", "-0.04826715"],
}

_DOUBLE = {
    "T": "double", "U": "std::uint64_t", "SUF": "", "MANT": "52", "BIAS": "1023u",
    "ABS": "0x7fffffffffffffffu", "SIGN": "0x8000000000000000u", "SIGN_SHIFT": "62",
    "QNAN": "0x7ff8000000000000u", "INF": "0x7ff0000000000000u",
    "MANT_MASK": "0x000fffffffffffffu", "ONE_BITS": "0x3ff0000000000000u",
    "SQRTH_BITS": "0x3fe6a09e667f3bcdu", "KOFF": "4096u", "SQRT": "__builtin_sqrt",
    "MAGIC": "0x1.8p+52",                       # 1.5 * 2^52
    "LOG2E": "1.4426950408889634", "LN2_HI": "0x1.62e42feep-1",
    "LN2_LO": "1.9082149292705877e-10",
    "EXP_HI": "710.0", "EXP_LO": "-746.0", "EXPM1_LO": "-40.0",
    "TANH_SMALL": "0.625", "ERF_SAT": "5.93", "ERFC_C": "3.465",
    "SIN_MAX": "1.6e6", "TWO_OVER_PI": "0.6366197723675814",
    "PIO2_1": "0x1.921fb544p+0", "PIO2_2": "0x1.0b46p-34", "PIO2_3": "0x1.1a626331p-54",
    "PIO2_4": "0x1.1701b838p-88", "PIO2_5": "0x1.a252049c1114dp-120",
    "exp": ["0.5", "0.16666666666666666", "0.04166666666666706", "0.008333333333333037",
            "0.0013888888888704337", "0.00019841269841871235", "2.4801587616620156e-05",
            "2.7557318772337714e-06", "2.7557076311623435e-07", "2.505221079948431e-08",
            "2.09630250915303e-09", "1.6078152183881675e-10"],
    "log": ["0.666666666666667", "0.3999999999989794", "0.28571428626665474",
            "0.2222221102467092", "0.18182897000708967", "0.1533146389591619",
            "0.1461959256947003"],
    "tanh": ["-0.3333333333333333", "0.13333333333333042", "-0.053968253967897235",
             "0.021869488519017967", "-0.008863235103437868", "0.0035921217534995715",
             "-0.001455775429451976", "0.0005896607407715234", "-0.0002375909039215715",
             "9.257164529135498e-05", "-3.1201622059840685e-05", "6.48540536841869e-06"],
    "erf": ["-0.03453126133013269", "-0.2810721780454342", "0.07940998675593483",
            "-0.018283884489152902", "0.003480274496665399", "-0.0005611894221160596",
            "7.829649525828253e-05", "-9.614808686253173e-06", "1.0536449242065258e-06",
            "-1.0420369671659903e-07", "9.387731778585829e-09", "-7.798509125689793e-10",
            "5.945258612266519e-11"],
    "erfc": ["0.156753156317053", "-0.04207979381459494", "0.010946670755662894",
             "-0.0027663865100946983", "0.0006805704096859565", "-0.00016328425365354904",
             "3.826468963242837e-05", "-8.767715322137445e-06", "1.97254628958184e-06",
             "-4.328033286651166e-07", "8.896299306351265e-08", "-2.497599720849488e-08",
             "2.737245782318149e-09", "9.621445035391888e-10", "2.191125812174698e-09",
             "7.363529899334653e-10", "-5.4807781580425935e-11", "-1.98329224253438e-10",
             "-9.537837183985723e-11", "-2.43814365872002e-11", "-3.3976544126379775e-12",
             "-2.1411134111722207e-13"],
    "sin": ["-0.16666666666666666", "0.008333333333330901", "-0.0001984126983669137",
            "2.7557316069769037e-06", "-2.5051125349113587e-08", "1.5917680721455347e-10"],
    "cos": ["0.041666666666666664", "-0.0013888888888887372", "2.48015872987305e-05",
            "-2.755731725431973e-07", "2.087614277681558e-09", "-1.138238878994316e-11"],
    "ATAN_HI1": "0x1.dac670561bb4fp-2", "ATAN_LO1": "0x1.a2b7f222f65e2p-56",
    "ATAN_HI2": "0x1.921fb54442d18p-1", "ATAN_LO2": "0x1.1a62633145c07p-55",
    "ATAN_HI3": "0x1.f730bd281f69bp-1", "ATAN_LO3": "0x1.007887af0cbbdp-56",
    "PIO2_HI": "0x1.921fb54442d18p+0", "PIO2_LO": "0x1.1a62633145c07p-54",
    "PI_HI": "0x1.921fb54442d18p+1", "PI_LO": "0x1.1a62633145c07p-53",
    "atan": ["0.3333333333333333", "-0.19999999999999424", "0.14285714285569598", "-0.1111111109687119",
             "0.09090908365002953", "-0.07692285782992486", "0.06666245375862137", "-0.058769800308104476",
             "0.052168895498361026", "-0.04493073685623778", "0.03314600287015154", "-0.014790118557769634"],
}

# How m_exp and m_expm1 pick k = round(x / ln2) (adding 1.5*2^p rounds to an integer in the
# low mantissa bits). m_exp: always, so its cost does not depend on x (a select here is a
# branch on scalar cores: softplus / sigmoid layers took one path or the other per neuron).
_EXP_K = """\
    // k = round(x / ln2): adding 1.5*2^p rounds to an integer in the low mantissa bits.
    const $T t = x * $LOG2E + $MAGIC;
"""
# m_expm1: k = 0 for |x| < 1/2, else expm1 = 2 (1/2 + r + ...) would cancel for r near -ln2/2.
# The select is of two constants (x * 0 = +-0 for the finite |x| < 1/2): the same k as
# 'small ? MAGIC : x * LOG2E + MAGIC', with no arithmetic in an arm of the select, so no
# branch on scalar cores (tanh, GELU layers took one side or the other per neuron).
_EXPM1_K = """\
    // k = round(x / ln2): adding 1.5*2^p rounds to an integer in the low mantissa bits;
    // k = 0 for |x| < 1/2: else expm1 = 2 (1/2 + r + ...) would cancel for r near -ln2/2.
    const $T t = x * mx_select(mx_fabs(x) < $HALF, $ZERO, $LOG2E) + $MAGIC;
"""

# Shared by m_exp and m_expm1 (after $EXP_K). Arguments past the saturation thresholds give
# unused garbage.
_EXP_REDUCE = """\
$EXP_K    const $T kf = t - $MAGIC;  // k, exact
    const $U k = mx_bits(t) - mx_bits($MAGIC);  // k as a two's-complement word
    const $T rh = x - kf * $LN2_HI;  // exact (Cody-Waite, Sterbenz)
    const $T rl = -(kf * $LN2_LO);
    const $T r = rh + rl;  // |r| <= ln2 / 2, or < 1/2 when k = 0
    const $T rc = (rh - r) + rl;  // r + rc = rh + rl (Fast2Sum)
    // p = e^(r+rc) - 1 - (r+rc) to first order in rc (d/dr of e^r - 1 - r is ~r)
    const $T p = (r * r) * ($P_EXP) + r * rc;
    // 2^k = 2^k1 * 2^k2 with k1 = floor(k / 2): both factors are normal numbers.
    const $U k1 = ((k + $KOFF) >> 1) - ($KOFF >> 1);
    const $U k2 = k - k1;
"""

# Shared by m_sin and m_cos: r + rr = x - k pi/2, quadrant q = k & 3, sn = sin(r + rr),
# cs = cos(r + rr).
_TRIG_REDUCE = """\
    const bool in_range = mx_fabs(x) <= $SIN_MAX;  // false for NaN and +-inf
    const $T t = x * $TWO_OVER_PI + $MAGIC;
    const $T kf = t - $MAGIC;  // k = round(x 2/pi), exact
    const $U q = mx_bits(t) - mx_bits($MAGIC);  // k as a word; q & 3 = quadrant
    const $T a2 = (x - kf * $PIO2_1) - kf * $PIO2_2;  // exact
    const $T b3 = kf * $PIO2_3;  // exact
    const $T a3 = a2 - b3;  // TwoSum: a3 + e3 = a2 - b3
    const $T v3 = a3 - a2;
    const $T e3 = (a2 - (a3 - v3)) - (b3 + v3);
    const $T b4 = kf * $PIO2_4;  // exact
    const $T a4 = a3 - b4;  // TwoSum: a4 + e4 = a3 - b4
    const $T v4 = a4 - a3;
    const $T e4 = (a3 - (a4 - v4)) - (b4 + v4);
    const $T lo = (e3 + e4) - kf * $PIO2_5;
    const $T r = a4 + lo;  // Fast2Sum: r + rr = a4 + lo
    const $T rr = lo - (r - a4);
    const $T z = r * r;
    const $T sn = r + (rr * ($ONE - $HALF * z) + (r * z) * ($P_SIN));
    const $T hz = $HALF * z;
    const $T w = $ONE - hz;  // 1 - hz, its error added back
    const $T cs = w + ((($ONE - w) - hz) + ((z * z) * ($P_COS) - r * rr));
"""

_TEMPLATE = """\
// ---- cbfsim transcendental functions for $T (compiler/cppmath.py; no libm) ----
// Branch-free and loop-free so that loops over them vectorize; bit-identical across
// optimization levels with -ffp-contract=off. Accuracy and special values: see cppmath.py.
// Targets with a vector unit: loops should vectorize (also used by the layer templates).
#if defined(__SSE2__) || defined(__ARM_NEON)
constexpr bool kVectorUnit = true;
#else
constexpr bool kVectorUnit = false;
#endif
inline $U mx_bits($T x) noexcept { $U u = 0u; __builtin_memcpy(&u, &x, sizeof u); return u; }
inline $T mx_real($U u) noexcept { $T x = $ZERO; __builtin_memcpy(&x, &u, sizeof x); return x; }
inline $T mx_fabs($T x) noexcept { return mx_real(mx_bits(x) & $ABS); }
inline $T mx_copysign($T mag, $T sgn) noexcept {
    return mx_real((mx_bits(mag) & $ABS) | (mx_bits(sgn) & $SIGN));
}
// c ? a : b. On targets with a vector unit, on the bits: GCC (under the default
// -ftrapping-math) sinks the arithmetic of each arm of a floating-point ?: into a branch
// and then cannot if-convert it, which stops loops from vectorizing; a mask select keeps
// them straight-line. Scalar cores (Cortex-M, Xtensa) keep the ?:, a conditional move
// there (Cortex-M4F, pendulum order 2: 30,720 instructions a call, 35,240 with masks).
// A ?: whose arm holds arithmetic can still become a branch there: keep such selects out
// of paths whose cost should not depend on the data (m_exp has none before saturation).
inline $T mx_select(bool c, $T a, $T b) noexcept {
    if constexpr (!kVectorUnit) return c ? a : b;
    const $U m = 0u - static_cast<$U>(c);
    return mx_real((mx_bits(a) & m) | (mx_bits(b) & ~m));
}
// 2^k for k (two's complement in a word) in the normal exponent range.
inline $T mx_pow2($U k) noexcept { return mx_real((k + $BIAS) << $MANT); }

// e^x. Overflow -> +inf, underflow -> correctly scaled subnormal or 0.
inline $T m_exp($T x) noexcept {
$EXP_REDUCE_EXP\
    const $T s = $ONE + rh;  // Fast2Sum: s + e = 1 + rh
    const $T e = rh - (s - $ONE);
    const $T y = s + (e + (rl + p));  // e^r
    const $T res = (y * mx_pow2(k1)) * mx_pow2(k2);
    const $T sat = mx_select(x > $EXP_HI, mx_real($INF), mx_select(x < $EXP_LO, $ZERO, res));
    return mx_select(x != x, x, sat);  // NaN: the input itself (exact payload)
}

// e^x - 1, accurate relative to its value near 0. expm1(-inf) = -1.
inline $T m_expm1($T x) noexcept {
$EXP_REDUCE_EXPM1\
    const $T d = mx_pow2(0u - k1) * mx_pow2(0u - k2);  // 2^-k, exact (maybe subnormal)
    const $T a = $ONE - d;  // TwoSum: a + ae = 1 - 2^-k exactly
    const $T ab = a - $ONE;
    const $T ae = ($ONE - (a - ab)) + (-d - ab);
    const $T s = a + rh;  // Fast2Sum (|a| >= 1/2 > |rh| when k != 0, a = 0 when k = 0)
    const $T e = rh - (s - a);
    const $T y = s + (e + (ae + (rl + p)));  // e^r - 2^-k
    const $T res = (y * mx_pow2(k1)) * mx_pow2(k2);
    const $T sat = mx_select(x > $EXP_HI, mx_real($INF), mx_select(x < $EXPM1_LO, -$ONE, res));
    return mx_select((x != x) | (x == $ZERO), x, sat);  // NaN payload and -0 kept
}

// log(1 + x) for x > -1; log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(inf) = inf.
inline $T m_log1p($T x) noexcept {
    const $T u = $ONE + x;  // TwoSum: u + ue = 1 + x exactly
    const $T ub = u - $ONE;
    const $T ue = ($ONE - (u - ub)) + (x - ub);
    // u = 2^k m, m in [sqrt(2)/2, sqrt(2)): offset the bits so the exponent turns at sqrt(2)/2.
    const $U iu = mx_bits(u) + ($ONE_BITS - $SQRTH_BITS);
    const $U k = (iu >> $MANT) - $BIAS;
    const $T f = mx_real((iu & $MANT_MASK) + $SQRTH_BITS) - $ONE;  // m - 1, exact
    const $T kf = mx_real(mx_bits($MAGIC) + k) - $MAGIC;  // k as $T, exact
    const $T c = ue / u;  // log(u + ue) - log(u) to first order
    const $T hfsq = $HALF * f * f;
    const $T s = f / ($TWO + f);
    const $T z = s * s;
    const $T rz = z * ($P_LOG);
    const $T res = kf * $LN2_HI - ((hfsq - (s * (hfsq + rz) + (kf * $LN2_LO + c))) - f);
    const $T spec = mx_select(x < -$ONE, mx_real($QNAN), mx_select(x == -$ONE, -mx_real($INF), res));
    const $T big = mx_select(x == mx_real($INF), x, spec);
    return mx_select((x != x) | (x == $ZERO), x, big);  // NaN payload and -0 kept
}

// tanh(x).
inline $T m_tanh($T x) noexcept {
    const $T ax = mx_fabs(x);
    const $T z = x * x;
    const $T small = x + (x * z) * ($P_TANH);
    const $T t = m_expm1($TWO * ax);  // +inf for large |x|
    const $T large = $ONE - $TWO / (t + $TWO);
    const $T res = mx_select(ax < $TANH_SMALL, small, mx_copysign(large, x));  // NaN: large
    return mx_select((x != x) | (x == $ZERO), x, res);  // NaN payload and -0 kept
}

// erf(x).
inline $T m_erf($T x) noexcept {
    const $T ax = mx_fabs(x);
    const $T z = x * x;
    const $T v = z - $HALF;  // E(z) - 1 in powers of z - 1/2: less cancellation near z = 1
    const $T small = x + x * ($P_ERF);  // x E(z) = x + x (E(z) - 1)
    const $T w = ax - $ERFC_C;
    const $T erfc = m_exp(-(ax * ax)) * ($P_ERFC);  // garbage (unused) past ERF_SAT
    const $T large = mx_select(ax >= $ERF_SAT, $ONE, $ONE - erfc);
    const $T res = mx_select(ax < $ONE, small, mx_copysign(large, x));
    return mx_select(x != x, x, res);  // NaN payload kept
}

// sin(x) for |x| <= $SIN_MAX; NaN beyond (and for +-inf, NaN).
inline $T m_sin($T x) noexcept {
$TRIG_REDUCE\
    const $T v = mx_select((q & 1u) != 0u, cs, sn);
    const $T res = mx_real(mx_bits(v) ^ ((q & 2u) << $SIGN_SHIFT));
    return mx_select(in_range, mx_select(x == $ZERO, x, res), mx_real($QNAN));
}

// cos(x) for |x| <= $SIN_MAX; NaN beyond (and for +-inf, NaN).
inline $T m_cos($T x) noexcept {
$TRIG_REDUCE\
    const $T v = mx_select((q & 1u) != 0u, sn, cs);
    const $T res = mx_real(mx_bits(v) ^ (((q + 1u) & 2u) << $SIGN_SHIFT));
    return mx_select(in_range, res, mx_real($QNAN));
}

// s = sin(x), c = cos(x) from one reduction: the bits of m_sin(x) and m_cos(x) (the periodic
// input embedding evaluates both of one angle).
inline void m_sincos($T x, $T& s, $T& c) noexcept {
$TRIG_REDUCE\
    const bool odd = (q & 1u) != 0u;
    const $T vs = mx_select(odd, cs, sn);
    const $T vc = mx_select(odd, sn, cs);
    const $T rs = mx_real(mx_bits(vs) ^ ((q & 2u) << $SIGN_SHIFT));
    const $T rc = mx_real(mx_bits(vc) ^ (((q + 1u) & 2u) << $SIGN_SHIFT));
    s = mx_select(in_range, mx_select(x == $ZERO, x, rs), mx_real($QNAN));
    c = mx_select(in_range, rc, mx_real($QNAN));
}

// sqrt(x), IEEE correctly rounded. Needs -fno-math-errno to avoid a libm call for x < 0.
inline $T m_sqrt($T x) noexcept { return $SQRT(x); }

// atan(x). atan|x| = atan c + atan t, t = (|x| - c) / (1 + c |x|), with c = 0, 1/2, 1, 3/2
// on [0, 7/16), [7/16, 11/16), [11/16, 19/16), [19/16, 39/16) and t = -1/|x|, atan c = pi/2
// beyond (fdlibm's intervals), so |t| <= 7/16; atan t = t - t^3 Q(t^2).
inline $T m_atan($T x) noexcept {
    const $T ax = mx_fabs(x);
    const bool r1 = ax >= 0.4375$SUF;
    const bool r2 = ax >= 0.6875$SUF;
    const bool r3 = ax >= 1.1875$SUF;
    const bool r4 = ax >= 2.4375$SUF;  // also +inf; NaN: none of r1..r4
    const $T c = mx_select(r3, 1.5$SUF, mx_select(r2, $ONE, mx_select(r1, $HALF, $ZERO)));
    const $T hi = mx_select(r4, $PIO2_HI, mx_select(r3, $ATAN_HI3,
                  mx_select(r2, $ATAN_HI2, mx_select(r1, $ATAN_HI1, $ZERO))));
    const $T lo = mx_select(r4, $PIO2_LO, mx_select(r3, $ATAN_LO3,
                  mx_select(r2, $ATAN_LO2, mx_select(r1, $ATAN_LO1, $ZERO))));
    const $T num = mx_select(r4, -$ONE, ax - c);  // ax - c exact (Sterbenz)
    const $T den = mx_select(r4, ax, $ONE + c * ax);
    const $T t = num / den;
    const $T z = t * t;
    const $T res = hi - ((((t * z) * ($P_ATAN)) - lo) - t);  // hi + lo + atan t
    return mx_select(x != x, x, mx_copysign(res, x));  // NaN payload kept; -0 -> -0
}

// atan2(y, x) in [-pi, pi] with C99's special values: atan2(+-0, +0) = +-0,
// atan2(+-0, -0) = +-pi, atan2(+-inf, +inf) = +-pi/4, atan2(+-inf, -inf) = +-3pi/4.
// a = atan(min(|x|,|y|) / max(|x|,|y|)); the angle of (|x|, |y|) is a, pi/2 - a (|y| > |x|),
// and of (-|x|, |y|) pi - a or pi/2 + a ("west": the sign bit of x, so -0 counts);
// hi + (lo +- a) with hi + lo = 0, pi/2 or pi; the sign of y last.
inline $T m_atan2($T y, $T x) noexcept {
    const $T ax = mx_fabs(x);
    const $T ay = mx_fabs(y);
    const bool steep = ay > ax;
    const $T q = mx_select(ax == ay, mx_select(ax == $ZERO, $ZERO, $ONE),  // 0/0 -> 0, inf/inf -> 1
                           mx_select(steep, ax, ay) / mx_select(steep, ay, ax));
    const $T a = m_atan(q);
    const bool west = (mx_bits(x) & $SIGN) != 0u;
    const $T hi = mx_select(steep, $PIO2_HI, mx_select(west, $PI_HI, $ZERO));
    const $T lo = mx_select(steep, $PIO2_LO, mx_select(west, $PI_LO, $ZERO));
    const $T r = hi + (mx_select(steep == west, a, -a) + lo);
    return mx_select(x != x, x, mx_select(y != y, y, mx_copysign(r, y)));  // NaN: an input's own bits
}
"""


def math_source(scalar: str, functions=None) -> str:
    """C++17 source text of the header's own transcendental functions for scalar 'float' or
    'double': all of them, or only ``functions`` (names from MATH_FUNCTIONS) and what they call."""
    if scalar == "float":
        spec = _FLOAT
    elif scalar == "double":
        spec = _DOUBLE
    else:
        raise ValueError(f"math_source: scalar must be 'float' or 'double', not {scalar!r}")
    wanted = set(MATH_FUNCTIONS if functions is None else functions)
    unknown = sorted(wanted - set(MATH_FUNCTIONS))
    if unknown:
        raise ValueError(f"math_source: unknown functions {unknown}; choose from {', '.join(MATH_FUNCTIONS)}")
    for fn in reversed(MATH_FUNCTIONS):   # callees come earlier, so one backward pass closes the set
        if fn in wanted:
            wanted.update(_CALLS.get(fn, ()))
    suf = spec["SUF"]
    values = {k: v for k, v in spec.items() if isinstance(v, str)}
    values.update(ZERO="0.0" + suf, ONE="1.0" + suf, TWO="2.0" + suf, HALF="0.5" + suf,
                  P_EXP=_horner("r", spec["exp"], suf), P_LOG=_horner("z", spec["log"], suf),
                  P_TANH=_horner("z", spec["tanh"], suf), P_ERF=_horner("v", spec["erf"], suf),
                  P_ERFC=_horner("w", spec["erfc"], suf), P_SIN=_horner("z", spec["sin"], suf),
                  P_COS=_horner("z", spec["cos"], suf), P_ATAN=_horner("z", spec["atan"], suf))
    for key, k_line in (("EXP_REDUCE_EXP", _EXP_K), ("EXP_REDUCE_EXPM1", _EXPM1_K)):
        values[key] = Template(_EXP_REDUCE).substitute(values, EXP_K=Template(k_line).substitute(values))
    values["TRIG_REDUCE"] = Template(_TRIG_REDUCE).substitute(values)
    # The text is the helpers, then one blank-line-separated block per function in MATH_FUNCTIONS order.
    prelude, *blocks = Template(_TEMPLATE).substitute(values).split("\n\n")
    if len(blocks) != len(MATH_FUNCTIONS) or any(f" m_{fn}(" not in block for fn, block in zip(MATH_FUNCTIONS, blocks)):
        raise RuntimeError("cppmath: _TEMPLATE's blocks do not follow MATH_FUNCTIONS")
    return "\n\n".join([prelude] + [block for fn, block in zip(MATH_FUNCTIONS, blocks) if fn in wanted])
