/*
 * oarlock_cpu._kernels: one-pass numpy ufuncs for the transcendental activations that numpy lacks
 * or computes in many passes: erf, exact GELU (forward and backward), sigmoid, SiLU (forward and
 * backward), for float32 and float64.
 *
 * float64 is computed in double precision, float32 natively in single precision (twice the SIMD
 * lanes of double, and the shorter series float needs): float64 results are within a few ulp, float32
 * ones within a few ulp too (see tests/test_cpu_kernels.py for the measured bounds).  The math:
 *
 *   erf(z)  = z Q(z^2)                             0 <= z < ERF_SPLIT
 *   erfc(z) = t exp(-z^2 + P(t)),  t = 2/(2+z)     0 <= z (Numerical Recipes' form; P smooth on (0, 1])
 *   Phi(x)  = erfc(|x|/sqrt2)/2 for x < 0 (keeps its digits in the tail), 1 - Phi(-x) otherwise
 *   gelu(x) = x Phi(x),  gelu'(x) = Phi(x) + x exp(-x^2/2)/sqrt(2 pi)
 *
 * Q and P are polynomials (Chebyshev interpolants in the power basis, for Horner's rule) fitted by
 * tools/erf_coefficients.py (-> _kernels_coeffs.h), one set per precision.  z^2 is
 * carried as an exact head plus a tail (Dekker's split) into an exp written here, so the rounding of
 * x^2 does not cost erfc relative accuracy when x^2 is in the hundreds.  exp is Cody-Waite reduction
 * plus a Taylor polynomial, with the power of two built from the bits, so the whole loop body is
 * branch-free and gcc vectorises it.  The float32 functions mirror the double ones step for step, with
 * float constants (a 9-bit ln2 head, 2^n from 8 exponent bits, a 12-bit split of x) and a degree-7
 * exp polynomial.  Both branches of every piecewise formula are computed and one
 * is selected: wasted work, but no lane divergence.
 *
 * Special values, as libm: NaN in -> the same NaN out; erf(+-inf) = +-1; erf(-0.0) = -0.0; denormal
 * inputs are ordinary small numbers.  GELU at the infinities returns its limits (gelu(-inf) = -0.0,
 * gelu'(+inf) = 1, gelu'(-inf) = 0) where PyTorch's formula gives NaN (-inf * 0).
 *
 * Build: -O3 and -fno-math-errno (libm's errno is never read) but not -ffast-math, which would let
 * the compiler drop the NaN tests and reassociate the exact-arithmetic tricks.  The hot loops are
 * compiled several times for x86-64 (AVX-512, AVX2 + FMA, baseline) and picked at load time where
 * the compiler supports target_clones; elsewhere they are plain portable C.  The compiler may fuse
 * a*b + c into one FMA where the target has it (half the operations of a polynomial); every step
 * here stays exact or gets more accurate under that; results may differ in the last bit between
 * machines with and without FMA.
 *
 * Floating-point exception flags: the branch-free code raises "invalid" and "overflow" in lanes it
 * then discards (inf * 0, the other branch's polynomial), which numpy would report as warnings after
 * the loop; each loop clears the flags it leaves, as libm's functions raise none for these inputs.
 *
 * Ufunc loops take any strides: contiguous operands go straight to the block kernels; others are
 * gathered in blocks of BLOCK elements, computed, and scattered, so in-place calls (out=x) and
 * non-contiguous views need no special case.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_kernels_coeffs.h"

#if defined(_MSC_VER)
#define INLINE static __forceinline
#define RESTRICT __restrict
#define UNROLL
#else
/* the series loops must be unrolled completely, or gcc leaves the element loop scalar */
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 32")
#endif
#define INLINE static inline __attribute__((always_inline))
#define RESTRICT __restrict__
#endif

#include "_clones.h"   /* CLONES: AVX-512 / AVX2 / baseline versions picked at load */
#include "_pool_api.h" /* split_range: large calls on the worker pool */

#define BLOCK 512

/* ---------------------------------------------------------------------------------------------
 * scalar building blocks (inlined into the vectorised block loops)
 */

INLINE uint64_t bits_of(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }
INLINE double double_of(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

/* Horner's rule for sum_k c[k] u^k. */
INLINE double horner(const double *c, int n, double u)
{
    double p = c[n - 1];
    UNROLL
    for (int k = n - 2; k >= 0; k--)
        p = p * u + c[k];
    return p;
}

#define LOG2E 1.4426950408889634
#define LN2_HI 6.93147180369123816490e-01 /* 32 significant bits: n * LN2_HI is exact for |n| < 2^21 */
#define LN2_LO 1.90821492927058770002e-10
#define ROUND_MAGIC 6755399441055744.0     /* 1.5 * 2^52: adding it rounds to an integer, kept in the low bits */

/* exp(a + b + c) = result * *post for a + b <= 710, where a may be large but is a multiple of 2^-43 (so a - n ln2_hi
 * is exact), b is moderate and c tiny; -inf and anything below -1000 give 0, NaN gives NaN.
 * `terms` Taylor terms after 1 (13 for double precision, 8 for float's).  The scale 2^n is built
 * from the exponent bits; results below the normal range (n < -1000) are scaled in two steps so
 * they round once, into the subnormals: *post is 2^-600 there (else 1), and a caller that multiplies
 * the result by other factors applies *post last, so a subnormal product is not a rounded subnormal
 * multiplied up. */
INLINE double exp3(double a, double b, double c, int terms, double *post)
{
    double s = a + b;
    a = s < -1000.0 ? -1000.0 : a;   /* a NaN s keeps a: the result stays NaN */
    b = s < -1000.0 ? 0.0 : b;
    double k = (a + b) * LOG2E + ROUND_MAGIC;
    double n = k - ROUND_MAGIC;
    int64_t ni = (int64_t)(bits_of(k) - bits_of(ROUND_MAGIC));
    double r = ((a - n * LN2_HI) + b) - n * LN2_LO + c;
    static const double inv_fact[14] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
                                        1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800,
                                        1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};
    double p = inv_fact[terms];
    UNROLL
    for (int j = terms - 1; j >= 0; j--)
        p = p * r + inv_fact[j];
    int64_t tiny = ni < -1000;
    int64_t m = tiny ? ni + 600 : ni;
    *post = tiny ? 0x1p-600 : 1.0;
    return p * double_of((uint64_t)(m + 1023) << 52);
}

/* x^2 = hi + lo with hi exact: x = xh + xl, xh keeping the top 26 bits of the significand (cut by a
 * mask, not by Dekker's multiply-subtract, which FMA contraction would break), so xh^2 fits in 53. */
INLINE void square_split(double x, double *hi, double *lo)
{
    double xh = double_of(bits_of(x) & 0xFFFFFFFFF8000000ull);
    double xl = x - xh;
    *hi = xh * xh;
    *lo = (2.0 * xh) * xl + xl * xl;
}

/* The double-precision coefficient set (float32 has its own functions below). */
typedef struct {
    const double *p, *q;
    double zmax, t_scale, t_shift;
    int np, nq, exp_terms;
} erf_coeffs;

