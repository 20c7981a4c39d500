/*
 * The FlashMask forward for the masks without vectors (plain causal, or no mask), float32, in C (part of
 * oarlock_cpu._gemm: MKL's sgemm through the pointers _gemm.c resolved, the units on _pool.c's worker pool):
 *
 *   flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads) -> True | None
 *
 * The operands are oarlock-flashmask's working layouts (kernel.py), per flattened (batch, key head) f:
 *   q    [F, Sq * G, D]  C-ordered, row s * G + g = query head h * G + g at position s, pre-multiplied by
 *                        scale * log2(e) (scores in base 2)
 *   kt   [F, D, Sk]      K^T, last stride 1 (its rows may be padded: any row stride)
 *   v    [F, Sk, Dv]     C-ordered
 *   out  [B, Sq, Hq, Dv] and lse [B, Hq, Sq] C-ordered results (lse in nats); F = B * kv_heads, Hq = kv_heads * G.
 * With `causal` key j is hidden from the query at position i when j > i + Sk - Sq (bottom-right aligned, as
 * kernel.py's mask). A row that sees no key gets out 0 and lse -inf. None: arguments not handled here (the
 * caller runs its generic kernel).
 *
 * Why: the numpy kernel pays Python's cost per run of tiles (about 2,000 runs for a causal forward at S = 8192,
 * each a dozen numpy calls) and several passes over each score block; PyTorch's is_causal kernel is one C++
 * loop. Here a unit is (f, block of block_q query positions): its key blocks of block_k columns run back to back
 * (scores = Q K^T by sgemm, the online-softmax step in one pass per row, acc += P V by sgemm), only the keys a
 * causal block can see are multiplied (the last block's width stops at the block's last visible key), and
 * the units, heaviest first, go to `threads` threads (this one and the pool's; MKL on one thread each).
 * The softmax step is the standard one (each row's running max m, sum l and acc rescaled by 2^(m_old - m)), so
 * no score can overflow and no case needs redoing; the exponentials are 2^x for x <= 0, flushed to 0 below
 * 2^-126 (against a row sum of at least 1, the row maximum's own term, far under float32's 2^-24).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL oarlock_cpu_gemm_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "_clones.h"
#include "_gemm.h"
#include "_pool.h"

#define LANES 16        /* partial maxima and sums per row: independent lanes the compiler vectorises */
#define MAX_THREADS 64

typedef struct {
    const float *q, *kt, *v;
    float *out, *lse;
    npy_intp F, Hk, G, Sq, Sk, D, Dv;
    npy_intp q_f, kt_f, kt_ld, v_f;    /* strides in elements */
    npy_intp bq, bk, nqb;
    int causal;
    atomic_int failed;
} flash_job;

typedef union {
    float f;
    int32_t i;
} bits32;

/* 2^x for x <= 0 (and NaN, kept): x = n + r with n an integer (rounded by adding 1.5 * 2^23) and |r| <= 1/2,
 * 2^r by its degree-7 Taylor polynomial in r ln 2 (truncation under 1e-8 relative), 2^n by the exponent bits.
 * x below -126 gives 0 (clamped first, so that 2^n stays normal). */
static inline float exp2_nonpositive(float x)
{
    const float magic = 12582912.0f;
    int tiny = x < -126.0f;
    x = tiny ? -126.0f : x;
    bits32 k = {.f = x + magic};
    float n = k.f - magic;
    float r = x - n;
    float p = 1.52527338e-05f;
    p = p * r + 1.54035304e-04f;
    p = p * r + 1.33335581e-03f;
    p = p * r + 9.61812911e-03f;
    p = p * r + 5.55041087e-02f;
    p = p * r + 2.40226507e-01f;
    p = p * r + 6.93147182e-01f;
    p = p * r + 1.0f;
    bits32 two_n = {.i = (k.i - (bits32){.f = magic}.i + 127) << 23};
    return tiny ? 0.0f : p * two_n.f;
}

/* The maximum of x[0, n) (n >= 1). A NaN score may be passed over here: it makes its row's sum NaN in row_exp2.
 * Written with vectors of 16 floats: gcc does not vectorise a max over lanes written as scalars (it keeps each
 * lane's `>` in scalar code), and this pass reads every score. */
typedef float floats16 __attribute__((vector_size(64)));
typedef int32_t ints16 __attribute__((vector_size(64)));

static inline floats16 max16(floats16 a, floats16 b)
{
    ints16 gt = b > a;
    return (floats16)(((ints16)b & gt) | ((ints16)a & ~gt));
}