#define COEFFS(SUFFIX, EXP_TERMS)                                                                 \
    {ERFC_P_##SUFFIX, ERF_Q_##SUFFIX, ZMAX_##SUFFIX, T_SCALE_##SUFFIX, T_SHIFT_##SUFFIX,        \
     (int)(sizeof ERFC_P_##SUFFIX / sizeof(double)), (int)(sizeof ERF_Q_##SUFFIX / sizeof(double)), \
     EXP_TERMS}

/* erf(z) for 0 <= z (used below ERF_SPLIT only; z is clamped so the polynomial never overflows). */
INLINE double erf_small(double z, erf_coeffs k)
{
    double zc = z < ERF_SPLIT ? z : ERF_SPLIT;
    double u = zc * zc * (2.0 / (ERF_SPLIT * ERF_SPLIT)) - 1.0;
    return zc * horner(k.q, k.nq, u);
}

/* erfc(z) = result * *post (see exp3) for 0 <= z, given z^2 = z2hi + z2lo. */
INLINE double erfc_big(double z, double z2hi, double z2lo, erf_coeffs k, double *post)
{
    double zc = z < k.zmax ? z : k.zmax;
    double t = 2.0 / (2.0 + zc);
    double p = horner(k.p, k.np, t * k.t_scale + k.t_shift);
    return t * exp3(-z2hi, p, -z2lo, k.exp_terms, post);
}

#define HUGE_ARG 1e8 /* beyond it every function here has reached its limit in double precision */

INLINE double erf1(double x, erf_coeffs k)
{
    double a = fabs(x);
    a = a < HUGE_ARG ? a : HUGE_ARG;
    double hi, lo, post;
    square_split(a, &hi, &lo);
    double c = erfc_big(a, hi, lo, k, &post) * post;
    double r = a < ERF_SPLIT ? erf_small(a, k) : 1.0 - c;
    r = copysign(r, x);
    return x != x ? x : r;
}

/* mul * Phi(x), Phi the standard normal CDF; also returns exp(-x^2/2) through *gauss when it is not
 * NULL.  The factor goes inside so that x Phi(x) rounds once when it is subnormal. */
INLINE double phi_cdf(double x, erf_coeffs k, double *gauss, double mul)
{
    double a = fabs(x);
    a = a < HUGE_ARG ? a : HUGE_ARG;
    double z = a * 0.70710678118654752440;
    double hi, lo, post;
    square_split(a, &hi, &lo);
    hi *= 0.5; /* exact */
    lo *= 0.5;
    double c = erfc_big(z, hi, lo, k, &post);
    double lower = c * (0.5 * mul) * post;                                                      /* mul Phi(-|x|) */
    double upper = mul * (z < ERF_SPLIT ? 0.5 + 0.5 * erf_small(z, k) : 1.0 - c * 0.5 * post); /* mul Phi(|x|) */
    if (gauss) {
        *gauss = exp3(-hi, 0.0, -lo, k.exp_terms, &post);
        *gauss *= post;
    }
    return x < 0 ? lower : upper;
}

#define INV_SQRT_2PI 0.39894228040143267794

INLINE double gelu1(double x, erf_coeffs k)
{
    double r = phi_cdf(x, k, NULL, x);
    r = x < -HUGE_ARG ? -0.0 : r; /* -inf * 0 */
    return x != x ? x : r;
}

INLINE double gelu_grad1(double x, double g, erf_coeffs k)
{
    double gauss;
    double slope = phi_cdf(x, k, &gauss, 1.0) + x * (gauss * INV_SQRT_2PI);
    slope = fabs(x) > HUGE_ARG ? (x > 0 ? 1.0 : 0.0) : slope; /* +-inf * 0 */
    double r = g * slope;
    return x != x ? x : r;
}

/* sigmoid from e = exp(-|x|) <= 1: no overflow, full relative accuracy for large negative x. */
INLINE double sigmoid_of(double x, double e)
{
    double d = 1.0 / (1.0 + e);
    return x < 0 ? e * d : d;
}

INLINE double exp_neg_abs(double x, int terms)
{
    double a = fabs(x);
    double post;
    double e = exp3(-a, 0.0, 0.0, terms, &post);
    return e * post;
}

INLINE double sigmoid1(double x, int terms)
{
    double r = sigmoid_of(x, exp_neg_abs(x, terms));
    return x != x ? x : r;
}

INLINE double silu1(double x, int terms)
{
    double r = x * sigmoid_of(x, exp_neg_abs(x, terms));
    r = x < -HUGE_ARG ? -0.0 : r; /* -inf * 0 */
    return x != x ? x : r;
}

/* g * s * (1 + x (1 - s)), s = sigmoid(x); 1 - s = sigmoid(-x) is taken from e too, so it keeps its
 * digits for large positive x. */
INLINE double silu_grad1(double x, double g, int terms)
{
    double e = exp_neg_abs(x, terms);
    double d = 1.0 / (1.0 + e);
    double s = x < 0 ? e * d : d;
    double one_minus_s = x < 0 ? d : e * d;
    double slope = s * (1.0 + x * one_minus_s);
    slope = fabs(x) > HUGE_ARG ? (x > 0 ? 1.0 : 0.0) : slope;
    double r = g * slope;
    return x != x ? x : r;
}

/* ---------------------------------------------------------------------------------------------
 * the same functions in single precision, for float32 (the comments above apply; only the
 * constants and the widths differ)
 */

INLINE uint32_t bits_of_f(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
INLINE float float_of(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }

INLINE float horner_f(const float *c, int n, float u)
{
    float p = c[n - 1];
    UNROLL
    for (int k = n - 2; k >= 0; k--)
        p = p * u + c[k];
    return p;
}

#define LOG2E_F 1.44269504f
#define LN2_HI_F 0.693359375f     /* 9 significant bits: n * LN2_HI_F is exact, and so is a - n * LN2_HI_F */
#define LN2_LO_F -2.12194440e-4f
#define ROUND_MAGIC_F 12582912.0f /* 1.5 * 2^23 */
/* Below this argument exp underflows even when multiplied by HUGE_ARG_F (e^-125 * 1e8 < 2^-150): the
 * clamp keeps n >= -181. */
#define EXP_FLOOR_F -125.0f /* and with the +64 of tiny results, 2^n's exponent field stays positive */

/* exp(a + b + c) * (tiny ? 2^64 : 1), as exp3 but with the caller choosing the scaling: a a multiple of
 * 2^-23 or larger (so a - n ln2_hi is exact), b moderate, c tiny, the sum <= about 0 (every caller's
 * argument is, but for P's rounding).  A caller sets `tiny` where the sum may be below -87 (where the
 * result leaves float's normal range), and multiplies by 2^-64 (TINY_POST) last, after any other
 * factors, so the result rounds once into the subnormals; one flag can then serve two exps of
 * neighbouring arguments (gelu's backward).  Degree-7 Taylor polynomial (truncation under 1e-8 on
 * |r| <= ln2/2). */
#define TINY_ARG_F 80.0f
#define TINY_POST 0x1p-64f
INLINE float exp3_f(float a, float b, float c, int32_t tiny)
{
    float s = a + b;
    a = s < EXP_FLOOR_F ? EXP_FLOOR_F : a; /* a NaN s keeps a: the result stays NaN */
    b = s < EXP_FLOOR_F ? 0.0f : b;
    c = s < EXP_FLOOR_F ? 0.0f : c; /* x^2's tail, not tiny when x is (float's split keeps only 12 bits) */
    float k = (a + b) * LOG2E_F + ROUND_MAGIC_F;
    float n = k - ROUND_MAGIC_F;
    int32_t ni = (int32_t)(bits_of_f(k) - bits_of_f(ROUND_MAGIC_F));
    float r = ((a - n * LN2_HI_F) + b) - n * LN2_LO_F + c;
    static const float inv_fact[8] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720,
                                      1.0f / 5040};
    float p = horner_f(inv_fact, 8, r);
    int32_t m = tiny ? ni + 64 : ni;
    return p * float_of((uint32_t)(m + 127) << 23);
}

/* Plain exp and exp2 over float's whole range (the ufuncs `exp` and `exp2`; numpy's float32 exp2 is libm's
 * scalar exp2f, and the FlashMask kernel and softmax spend most of their non-GEMM time there).  Reduction to
 * 2^n * e^r with |r| <= ln2/2 (exp: Cody-Waite, n ln2 in two parts; exp2: f = x - n is exact), e^r by the
 * degree-7 Taylor polynomial (truncation under 1e-8), 2^n applied in two halves so that results in the
 * subnormal range round once and n = 128 overflows to inf.  The clamps keep n in [-151, 129], past both ends
 * of the range; a NaN passes them and the arithmetic keeps it NaN.  Within 2 ulp (tests/test_cpu_kernels.py). */
INLINE float scale_pow2_f(float p, int32_t n)
{
    int32_t half = n >> 1;
    return (p * float_of((uint32_t)(half + 127) << 23)) * float_of((uint32_t)(n - half + 127) << 23);
}

static const float EXP_TAYLOR_F[8] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720,
                                      1.0f / 5040};