CLONES static float row_max(const float *x, npy_intp n)
{
    float top = x[0];
    npy_intp i = 0;
    if (n >= 2 * LANES) {
        floats16 part0, part1, y;
        memcpy(&part0, x, sizeof part0);
        memcpy(&part1, x + LANES, sizeof part1);
        for (i = 2 * LANES; i + 2 * LANES <= n; i += 2 * LANES) {
            memcpy(&y, x + i, sizeof y);
            part0 = max16(part0, y);
            memcpy(&y, x + i + LANES, sizeof y);
            part1 = max16(part1, y);
        }
        part0 = max16(part0, part1);
        for (int l = 0; l < LANES; l++)
            top = part0[l] > top ? part0[l] : top;
    }
    for (; i < n; i++)
        top = x[i] > top ? x[i] : top;
    return top;
}

/* x[0, n) <- 2^(x - m) in place; returns their sum (16 lanes, then the lanes in order). */
CLONES static float row_exp2(float *x, float m, npy_intp n)
{
    float part[LANES] = {0.0f};
    npy_intp i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float y = exp2_nonpositive(x[i + l] - m);
            x[i + l] = y;
            part[l] += y;
        }
    for (int l = 0; i < n; i++, l++) {
        float y = exp2_nonpositive(x[i] - m);
        x[i] = y;
        part[l] += y;
    }
    float s = 0.0f;
    for (int l = 0; l < LANES; l++)
        s += part[l];
    return s;
}

/* One row's online-softmax step over its scores s[0, seen) (the rest of its w columns are hidden: set to 0, so
 * the values product adds nothing for them): m, l and acc[0, dv) are the row's running max, sum and values. */
static void softmax_step(float *s, npy_intp seen, npy_intp w, float *m, float *l, float *acc, npy_intp dv)
{
    if (seen <= 0) {
        memset(s, 0, (size_t)w * sizeof(float));
        return;
    }
    float top = row_max(s, seen);
    float m_new = top > *m ? top : *m;
    if (m_new == -INFINITY) {   /* every score so far -inf (-inf inputs): nothing seen yet */
        memset(s, 0, (size_t)w * sizeof(float));
        return;
    }
    float alpha = *m == -INFINITY ? 0.0f : exp2_nonpositive(*m - m_new);
    float sum = row_exp2(s, m_new, seen);
    if (seen < w)
        memset(s + seen, 0, (size_t)(w - seen) * sizeof(float));
    *l = *l * alpha + sum;
    if (alpha != 1.0f)
        for (npy_intp c = 0; c < dv; c++)
            acc[c] *= alpha;
    *m = m_new;
}

/* Unit `piece`: query block i of head f, the heaviest blocks (the last, under causal) first. */
static void run_unit(void *ctx, long piece)
{
    flash_job *j = ctx;
    gemm_set_threads_local(1);
    npy_intp i = j->nqb - 1 - piece / j->F, f = piece % j->F;
    npy_intp r0 = i * j->bq, r1 = r0 + j->bq < j->Sq ? r0 + j->bq : j->Sq, G = j->G, n = (r1 - r0) * G;
    npy_intp off = j->Sk - j->Sq, dv = j->Dv;
    npy_intp kend = j->Sk;
    if (j->causal && r1 + off < kend)
        kend = r1 + off > 0 ? r1 + off : 0;
    size_t width = (size_t)(kend < j->bk ? (kend > 0 ? kend : 1) : j->bk);
    float *s = malloc((size_t)n * width * sizeof(float));
    float *acc = calloc((size_t)(n * dv > 0 ? n * dv : 1), sizeof(float));
    float *m = malloc((size_t)n * sizeof(float)), *l = malloc((size_t)n * sizeof(float));
    if (s == NULL || acc == NULL || m == NULL || l == NULL) {
        atomic_store(&j->failed, 1);
        goto done;
    }
    for (npy_intp r = 0; r < n; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const float *q = j->q + f * j->q_f + r0 * G * j->D, *kt = j->kt + f * j->kt_f, *v = j->v + f * j->v_f;
    for (npy_intp c0 = 0; c0 < kend; c0 += j->bk) {
        npy_intp c1 = c0 + j->bk < kend ? c0 + j->bk : kend, w = c1 - c0;
        gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)w, (blas_int)j->D, 1.0f, q,
                   (blas_int)j->D, kt + c0, (blas_int)j->kt_ld, 0.0f, s, (blas_int)w);
        for (npy_intp r = 0; r < n; r++) {
            npy_intp seen = w;
            if (j->causal) {   /* the row's keys end at its position + off */
                npy_intp last = r0 + r / G + off - c0 + 1;
                seen = last < 0 ? 0 : last < w ? last : w;
            }
            softmax_step(s + r * w, seen, w, m + r, l + r, acc + r * dv, dv);
        }
        if (dv > 0)
            gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)dv, (blas_int)w, 1.0f, s, (blas_int)w,
                       v + c0 * dv, (blas_int)dv, 1.0f, acc, (blas_int)dv);
    }
    npy_intp b = f / j->Hk, h = f % j->Hk, hq = j->Hk * G;
    for (npy_intp r = 0; r < n; r++) {
        npy_intp pos = r0 + r / G, head = h * G + r % G;
        float *o = j->out + ((b * j->Sq + pos) * hq + head) * dv;
        float *lse = j->lse + (b * hq + head) * j->Sq + pos;
        if (l[r] == 0.0f) {   /* no key seen */
            memset(o, 0, (size_t)dv * sizeof(float));
            *lse = -INFINITY;
            continue;
        }
        float inv = 1.0f / l[r];
        for (npy_intp c = 0; c < dv; c++)
            o[c] = acc[r * dv + c] * inv;
        *lse = (m[r] + log2f(l[r])) * 0.693147180559945309f;
    }