/* ln2^k / k!: 2^f = e^(f ln2) */
static const float EXP2_TAYLOR_F[8] = {1.0f, 6.93147182e-01f, 2.40226507e-01f, 5.55041087e-02f, 9.61812911e-03f,
                                       1.33335581e-03f, 1.54035304e-04f, 1.52527338e-05f};

INLINE float exp1_f(float x)
{
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    float k = xc * LOG2E_F + ROUND_MAGIC_F;
    float n = k - ROUND_MAGIC_F;
    int32_t ni = (int32_t)(bits_of_f(k) - bits_of_f(ROUND_MAGIC_F));
    float r = (xc - n * LN2_HI_F) - n * LN2_LO_F;
    return scale_pow2_f(horner_f(EXP_TAYLOR_F, 8, r), ni);
}

INLINE float exp2_1_f(float x)
{
    float xc = x < -151.0f ? -151.0f : x;
    xc = xc > 129.0f ? 129.0f : xc;
    float k = xc + ROUND_MAGIC_F;
    float n = k - ROUND_MAGIC_F;
    int32_t ni = (int32_t)(bits_of_f(k) - bits_of_f(ROUND_MAGIC_F));
    return scale_pow2_f(horner_f(EXP2_TAYLOR_F, 8, xc - n), ni);
}

/* x^2 = hi + lo, hi exact: xh keeps the top 12 bits of x's significand, so xh^2 fits in 24. */
INLINE void square_split_f(float x, float *hi, float *lo)
{
    float xh = float_of(bits_of_f(x) & 0xFFFFF000u);
    float xl = x - xh;
    *hi = xh * xh;
    *lo = (2.0f * xh) * xl + xl * xl;
}

#define ZMAX_F ((float)ZMAX_F32)
#define T_SCALE_F ((float)T_SCALE_F32)
#define T_SHIFT_F ((float)T_SHIFT_F32)
#define ERF_SPLIT_F ((float)ERF_SPLIT)
#define NP_F ((int)(sizeof ERFC_P_F32 / sizeof(float)))
#define NQ_F ((int)(sizeof ERF_Q_F32 / sizeof(float)))
#define HUGE_ARG_F 1e8f

INLINE float erf_small_f(float z)
{
    float zc = z < ERF_SPLIT_F ? z : ERF_SPLIT_F;
    float u = zc * zc * (2.0f / (ERF_SPLIT_F * ERF_SPLIT_F)) - 1.0f;
    return zc * horner_f(ERF_Q_F32, NQ_F, u);
}

/* erfc(z) for 0 <= z, given z^2 = z2hi + z2lo; scaled by 2^64 where `tiny` (see exp3_f). */
INLINE float erfc_big_f(float z, float z2hi, float z2lo, int32_t tiny)
{
    float zc = z < ZMAX_F ? z : ZMAX_F;
    float t = 2.0f / (2.0f + zc);
    float p = horner_f(ERFC_P_F32, NP_F, t * T_SCALE_F + T_SHIFT_F);
    return t * exp3_f(-z2hi, p, -z2lo, tiny);
}

INLINE float erf1_f(float x)
{
    float a = fabsf(x);
    a = a < HUGE_ARG_F ? a : HUGE_ARG_F;
    float hi, lo;
    square_split_f(a, &hi, &lo);
    int32_t tiny = hi > TINY_ARG_F;
    float c = erfc_big_f(a, hi, lo, tiny) * (tiny ? TINY_POST : 1.0f);
    float r = a < ERF_SPLIT_F ? erf_small_f(a) : 1.0f - c;
    r = copysignf(r, x);
    return x != x ? x : r;
}

/* Below it Phi(-|x|) = 1/2 - erf(z)/2 loses under a bit to cancellation, less than the erfc form's
 * rounding near z = 0 (where t's and P's roundings are of the order of the result's ulp). */
#define LOWER_SPLIT_F 0.5f

/* mul * Phi(x) (lower: x < 0; upper: x >= 0), and exp(-x^2/2) through *gauss when not NULL, both scaled
 * by 2^64 where *tiny (x^2/2 > TINY_ARG_F) on the lower side (the upper side is never tiny). */
INLINE float phi_cdf_f(float x, float *gauss, float mul, int32_t *tiny)
{
    float a = fabsf(x);
    a = a < HUGE_ARG_F ? a : HUGE_ARG_F;
    float z = a * 0.70710678118654752440f;
    float hi, lo;
    square_split_f(a, &hi, &lo);
    hi *= 0.5f; /* exact */
    lo *= 0.5f;
    *tiny = hi > TINY_ARG_F;
    float post = *tiny ? TINY_POST : 1.0f;
    float c = erfc_big_f(z, hi, lo, *tiny);
    float half_erf = 0.5f * erf_small_f(z);
    float lower = z < LOWER_SPLIT_F ? mul * (0.5f - half_erf) : c * (0.5f * mul);
    float upper = mul * (z < ERF_SPLIT_F ? 0.5f + half_erf : 1.0f - c * 0.5f * post);
    if (gauss)
        *gauss = exp3_f(-hi, 0.0f, -lo, *tiny);
    return x < 0 ? lower : upper;
}

INLINE float gelu1_f(float x)
{
    int32_t tiny;
    float r = phi_cdf_f(x, NULL, x, &tiny);
    r = x < 0 && tiny ? r * TINY_POST : r;
    r = x < -HUGE_ARG_F ? -0.0f : r;
    return x != x ? x : r;
}

INLINE float gelu_grad1_f(float x, float g)
{
    float gauss;
    int32_t tiny;
    float phi = phi_cdf_f(x, &gauss, 1.0f, &tiny);
    float post = tiny ? TINY_POST : 1.0f;
    /* on the lower side Phi and the gauss term carry the same scale, removed after g's factor */
    float slope = phi + x * (gauss * (float)INV_SQRT_2PI) * (x < 0 ? 1.0f : post);
    slope = fabsf(x) > HUGE_ARG_F ? (x > 0 ? 1.0f : 0.0f) : slope;
    float r = g * slope * (x < 0 ? post : 1.0f);
    return x != x ? x : r;
}

/* exp(-|x|), scaled by 2^64 where *tiny */
INLINE float exp_neg_abs_f(float x, int32_t *tiny)
{
    float a = fabsf(x);
    *tiny = a > TINY_ARG_F;
    return exp3_f(-a, 0.0f, 0.0f, *tiny);
}

INLINE float sigmoid1_f(float x)
{
    int32_t tiny;
    float e = exp_neg_abs_f(x, &tiny);
    float post = tiny ? TINY_POST : 1.0f;
    float d = 1.0f / (1.0f + e * post);
    float r = x < 0 ? e * d * post : d;
    return x != x ? x : r;
}

INLINE float silu1_f(float x)
{
    int32_t tiny;
    float e = exp_neg_abs_f(x, &tiny);
    float post = tiny ? TINY_POST : 1.0f;
    float d = 1.0f / (1.0f + e * post);
    float r = x < 0 ? x * e * d * post : x * d;
    r = x < -HUGE_ARG_F ? -0.0f : r;
    return x != x ? x : r;
}

/* as silu_grad1; on the lower side the slope is s (1 + x d) with s = e d carrying e's scale */
INLINE float silu_grad1_f(float x, float g)
{
    int32_t tiny;
    float e = exp_neg_abs_f(x, &tiny);
    float post = tiny ? TINY_POST : 1.0f;
    float ep = e * post;
    float d = 1.0f / (1.0f + ep);
    float lower = e * d * (1.0f + x * d);         /* scaled */
    float upper = d * (1.0f + x * (ep * d));
    lower = x < -HUGE_ARG_F ? 0.0f : lower;
    upper = x > HUGE_ARG_F ? 1.0f : upper;
    float r = x < 0 ? g * lower * post : g * upper;
    return x != x ? x : r;
}

/* ---------------------------------------------------------------------------------------------
 * block kernels: n <= BLOCK doubles in, n doubles out (the vectorised loops)
 */

static const erf_coeffs K64 = COEFFS(F64, 13);

/* Each vector of the loop runs a long dependent chain (the series, then exp), so WAYS independent
 * streams (i, i + n/WAYS, ...) are interleaved in one iteration to keep the FP units busy. */
#define WAYS 2
#define UNARY_BLOCK(NAME, T, EXPR)                                                  \
    CLONES static void NAME(const T *RESTRICT xs, T *RESTRICT out, npy_intp n)      \
    {                                                                               \
        npy_intp h = n / WAYS;                                                      \
        for (npy_intp i = 0; i < h; i++) {                                          \
            T x = xs[i];                                                            \
            out[i] = EXPR;                                                          \
            x = xs[i + h];                                                          \
            out[i + h] = EXPR;                                                      \
        }                                                                           \
        for (npy_intp i = WAYS * h; i < n; i++) {                                   \
            T x = xs[i];                                                            \
            out[i] = EXPR;                                                          \
        }                                                                           \
    }
#define BINARY_BLOCK(NAME, T, EXPR)                                                                  \
    CLONES static void NAME(const T *RESTRICT xs, const T *RESTRICT gs, T *RESTRICT out, npy_intp n) \
    {                                                                                                \
        npy_intp h = n / WAYS;                                                                       \
        for (npy_intp i = 0; i < h; i++) {                                                           \
            T x = xs[i], g = gs[i];                                                                  \
            out[i] = EXPR;                                                                           \
            x = xs[i + h], g = gs[i + h];                                                            \
            out[i + h] = EXPR;                                                                       \
        }                                                                                            \
        for (npy_intp i = WAYS * h; i < n; i++) {                                                    \
            T x = xs[i], g = gs[i];                                                                  \
            out[i] = EXPR;                                                                           \
        }                                                                                            \
    }

UNARY_BLOCK(erf_block64, double, erf1(x, K64))
UNARY_BLOCK(erf_block32, float, erf1_f(x))
UNARY_BLOCK(gelu_block64, double, gelu1(x, K64))
UNARY_BLOCK(gelu_block32, float, gelu1_f(x))
BINARY_BLOCK(gelu_grad_block64, double, gelu_grad1(x, g, K64))
BINARY_BLOCK(gelu_grad_block32, float, gelu_grad1_f(x, g))
UNARY_BLOCK(sigmoid_block64, double, sigmoid1(x, 13))
UNARY_BLOCK(sigmoid_block32, float, sigmoid1_f(x))
UNARY_BLOCK(silu_block64, double, silu1(x, 13))
UNARY_BLOCK(silu_block32, float, silu1_f(x))
UNARY_BLOCK(exp_block64, double, exp(x))
UNARY_BLOCK(exp_block32, float, exp1_f(x))
UNARY_BLOCK(exp2_block64, double, exp2(x))
UNARY_BLOCK(exp2_block32, float, exp2_1_f(x))
BINARY_BLOCK(silu_grad_block64, double, silu_grad1(x, g, 13))
BINARY_BLOCK(silu_grad_block32, float, silu_grad1_f(x, g))

/* ---------------------------------------------------------------------------------------------
 * ufunc loops: contiguous operands go to the block kernel whole, split over the pool's threads when
 * large (_pool_api.h; an in-place call, out == x, is safe either way: each output element depends on
 * its own inputs only); others are gathered a block at a time into a buffer, computed, and scattered
 */

#define SPLIT_ALIGN 64   /* pieces start on a cache line */

typedef struct {
    const char *x, *g;
    char *out;
} operands;

#define GATHER(T, dst, src, step, m)                                  \
    do {                                                              \
        for (int j_ = 0; j_ < (m); j_++)                              \
            (dst)[j_] = *(const T *)((src) + j_ * (step));            \
    } while (0)
#define SCATTER(T, dst, src, step, m)                                 \
    do {                                                              \
        for (int j_ = 0; j_ < (m); j_++)                              \
            *(T *)((dst) + j_ * (step)) = (src)[j_];                  \
    } while (0)