done:
    free(s);
    free(acc);
    free(m);
    free(l);
}

/* A float32 array of `ndim` dimensions, aligned, native order, last stride 1 (or a last axis of at most 1). */
static int usable(PyObject *obj, int ndim)
{
    if (!PyArray_CheckExact(obj))
        return 0;
    PyArrayObject *x = (PyArrayObject *)obj;
    return PyArray_TYPE(x) == NPY_FLOAT32 && PyArray_NDIM(x) == ndim && PyArray_ISALIGNED(x) &&
           PyArray_ISNOTSWAPPED(x) && (PyArray_DIM(x, ndim - 1) <= 1 || PyArray_STRIDE(x, ndim - 1) == 4);
}

PyObject *flashmask_forward(PyObject *self, PyObject *args)
{
    PyObject *qo, *kto, *vo, *outo, *lseo;
    Py_ssize_t hk, bq, bk;
    int causal, threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOnpnni", &qo, &kto, &vo, &outo, &lseo, &hk, &causal, &bq, &bk, &threads))
        return NULL;
    if (gemm_sgemm == NULL || !usable(qo, 3) || !usable(kto, 3) || !usable(vo, 3) || !usable(outo, 4) ||
        !usable(lseo, 3) || hk < 1 || bq < 1 || bk < 1)
        Py_RETURN_NONE;
    PyArrayObject *q = (PyArrayObject *)qo, *kt = (PyArrayObject *)kto, *v = (PyArrayObject *)vo,
                  *out = (PyArrayObject *)outo, *lse = (PyArrayObject *)lseo;
    if (!PyArray_IS_C_CONTIGUOUS(q) || !PyArray_IS_C_CONTIGUOUS(v) || !PyArray_IS_C_CONTIGUOUS(out) ||
        !PyArray_IS_C_CONTIGUOUS(lse) || !PyArray_ISWRITEABLE(out) || !PyArray_ISWRITEABLE(lse))
        Py_RETURN_NONE;
    flash_job j = {0};
    const npy_intp *so = PyArray_SHAPE(out);
    j.F = PyArray_DIM(q, 0);
    j.Hk = hk;
    j.Sq = so[1];
    j.D = PyArray_DIM(q, 2);
    j.Sk = PyArray_DIM(v, 1);
    j.Dv = PyArray_DIM(v, 2);
    if (so[2] % hk || so[0] * hk != j.F)
        Py_RETURN_NONE;
    j.G = so[2] / hk;
    if (PyArray_DIM(q, 1) != j.Sq * j.G || PyArray_DIM(kt, 0) != j.F || PyArray_DIM(kt, 1) != j.D ||
        PyArray_DIM(kt, 2) != j.Sk || PyArray_DIM(v, 0) != j.F || so[3] != j.Dv || PyArray_DIM(lse, 0) != so[0] ||
        PyArray_DIM(lse, 1) != so[2] || PyArray_DIM(lse, 2) != j.Sq)
        Py_RETURN_NONE;
    if (PyArray_STRIDE(kt, 0) % 4 || PyArray_STRIDE(kt, 1) % 4 || PyArray_STRIDE(kt, 1) < 4 * j.Sk ||
        j.Sq * j.G > INT_MAX || j.Sk > INT_MAX || PyArray_STRIDE(kt, 1) / 4 > INT_MAX)
        Py_RETURN_NONE;
    j.q = PyArray_DATA(q);
    j.kt = PyArray_DATA(kt);
    j.v = PyArray_DATA(v);
    j.out = PyArray_DATA(out);
    j.lse = PyArray_DATA(lse);
    j.q_f = j.Sq * j.G * j.D;
    j.kt_f = PyArray_STRIDE(kt, 0) / 4;
    j.kt_ld = PyArray_STRIDE(kt, 1) / 4;
    j.v_f = j.Sk * j.Dv;
    j.bq = bq;
    j.bk = bk;
    j.nqb = (j.Sq + bq - 1) / bq;
    j.causal = causal;
    long pieces = (long)(j.F * j.nqb);
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if (pieces < threads)
        threads = pieces > 0 ? (int)pieces : 1;
    Py_BEGIN_ALLOW_THREADS
    pool_run(threads, pieces, run_unit, &j, NULL);
    Py_END_ALLOW_THREADS
    if (atomic_load(&j.failed))
        return PyErr_NoMemory();
    Py_RETURN_TRUE;
}