#define UNARY_LOOP(NAME, T, BLOCKFN)                                                                 \
    static void NAME##_range(void *ctx, Py_ssize_t b, Py_ssize_t e)                                  \
    {                                                                                                \
        const operands *o = (const operands *)ctx;                                                   \
        BLOCKFN((const T *)o->x + b, (T *)o->out + b, e - b);                                        \
        feclearexcept(FE_ALL_EXCEPT);                                                                \
    }                                                                                                \
    static void NAME(char **args, npy_intp const *dims, npy_intp const *steps, void *data)        \
    {                                                                                                \
        char *in = args[0], *out = args[1];                                                          \
        (void)data;                                                                                  \
        if (steps[0] == sizeof(T) && steps[1] == sizeof(T)) {                                        \
            operands o = {in, NULL, out};                                                            \
            split_range(dims[0], SPLIT_GRAIN, SPLIT_ALIGN, NAME##_range, &o);                          \
        } else {                                                                                     \
            T xb[BLOCK], ob[BLOCK];                                                                  \
            for (npy_intp i = 0; i < dims[0]; i += BLOCK) {                                          \
                int m = (int)(dims[0] - i < BLOCK ? dims[0] - i : BLOCK);                            \
                GATHER(T, xb, in + i * steps[0], steps[0], m);                                       \
                BLOCKFN(xb, ob, m);                                                                  \
                SCATTER(T, out + i * steps[1], ob, steps[1], m);                                     \
            }                                                                                        \
        }                                                                                            \
        feclearexcept(FE_ALL_EXCEPT);                                                                \
    }
#define BINARY_LOOP(NAME, T, BLOCKFN)                                                                \
    static void NAME##_range(void *ctx, Py_ssize_t b, Py_ssize_t e)                                  \
    {                                                                                                \
        const operands *o = (const operands *)ctx;                                                   \
        BLOCKFN((const T *)o->x + b, (const T *)o->g + b, (T *)o->out + b, e - b);                   \
        feclearexcept(FE_ALL_EXCEPT);                                                                \
    }                                                                                                \
    static void NAME(char **args, npy_intp const *dims, npy_intp const *steps, void *data)        \
    {                                                                                                \
        (void)data;                                                                                  \
        if (steps[0] == sizeof(T) && steps[1] == sizeof(T) && steps[2] == sizeof(T)) {               \
            operands o = {args[0], args[1], args[2]};                                                \
            split_range(dims[0], SPLIT_GRAIN, SPLIT_ALIGN, NAME##_range, &o);                          \
        } else {                                                                                     \
            T xb[BLOCK], gb[BLOCK], ob[BLOCK];                                                       \
            for (npy_intp i = 0; i < dims[0]; i += BLOCK) {                                          \
                int m = (int)(dims[0] - i < BLOCK ? dims[0] - i : BLOCK);                            \
                GATHER(T, xb, args[0] + i * steps[0], steps[0], m);                                  \
                GATHER(T, gb, args[1] + i * steps[1], steps[1], m);                                  \
                BLOCKFN(xb, gb, ob, m);                                                              \
                SCATTER(T, args[2] + i * steps[2], ob, steps[2], m);                                 \
            }                                                                                        \
        }                                                                                            \
        feclearexcept(FE_ALL_EXCEPT);                                                                \
    }

UNARY_LOOP(erf_f, float, erf_block32)
UNARY_LOOP(erf_d, double, erf_block64)
UNARY_LOOP(gelu_f, float, gelu_block32)
UNARY_LOOP(gelu_d, double, gelu_block64)
BINARY_LOOP(gelu_grad_f, float, gelu_grad_block32)
BINARY_LOOP(gelu_grad_d, double, gelu_grad_block64)
UNARY_LOOP(sigmoid_f, float, sigmoid_block32)
UNARY_LOOP(sigmoid_d, double, sigmoid_block64)
UNARY_LOOP(silu_f, float, silu_block32)
UNARY_LOOP(silu_d, double, silu_block64)
BINARY_LOOP(silu_grad_f, float, silu_grad_block32)
BINARY_LOOP(silu_grad_d, double, silu_grad_block64)
UNARY_LOOP(exp_f, float, exp_block32)
UNARY_LOOP(exp_d, double, exp_block64)
UNARY_LOOP(exp2_f, float, exp2_block32)
UNARY_LOOP(exp2_d, double, exp2_block64)

/* ---------------------------------------------------------------------------------------------
 * exp2_rows(x, bias, sums): the online-softmax step of attention kernels (oarlock-flashmask) in one pass over
 * each row: x <- 2^(x - bias[row]) in place, and sums[row] <- the row's sum of the results.  numpy needs three
 * passes (subtract, exp2, sum; or a matmul against a column of ones, which gives the values-by-weights product
 * an odd width that OpenBLAS runs slower).  The exponentials are exp2_1_f's (the `exp2` ufunc's, so the same
 * bits as exp2(x - bias)); the sum is float32 over 16 lanes, then the lanes in order. */
#define ROW_LANES 16

/* The lanes of a row's partial sums added in order. */
INLINE float sum_lanes_f(const float *part)
{
    float s = 0.0f;
    for (int l = 0; l < ROW_LANES; l++)
        s += part[l];
    return s;
}

CLONES static float exp2_row_f(float *RESTRICT x, float b, npy_intp n)
{
    float part[ROW_LANES] = {0.0f};
    npy_intp i = 0;
    for (; i + ROW_LANES <= n; i += ROW_LANES)
        for (int l = 0; l < ROW_LANES; l++) {
            float y = exp2_1_f(x[i + l] - b);
            x[i + l] = y;
            part[l] += y;
        }
    for (int l = 0; i < n; i++, l++) {
        float y = exp2_1_f(x[i] - b);
        x[i] = y;
        part[l] += y;
    }
    return sum_lanes_f(part);
}

/* A float32 [A, R, 1] column (bias or sums) with any strides on its first two axes; NULL for None. */
static int column_of(PyObject *obj, const char *name, npy_intp a, npy_intp r, int writeable, char **data,
                     npy_intp *s0, npy_intp *s1)
{
    *data = NULL;
    if (obj == Py_None)
        return 0;
    PyArrayObject *c = (PyArrayObject *)obj;
    if (!PyArray_Check(obj) || PyArray_TYPE(c) != NPY_FLOAT || PyArray_NDIM(c) != 3 || PyArray_DIM(c, 0) != a ||
        PyArray_DIM(c, 1) != r || PyArray_DIM(c, 2) != 1 || (writeable && !PyArray_ISWRITEABLE(c))) {
        PyErr_Format(PyExc_TypeError, "exp2_rows(): argument '%s' must be None or a%s float32 array of shape "
                     "[%zd, %zd, 1]", name, writeable ? " writeable" : "", (Py_ssize_t)a, (Py_ssize_t)r);
        return -1;
    }
    *data = PyArray_DATA(c);
    *s0 = PyArray_STRIDE(c, 0);
    *s1 = PyArray_STRIDE(c, 1);
    return 0;
}

static PyObject *py_exp2_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *bo, *so;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &bo, &so))
        return NULL;
    PyArrayObject *x = (PyArrayObject *)xo;
    if (!PyArray_Check(xo) || PyArray_TYPE(x) != NPY_FLOAT || PyArray_NDIM(x) != 3 ||
        PyArray_STRIDE(x, 2) != (npy_intp)sizeof(float) || !PyArray_ISWRITEABLE(x)) {
        PyErr_SetString(PyExc_TypeError, "exp2_rows(): argument 'x' must be a writeable 3-D float32 array whose "
                        "rows are contiguous (last stride 4)");
        return NULL;
    }
    npy_intp a = PyArray_DIM(x, 0), r = PyArray_DIM(x, 1), n = PyArray_DIM(x, 2);
    npy_intp x0 = PyArray_STRIDE(x, 0), x1 = PyArray_STRIDE(x, 1), b0 = 0, b1 = 0, t0 = 0, t1 = 0;
    char *xd = PyArray_DATA(x), *bd, *sd;
    if (column_of(bo, "bias", a, r, 0, &bd, &b0, &b1) < 0 || column_of(so, "sums", a, r, 1, &sd, &t0, &t1) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < a; i++)
        for (npy_intp j = 0; j < r; j++) {
            float b = bd ? *(const float *)(bd + i * b0 + j * b1) : 0.0f;
            float s = exp2_row_f((float *)(xd + i * x0 + j * x1), b, n);
            if (sd)
                *(float *)(sd + i * t0 + j * t1) = s;
        }
    feclearexcept(FE_ALL_EXCEPT);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * softmax_rows(x, out) / softmax_grad_rows(y, g, out): softmax over the last axis of 2-D float32 C-contiguous
 * arrays and its backward y (g - sum(g y)), a row at a time from cache: numpy needs five passes (max, subtract,
 * exp, sum, divide) and three for the backward.  The formulas and their order are the generic kernels'
 * (oarlock_ops.softmax): e = exp(x - max), y = e / sum(e); the exponentials are exp1_f's (the `exp` ufunc's); the
 * sums are float32 over 16 lanes (the generic kernel sums with einsum, so the last bit may differ).  A NaN
 * anywhere in a row makes the row NaN, as numpy's max does.  Rows are split over the pool (_pool_api.h).
 */

/* The largest element of a row (NaN ignored here: a NaN row turns NaN through the exponentials), over 16 lanes. */
INLINE float row_max_f(const float *RESTRICT x, npy_intp n)
{
    float top[ROW_LANES];
    for (int l = 0; l < ROW_LANES; l++)
        top[l] = -INFINITY;
    npy_intp i = 0;
    for (; i + ROW_LANES <= n; i += ROW_LANES)
        for (int l = 0; l < ROW_LANES; l++)
            top[l] = x[i + l] > top[l] ? x[i + l] : top[l];
    for (int l = 0; i < n; i++, l++)
        top[l] = x[i] > top[l] ? x[i] : top[l];
    float m = top[0];
    for (int l = 1; l < ROW_LANES; l++)
        m = top[l] > m ? top[l] : m;
    return m;
}

CLONES static void softmax_row_f(const float *RESTRICT x, float *RESTRICT y, npy_intp n)
{
    float m = row_max_f(x, n), part[ROW_LANES] = {0.0f};
    npy_intp i;
    for (i = 0; i + ROW_LANES <= n; i += ROW_LANES)
        for (int l = 0; l < ROW_LANES; l++) {
            float e = exp1_f(x[i + l] - m);
            y[i + l] = e;
            part[l] += e;
        }
    for (int l = 0; i < n; i++, l++) {
        float e = exp1_f(x[i] - m);
        y[i] = e;
        part[l] += e;
    }
    float total = sum_lanes_f(part);
    for (i = 0; i < n; i++)
        y[i] = y[i] / total;
}

CLONES static void softmax_grad_row_f(const float *RESTRICT y, const float *RESTRICT g, float *RESTRICT out,
                                      npy_intp n)
{
    float part[ROW_LANES] = {0.0f};
    npy_intp i = 0;
    for (; i + ROW_LANES <= n; i += ROW_LANES)
        for (int l = 0; l < ROW_LANES; l++)
            part[l] += g[i + l] * y[i + l];
    for (int l = 0; i < n; i++, l++)
        part[l] += g[i] * y[i];
    float total = sum_lanes_f(part);
    for (i = 0; i < n; i++)
        out[i] = (g[i] - total) * y[i];
}

/* log(sum(exp(x))) of a row: max, then the sum of exp(x - max) (no store), then max + log(sum): the generic
 * cross-entropy's lse = log(row_sums(exp(x - max))) + max, in two reads of the row instead of four passes. */
CLONES static float logsumexp_row_f(const float *RESTRICT x, npy_intp n)
{
    float m = row_max_f(x, n), part[ROW_LANES] = {0.0f};
    npy_intp i;
    for (i = 0; i + ROW_LANES <= n; i += ROW_LANES)
        for (int l = 0; l < ROW_LANES; l++)
            part[l] += exp1_f(x[i + l] - m);
    for (int l = 0; i < n; i++, l++)
        part[l] += exp1_f(x[i] - m);
    float total = sum_lanes_f(part);
    return logf(total) + m;
}

typedef struct {
    const float *y, *g;
    float *out;
    npy_intp n;
} softmax_job;

static void softmax_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const softmax_job *j = ctx;
    for (Py_ssize_t r = b; r < e; r++)
        softmax_row_f(j->y + r * j->n, j->out + r * j->n, j->n);
    feclearexcept(FE_ALL_EXCEPT);
}

static void softmax_grad_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const softmax_job *j = ctx;
    for (Py_ssize_t r = b; r < e; r++)
        softmax_grad_row_f(j->y + r * j->n, j->g + r * j->n, j->out + r * j->n, j->n);
    feclearexcept(FE_ALL_EXCEPT);
}

/* A 2-D float32 C-contiguous array of `rows` x `n` (rows, n taken from the first one checked when *rows < 0). */
static const float *rows_of(PyObject *obj, const char *fn, const char *name, npy_intp *rows, npy_intp *n,
                            int writeable)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    if (!PyArray_Check(obj) || PyArray_TYPE(a) != NPY_FLOAT || PyArray_NDIM(a) != 2 || !PyArray_IS_C_CONTIGUOUS(a) ||
        (writeable && !PyArray_ISWRITEABLE(a)) ||
        (*rows >= 0 && (PyArray_DIM(a, 0) != *rows || PyArray_DIM(a, 1) != *n))) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a%s 2-D C-contiguous float32 array%s", fn, name,
                     writeable ? " writeable" : "", *rows >= 0 ? " of the first argument's shape" : "");
        return NULL;
    }
    *rows = PyArray_DIM(a, 0);
    *n = PyArray_DIM(a, 1);
    return (const float *)PyArray_DATA(a);
}

static PyObject *py_softmax_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *oo;
    npy_intp rows = -1, n = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &xo, &oo))
        return NULL;
    const float *x = rows_of(xo, "softmax_rows", "x", &rows, &n, 0);
    float *out = x ? (float *)rows_of(oo, "softmax_rows", "out", &rows, &n, 1) : NULL;
    if (out == NULL)
        return NULL;
    softmax_job j = {x, NULL, out, n};
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, softmax_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static void logsumexp_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const softmax_job *j = ctx;
    for (Py_ssize_t r = b; r < e; r++)
        j->out[r] = logsumexp_row_f(j->y + r * j->n, j->n);
    feclearexcept(FE_ALL_EXCEPT);
}

static PyObject *py_logsumexp_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *oo;
    npy_intp rows = -1, n = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &xo, &oo))
        return NULL;
    const float *x = rows_of(xo, "logsumexp_rows", "x", &rows, &n, 0);
    if (x == NULL)
        return NULL;
    PyArrayObject *o = (PyArrayObject *)oo;
    if (!PyArray_Check(oo) || PyArray_TYPE(o) != NPY_FLOAT || PyArray_NDIM(o) != 1 || PyArray_DIM(o, 0) != rows ||
        !PyArray_IS_C_CONTIGUOUS(o) || !PyArray_ISWRITEABLE(o)) {
        PyErr_Format(PyExc_TypeError, "logsumexp_rows(): argument 'out' must be a writeable float32 array of shape "
                     "[%zd]", (Py_ssize_t)rows);
        return NULL;
    }
    softmax_job j = {x, NULL, (float *)PyArray_DATA(o), n};
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, logsumexp_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_softmax_grad_rows(PyObject *self, PyObject *args)
{
    PyObject *yo, *go, *oo;
    npy_intp rows = -1, n = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO", &yo, &go, &oo))
        return NULL;
    const float *y = rows_of(yo, "softmax_grad_rows", "y", &rows, &n, 0);
    const float *g = y ? rows_of(go, "softmax_grad_rows", "g", &rows, &n, 0) : NULL;
    float *out = g ? (float *)rows_of(oo, "softmax_grad_rows", "out", &rows, &n, 1) : NULL;
    if (out == NULL)
        return NULL;
    softmax_job j = {y, g, out, n};
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, softmax_grad_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * xent_rows(x, label, ignore_index, loss) / xent_grad_rows(x, label, ignore_index, coef, mean, out): softmax
 * cross-entropy with class-index labels over the rows of 2-D float32 C-contiguous logits, each a single call
 * (the ops plugin's generic kernels take some ten numpy calls for the forward and seven for the backward; in a
 * small model's step that per-call cost is the op's time).  The formulas are the generic kernels'
 * (oarlock_ops.softmax): loss_r = lse(x_r) - x_r[label_r] with logsumexp_row_f, 0 on rows whose label is
 * ignore_index, summed in row order in float64; the backward (softmax(x_r) - onehot(label_r)) * coef_r with
 * softmax_row_f, 0 on ignored rows.
 * Labels are int64 or int32, one per row; one outside [0, classes) that is not ignore_index is reported back
 * (the caller raises), nothing is computed then.  Rows are split over the pool.
 */

/* labels as int64 values: a 1-D C-contiguous int64 or int32 array of `rows` entries, or NULL (no error set) */
typedef struct {
    const char *data;
    int wide;   /* int64 (else int32) */
} label_view;

static int label_view_of(PyObject *obj, npy_intp rows, label_view *v)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    if (!PyArray_Check(obj) || PyArray_NDIM(a) != 1 || PyArray_DIM(a, 0) != rows || !PyArray_IS_C_CONTIGUOUS(a) ||
        !PyArray_ISNOTSWAPPED(a) || (PyArray_TYPE(a) != NPY_INT64 && PyArray_TYPE(a) != NPY_INT32))
        return 0;
    v->data = PyArray_BYTES(a);
    v->wide = PyArray_TYPE(a) == NPY_INT64;
    return 1;
}

INLINE long long label_at(const label_view *v, npy_intp r)
{
    return v->wide ? ((const int64_t *)v->data)[r] : ((const int32_t *)v->data)[r];
}

typedef struct {
    const float *x;
    label_view label;
    long long ignore;
    npy_intp n;
    float *loss;         /* forward: [rows] */
    const float *coef;   /* backward: [rows], or NULL for `scale` on every row */
    float scale, *out;   /* backward: out [rows, n] */
} xent_job;

static void xent_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const xent_job *j = ctx;
    for (Py_ssize_t r = b; r < e; r++) {
        long long c = label_at(&j->label, r);
        const float *row = j->x + r * j->n;
        j->loss[r] = c == j->ignore ? 0.0f : logsumexp_row_f(row, j->n) - row[c];
    }
    feclearexcept(FE_ALL_EXCEPT);
}

static void xent_grad_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const xent_job *j = ctx;
    for (Py_ssize_t r = b; r < e; r++) {
        long long c = label_at(&j->label, r);
        float *out = j->out + r * j->n;
        if (c == j->ignore) {
            memset(out, 0, (size_t)j->n * sizeof(float));
            continue;
        }
        softmax_row_f(j->x + r * j->n, out, j->n);
        out[c] -= 1.0f;
        float k = j->coef ? j->coef[r] : j->scale;
        for (npy_intp i = 0; i < j->n; i++)
            out[i] *= k;
    }
    feclearexcept(FE_ALL_EXCEPT);
}

/* The logits (2-D C-contiguous float32: their rows and classes) and their labels, or NULL (no error set) for
 * arguments not handled here */
static const float *xent_inputs(PyObject *xo, PyObject *lo, npy_intp *rows, npy_intp *n, label_view *labels)
{
    PyArrayObject *x = (PyArrayObject *)xo;
    if (!PyArray_Check(xo) || PyArray_TYPE(x) != NPY_FLOAT || PyArray_NDIM(x) != 2 || !PyArray_IS_C_CONTIGUOUS(x))
        return NULL;
    *rows = PyArray_DIM(x, 0);
    *n = PyArray_DIM(x, 1);
    return label_view_of(lo, *rows, labels) ? (const float *)PyArray_DATA(x) : NULL;
}

/* Checks the labels of rows [0, rows): the count of rows not ignored, or -1 with *bad the first label out of range */
static npy_intp xent_check_labels(const label_view *v, npy_intp rows, npy_intp classes, long long ignore,
                                  long long *bad)
{
    npy_intp valid = 0;
    for (npy_intp r = 0; r < rows; r++) {
        long long c = label_at(v, r);
        if (c == ignore)
            continue;
        if (c < 0 || c >= classes) {
            *bad = c;
            return -1;
        }
        valid++;
    }
    return valid;
}

/* xent_rows(x, label, ignore_index, loss) -> (sum of the row losses, rows not ignored, None) or (None, None, the
 * first bad label); None when x or label is not one handled here. loss: a writeable float32 [rows] array. */
static PyObject *py_xent_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *lo, *oo;
    long long ignore;
    npy_intp rows = -1, n = 0;
    label_view labels;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLO", &xo, &lo, &ignore, &oo))
        return NULL;
    PyArrayObject *o = (PyArrayObject *)oo;
    const float *x = xent_inputs(xo, lo, &rows, &n, &labels);
    if (x == NULL)
        Py_RETURN_NONE;
    if (!PyArray_Check(oo) || PyArray_TYPE(o) != NPY_FLOAT || PyArray_NDIM(o) != 1 || PyArray_DIM(o, 0) != rows ||
        !PyArray_IS_C_CONTIGUOUS(o) || !PyArray_ISWRITEABLE(o)) {
        PyErr_Format(PyExc_TypeError, "xent_rows(): argument 'loss' must be a writeable float32 array of shape [%zd]",
                     (Py_ssize_t)rows);
        return NULL;
    }
    long long bad = 0;
    npy_intp valid = xent_check_labels(&labels, rows, n, ignore, &bad);
    if (valid < 0)
        return Py_BuildValue("(OOL)", Py_None, Py_None, bad);
    xent_job j = {.x = x, .label = labels, .ignore = ignore, .n = n, .loss = (float *)PyArray_DATA(o)};
    double total = 0.0;
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, xent_range, &j);
    for (npy_intp r = 0; r < rows; r++)   /* in row order: the same sum on any thread count */
        total += j.loss[r];
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(dnO)", total, (Py_ssize_t)valid, Py_None);
}

/* xent_grad_rows(x, label, ignore_index, coef, mean, out): out [rows, n] <- the backward above; coef a Python float
 * (every row's factor; with `mean` divided first, in float32, by Paddle's 'mean' divisor: the rows if ignore_index
 * is negative, else the rows not ignored, at least 1) or a float32 [rows] array (reduction 'none'); returns True, or
 * None when the arguments are not ones handled here (a bad label included: the forward would have refused it). */
static PyObject *py_xent_grad_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *lo, *co, *oo;
    long long ignore;
    int mean;
    npy_intp rows = -1, n = 0;
    label_view labels;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLOpO", &xo, &lo, &ignore, &co, &mean, &oo))
        return NULL;
    const float *x = xent_inputs(xo, lo, &rows, &n, &labels);
    if (x == NULL)
        Py_RETURN_NONE;
    float *out = (float *)rows_of(oo, "xent_grad_rows", "out", &rows, &n, 1);
    if (out == NULL)
        return NULL;
    xent_job j = {.x = x, .label = labels, .ignore = ignore, .n = n, .out = out};
    long long bad = 0;
    npy_intp valid = xent_check_labels(&labels, rows, n, ignore, &bad);
    if (valid < 0)
        Py_RETURN_NONE;
    if (PyFloat_Check(co)) {
        j.scale = (float)PyFloat_AS_DOUBLE(co);
        if (mean)
            j.scale = j.scale / (float)(ignore < 0 ? rows : (valid > 0 ? valid : 1));
    } else {
        PyArrayObject *c = (PyArrayObject *)co;
        if (mean || !PyArray_Check(co) || PyArray_TYPE(c) != NPY_FLOAT || PyArray_NDIM(c) != 1 ||
            PyArray_DIM(c, 0) != rows || !PyArray_IS_C_CONTIGUOUS(c))
            Py_RETURN_NONE;
        j.coef = (const float *)PyArray_DATA(c);
    }
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, xent_grad_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_TRUE;
}

static PyMethodDef METHODS[] = {
    SET_THREADS_METHOD,
    {"softmax_rows", py_softmax_rows, METH_VARARGS,
     "softmax_rows(x, out): out <- softmax of each row of 2-D C-contiguous float32 x (out must not overlap x)."},
    {"softmax_grad_rows", py_softmax_grad_rows, METH_VARARGS,
     "softmax_grad_rows(y, g, out): out <- y (g - sum(g y)) per row, 2-D C-contiguous float32 arrays of one shape."},
    {"logsumexp_rows", py_logsumexp_rows, METH_VARARGS,
     "logsumexp_rows(x, out): out [rows] <- log(sum(exp(row))) of each row of 2-D C-contiguous float32 x."},
    {"xent_rows", py_xent_rows, METH_VARARGS,
     "xent_rows(x, label, ignore_index, loss) -> (total, valid, None), (None, None, bad label) or None: hard-label "
     "cross-entropy of each row of 2-D C-contiguous float32 x into loss [rows]; see _kernels.c."},
    {"xent_grad_rows", py_xent_grad_rows, METH_VARARGS,
     "xent_grad_rows(x, label, ignore_index, coef, mean, out) -> True or None: out <- (softmax(x) - onehot(label)) * "
     "coef per row (mean: coef / Paddle's divisor), 0 on ignored rows; see _kernels.c."},
    {"exp2_rows", py_exp2_rows, METH_VARARGS,
     "exp2_rows(x, bias, sums): x [A, R, N] float32 (rows contiguous) <- 2^(x - bias) in place, bias and sums "
     "[A, R, 1] float32 or None; sums <- each row's sum of the results."},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------------------------------------
 * module
 */

typedef struct {
    const char *name, *doc;
    PyUFuncGenericFunction loops[2];
    int nin;
} ufunc_spec;

static const ufunc_spec UFUNCS[] = {
    {"erf", "erf(x): the error function.", {erf_f, erf_d}, 1},
    {"gelu", "gelu(x): x Phi(x), the exact GELU.", {gelu_f, gelu_d}, 1},
    {"gelu_grad", "gelu_grad(x, g): g * (Phi(x) + x phi(x)), the exact GELU's backward.",
     {gelu_grad_f, gelu_grad_d}, 2},
    {"sigmoid", "sigmoid(x): 1 / (1 + exp(-x)).", {sigmoid_f, sigmoid_d}, 1},
    {"silu", "silu(x): x sigmoid(x).", {silu_f, silu_d}, 1},
    {"silu_grad", "silu_grad(x, g): g * s (1 + x (1 - s)), s = sigmoid(x): SiLU's backward.",
     {silu_grad_f, silu_grad_d}, 2},
    {"exp", "exp(x): e^x (float32 vectorised here, float64 by libm).", {exp_f, exp_d}, 1},
    {"exp2", "exp2(x): 2^x (float32 vectorised here, float64 by libm).", {exp2_f, exp2_d}, 1},
};

static char TYPES1[] = {NPY_FLOAT, NPY_FLOAT, NPY_DOUBLE, NPY_DOUBLE};
static char TYPES2[] = {NPY_FLOAT, NPY_FLOAT, NPY_FLOAT, NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};
static void *NO_DATA[] = {NULL, NULL};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "One-pass float32/float64 ufuncs: erf, gelu, gelu_grad, sigmoid, silu, silu_grad, exp, exp2, and exp2_rows "
    "(see _kernels.c).",
    -1, METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    import_array();
    import_umath();
    for (size_t i = 0; i < sizeof UFUNCS / sizeof UFUNCS[0]; i++) {
        const ufunc_spec *s = &UFUNCS[i];
        PyObject *f = PyUFunc_FromFuncAndData((PyUFuncGenericFunction *)s->loops, NO_DATA,
                                              s->nin == 1 ? TYPES1 : TYPES2, 2, s->nin, 1, PyUFunc_None,
                                              s->name, s->doc, 0);
        if (f == NULL || PyModule_AddObject(m, s->name, f) < 0) {
            Py_XDECREF(f);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
