/*
 * The FlashMask forward for the masks without vectors (plain causal, or no mask), float32, in C (part of
 * oarlock_cpu._gemm: MKL's sgemm through the pointers _gemm.c resolved, the units on _pool.c's worker pool):
 *
 *   flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads, tiles=True) -> True | None
 *
 * The operands are oarlock-flashmask's working layouts (kernel.py), per flattened (batch, key head) f:
 *   q    [F, Sq * G, D]  C-ordered, row s * G + g = query head h * G + g at position s, pre-multiplied by
 *                        scale * log2(e) (scores in base 2)
 *   kt   [F, D, Sk]      K^T, last stride 1 (its rows may be padded: any row stride)
 *   v    [F, Sk, Dv]     C-ordered, or the value input itself, [B, Sk, kv_heads, Dv] C-ordered
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
 * With `tiles` (and where the CPU has AVX-512 and D = Dv is a multiple of 16) a key block is instead two calls of
 * _flash_tiles.c's kernels, which keep the scores in registers from the product through the exponential.
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
#include "_flash_tiles.h"
#include "_gemm.h"
#include "_pool.h"

#define LANES 16        /* partial maxima and sums per row: independent lanes the compiler vectorises */
#define MAX_THREADS 64

typedef struct {
    const float *q, *kt, *v;
    float *out, *lse;
    npy_intp F, Hk, G, Sq, Sk, D, Dv;
    npy_intp q_f, kt_f, kt_ld, v_b, v_h, v_ld;    /* strides in elements (v: per batch, key head, row) */
    npy_intp bq, bk, nqb;
    int causal, tiles;   /* tiles: the AVX-512 tile kernels (_flash_tiles.c) instead of sgemm and row passes */
    npy_intp f0, f1;     /* the heads of the current wave (the units run a wave of heads at a time) */
    float *packed;       /* with tiles: the wave's K^T in strips (tiles_pack_keys), `strips` of them a head */
    float *packed_v;     /* and its V rows, contiguous [wave, Sk, Dv], where v's rows are not (the value input) */
    npy_intp strips;
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

/* the lane-wise maximum of vectors a and b, into a (a macro: a function returning a vector of 64 bytes would warn
 * of its ABI where AVX-512 is off) */
#define MAX16(a, b)                                          \
    do {                                                     \
        ints16 gt_ = (b) > (a);                              \
        (a) = (floats16)(((ints16)(b) & gt_) | ((ints16)(a) & ~gt_)); \
    } while (0)

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
            MAX16(part0, y);
            memcpy(&y, x + i + LANES, sizeof y);
            MAX16(part1, y);
        }
        MAX16(part0, part1);
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

/* n bytes (at least 1) aligned to 64, zeroed when asked: the tiles' vector loads and stores then never split a cache
 * line (at malloc's 16-byte alignment every 64-byte vector straddles two). Free with free(). */
static void *alloc64(size_t n, int zero)
{
    void *p = NULL;
    n = (n + 63) / 64 * 64;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        return NULL;
    if (zero)
        memset(p, 0, n);
    return p;
}

/* How many of the keys [c0, c0 + w) the query at position `pos` sees: w, or under causal (bottom-right aligned,
 * off = Sk - Sq) the keys up to pos + off */
static npy_intp visible_keys(int causal, npy_intp pos, npy_intp off, npy_intp c0, npy_intp w)
{
    if (!causal)
        return w;
    npy_intp last = pos + off - c0 + 1;
    return last < 0 ? 0 : last < w ? last : w;
}

/* The keys row r of a block from query position r0 sees */
static npy_intp seen_keys(const flash_job *j, npy_intp r0, npy_intp r, npy_intp c0, npy_intp w)
{
    return visible_keys(j->causal, r0 + r / j->G, j->Sk - j->Sq, c0, w);
}

/* One key block [c0, c0 + w) of a unit by sgemm and a softmax pass per row */
static void block_by_sgemm(const flash_job *j, const float *q, const float *kt, const float *v, npy_intp r0,
                           npy_intp n, npy_intp c0, npy_intp w, float *s, float *m, float *l, float *acc)
{
    npy_intp dv = j->Dv;
    gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)w, (blas_int)j->D, 1.0f, q, (blas_int)j->D,
               kt + c0, (blas_int)j->kt_ld, 0.0f, s, (blas_int)w);
    for (npy_intp r = 0; r < n; r++)
        softmax_step(s + r * w, seen_keys(j, r0, r, c0, w), w, m + r, l + r, acc + r * dv, dv);
    if (dv > 0)
        gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)dv, (blas_int)w, 1.0f, s, (blas_int)w,
                   v + c0 * j->v_ld, (blas_int)j->v_ld, 1.0f, acc, (blas_int)dv);
}

/* The same by the AVX-512 tiles: `seen` has room for n counts, `sums` for 16 lanes a row (zeros on entry). */
static void block_by_tiles(const flash_job *j, npy_intp f, const float *q, const float *v, npy_intp r0, npy_intp n,
                           npy_intp c0, npy_intp w, float *s, float *m, float *sums, float *acc, npy_intp *seen)
{
    npy_intp ld = (w + 31) / 32 * 32;
    for (npy_intp r = 0; r < n; r++)
        seen[r] = seen_keys(j, r0, r, c0, w);
    const float *kp = j->packed + ((f - j->f0) * j->strips + c0 / TILES_COLS) * j->D * TILES_COLS;
    tiles_scores_softmax(q, j->D, kp, n, w, seen, s, ld, m, sums, acc, j->Dv);
    if (j->packed_v != NULL)
        tiles_values(s, ld, j->packed_v + ((f - j->f0) * j->Sk + c0) * j->Dv, j->Dv, n, w, seen, acc, j->Dv);
    else
        tiles_values(s, ld, v + c0 * j->v_ld, j->v_ld, n, w, seen, acc, j->Dv);
}

/* Unit `piece` of the wave: query block i of head f, head by head (the threads share one head's keys and values in
 * the cache: 10% faster than taking the heads in turn), in each head the heaviest blocks (the last, under causal)
 * first. */
static void run_unit(void *ctx, long piece)
{
    flash_job *j = ctx;
    gemm_set_threads_local(1);
    npy_intp f = j->f0 + piece / j->nqb, i = j->nqb - 1 - piece % j->nqb;
    npy_intp r0 = i * j->bq, r1 = r0 + j->bq < j->Sq ? r0 + j->bq : j->Sq, G = j->G, n = (r1 - r0) * G;
    npy_intp off = j->Sk - j->Sq, dv = j->Dv;
    npy_intp kend = j->Sk;
    if (j->causal && r1 + off < kend)
        kend = r1 + off > 0 ? r1 + off : 0;
    size_t width = (size_t)(kend < j->bk ? (kend > 0 ? kend : 1) : j->bk);
    width = (width + 31) / 32 * 32;   /* the tiles store whole vectors */
    float *s = alloc64((size_t)n * width * sizeof(float), 0);
    float *acc = alloc64((size_t)(n * dv) * sizeof(float), 1);
    float *m = malloc((size_t)n * sizeof(float));
    float *l = alloc64((size_t)n * (j->tiles ? 16 : 1) * sizeof(float), 1);   /* sums (16 lanes a row in the tiles) */
    npy_intp *seen = malloc((size_t)n * sizeof(npy_intp));
    if (s == NULL || acc == NULL || m == NULL || l == NULL || seen == NULL) {
        atomic_store(&j->failed, 1);
        goto done;
    }
    for (npy_intp r = 0; r < n; r++)
        m[r] = -INFINITY;
    const float *q = j->q + f * j->q_f + r0 * G * j->D, *kt = j->kt + f * j->kt_f;
    const float *v = j->v + (f / j->Hk) * j->v_b + (f % j->Hk) * j->v_h;
    for (npy_intp c0 = 0; c0 < kend; c0 += j->bk) {
        npy_intp w = (c0 + j->bk < kend ? c0 + j->bk : kend) - c0;
        if (j->tiles)
            block_by_tiles(j, f, q, v, r0, n, c0, w, s, m, l, acc, seen);
        else
            block_by_sgemm(j, q, kt, v, r0, n, c0, w, s, m, l, acc);
    }
    if (j->tiles)   /* each row's sum lanes, in order */
        for (npy_intp r = 0; r < n; r++) {
            float total = 0.0f;
            for (int k = 0; k < 16; k++)
                total += l[r * 16 + k];
            l[r] = total;
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
    free(seen);
}

/* Piece `piece` of a wave's packing: head f's keys [c0, c0 + bk) into j->packed (and its values into j->packed_v) */
static void pack_piece(void *ctx, long piece)
{
    flash_job *j = ctx;
    npy_intp per_head = (j->Sk + j->bk - 1) / j->bk, h = piece / per_head, f = j->f0 + h;
    npy_intp c0 = (piece % per_head) * j->bk, c1 = c0 + j->bk < j->Sk ? c0 + j->bk : j->Sk;
    tiles_pack_keys(j->kt + f * j->kt_f, j->kt_ld, j->D, c0, c1,
                    j->packed + (h * j->strips + c0 / TILES_COLS) * j->D * TILES_COLS);
    if (j->packed_v != NULL) {   /* (rows 2 KiB apart defeat the prefetchers: the values product reads V 20 times) */
        const float *v = j->v + (f / j->Hk) * j->v_b + (f % j->Hk) * j->v_h;
        for (npy_intp c = c0; c < c1; c++)
            memcpy(j->packed_v + (h * j->Sk + c) * j->Dv, v + c * j->v_ld, (size_t)j->Dv * sizeof(float));
    }
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
    int causal, threads, tiles = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOnpnni|p", &qo, &kto, &vo, &outo, &lseo, &hk, &causal, &bq, &bk, &threads,
                          &tiles))
        return NULL;
    if (gemm_sgemm == NULL || !usable(qo, 3) || !usable(kto, 3) || !(usable(vo, 3) || usable(vo, 4)) ||
        !usable(outo, 4) || !usable(lseo, 3) || hk < 1 || bq < 1 || bk < 1)
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
    int v4 = PyArray_NDIM(v) == 4;   /* value itself, [B, Sk, Hk, Dv], or the per-head copy [F, Sk, Dv] */
    j.Sk = PyArray_DIM(v, 1);
    j.Dv = PyArray_DIM(v, v4 ? 3 : 2);
    if (so[2] % hk || so[0] * hk != j.F || (v4 ? PyArray_DIM(v, 0) != so[0] || PyArray_DIM(v, 2) != hk
                                                : PyArray_DIM(v, 0) != j.F))
        Py_RETURN_NONE;
    j.G = so[2] / hk;
    if (PyArray_DIM(q, 1) != j.Sq * j.G || PyArray_DIM(kt, 0) != j.F || PyArray_DIM(kt, 1) != j.D ||
        PyArray_DIM(kt, 2) != j.Sk || so[3] != j.Dv || PyArray_DIM(lse, 0) != so[0] ||
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
    j.v_ld = v4 ? hk * j.Dv : j.Dv;
    j.v_h = v4 ? j.Dv : j.Sk * j.Dv;
    j.v_b = hk * j.Sk * j.Dv;
    j.bq = bq;
    j.bk = bk;
    j.nqb = (j.Sq + bq - 1) / bq;
    j.causal = causal;
    j.tiles = tiles && tiles_avx512() && j.Dv > 0 && j.Dv % 16 == 0 && bk % TILES_COLS == 0 && j.D == j.Dv;
    j.strips = (j.Sk + TILES_COLS - 1) / TILES_COLS;
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    /* The tiles pack a wave of `threads` heads at a time (the packed copies then take `threads` heads' room, not
     * F's); the sgemm path runs every head in one wave. */
    npy_intp wave = j.tiles ? threads : (j.F > 0 ? j.F : 1);
    if (j.tiles) {
        j.packed = alloc64((size_t)(wave * j.strips * j.D * TILES_COLS) * sizeof(float), 0);
        if (j.v_ld != j.Dv)
            j.packed_v = alloc64((size_t)(wave * j.Sk * j.Dv) * sizeof(float), 0);
        if (j.packed == NULL || (j.v_ld != j.Dv && j.packed_v == NULL)) {
            free(j.packed);
            free(j.packed_v);
            return PyErr_NoMemory();
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (j.f0 = 0; j.f0 < j.F; j.f0 = j.f1) {
        j.f1 = j.f0 + wave < j.F ? j.f0 + wave : j.F;
        long pieces = (long)((j.f1 - j.f0) * j.nqb);
        int used = pieces < threads ? (pieces > 0 ? (int)pieces : 1) : threads;
        if (j.tiles)
            pool_run(threads, (long)((j.f1 - j.f0) * ((j.Sk + bk - 1) / bk)), pack_piece, &j, NULL);
        pool_run(used, pieces, run_unit, &j, NULL);
    }
    Py_END_ALLOW_THREADS
    free(j.packed);
    free(j.packed_v);
    if (atomic_load(&j.failed))
        return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

PyObject *flashmask_tiles(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    return PyBool_FromLong(tiles_avx512());
}

/* ---------------------------------------------------------------------------------------------------------------
 * The backward (FlashAttention-2), the same masks:
 *
 *   flashmask_backward(q, do, delta, lse2, k, kt, vt, dk, dv, dqs, group, causal, block_q, block_k, tiles=True)
 *       -> True | None
 *
 * kernel.py's working layouts after its preparation (G = group, query heads per key head), per f: q [F, Sq * G, D] (scale * log2(e) applied), do
 * [F, Sq * G, Dv + e] (the first Dv columns used), delta and lse2 [F, Sq * G, 1] (rowsum(dO * O) - dlse, and lse in
 * base 2, huge where a row saw no key), k [F, Sk, D] (keys less their mean c), kt [F, D, Sk] (K^T, uncentred: the
 * scores round as the forward's), vt [F, Dv + e, Sk] (V^T; its first Dv rows used), and the accumulators dk [F, Sk,
 * D], dv [F, Sk, Dv] and the tuple dqs of T arrays [F, Sq * G, D] (zeros on entry). A unit is (f, key block j of
 * block_k keys): over its query blocks (those that see a key of it), P = 2^(s - lse), dV_j += P^T dO, dS = P (dO
 * V^T - delta), dQ += dS (K_j - c), dK_j += dS^T Q. dK_j and dV_j belong to the unit; dQ's terms go to dqs[t]:
 * piece t of the T pieces on the pool (whichever thread runs it) takes the units t, t + T, ... (heaviest first),
 * so each array sums the same terms in the same order every call (the caller adds them in order: reproducible
 * bits, as the numpy kernel's workers).
 * With `tiles` (the forward's condition) P and dS are the epilogues of _flash_tiles.c's score products (the scores
 * then the forward's own bits) and the other three products its strided register-block product.
 * The caller finishes (dQ sum and c dlse, the scale and ln 2 factors, the layouts back).
 * --------------------------------------------------------------------------------------------------------------- */

typedef struct {
    const float *q, *dout, *delta, *lse2, *k, *kt, *vt;
    float *dk, *dv;
    float **dqs;
    npy_intp F, G, Sq, Sk, D, Dv;
    npy_intp do_ld, do_f, kt_f, kt_ld, vt_f, vt_ld;
    npy_intp bq, bk, nkb, units, pieces;
    int causal, tiles;   /* tiles: P and dS by the AVX-512 tiles (_flash_tiles.c) */
    atomic_int failed;
} flash_bwd_job;

/* P = 2^(s - lse) of one row's first `seen` scores, 0 for the rest of its w columns. */
CLONES static void row_probs(float *s, float lse, npy_intp seen, npy_intp w)
{
    for (npy_intp c = 0; c < seen; c++)
        s[c] = exp2_nonpositive(s[c] - lse);
    for (npy_intp c = seen; c < w; c++)
        s[c] = 0.0f;
}

/* dS = P (dP - delta) in place of dP. */
CLONES static void row_score_grad(float *dp, const float *p, float delta, npy_intp w)
{
    for (npy_intp c = 0; c < w; c++)
        dp[c] = p[c] * (dp[c] - delta);
}

/* The scratch of one pool piece: the tile's scores / P and dP / dS (row stride ld), and with tiles the unit's key
 * block packed (K^T and V^T in strips: tiles_pack_keys) and the rows' visible key counts */
typedef struct {
    float *s, *dp, *kp, *vp;
    npy_intp ld, *seen;
} bwd_scratch;

/* P and dS of one tile (n rows from query position r0, w keys from c0) into sc->s, sc->dp: by the AVX-512 tiles
 * (the scores the forward's own products) or by sgemm and a pass per row */
static void tile_probs_and_grads(const flash_bwd_job *j, const bwd_scratch *sc, npy_intp r0, npy_intp n, npy_intp c0,
                                 npy_intp w, const float *qb, const float *dob, const float *kt, const float *vt,
                                 const float *lse2, const float *delta)
{
    npy_intp ld = sc->ld;
    for (npy_intp r = 0; r < n; r++)
        sc->seen[r] = visible_keys(j->causal, r0 + r / j->G, j->Sk - j->Sq, c0, w);
    if (j->tiles) {
        tiles_probs(qb, j->D, sc->kp, n, w, sc->seen, lse2, sc->s, ld);
        tiles_score_grads(dob, j->do_ld, j->Dv, sc->vp, n, w, sc->s, ld, delta, sc->dp, ld);
        return;
    }
    gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)w, (blas_int)j->D, 1.0f, qb, (blas_int)j->D, kt,
               (blas_int)j->kt_ld, 0.0f, sc->s, (blas_int)ld);
    for (npy_intp r = 0; r < n; r++)
        row_probs(sc->s + r * ld, lse2[r], sc->seen[r], w);
    if (j->Dv > 0)
        gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)w, (blas_int)j->Dv, 1.0f, dob,
                   (blas_int)j->do_ld, vt, (blas_int)j->vt_ld, 0.0f, sc->dp, (blas_int)ld);
    else
        memset(sc->dp, 0, (size_t)(n * ld) * sizeof(float));
    for (npy_intp r = 0; r < n; r++)
        row_score_grad(sc->dp + r * ld, sc->s + r * ld, delta[r], w);
}

static void backward_unit(flash_bwd_job *j, npy_intp unit, float *dq, const bwd_scratch *sc)
{
    npy_intp jb = unit / j->F, f = unit % j->F, G = j->G, D = j->D, Dv = j->Dv, off = j->Sk - j->Sq, ld = sc->ld;
    npy_intp c0 = jb * j->bk, c1 = c0 + j->bk < j->Sk ? c0 + j->bk : j->Sk, w = c1 - c0;
    npy_intp first = j->causal && c0 - off > 0 ? c0 - off : 0;   /* the first query position that sees a key */
    const float *q = j->q + f * j->Sq * G * D, *dout = j->dout + f * j->do_f, *delta = j->delta + f * j->Sq * G;
    const float *lse2 = j->lse2 + f * j->Sq * G, *kc = j->k + (f * j->Sk + c0) * D;
    const float *kt = j->kt + f * j->kt_f + c0, *vt = j->vt + f * j->vt_f + c0;
    float *dk = j->dk + (f * j->Sk + c0) * D, *dv = j->dv + (f * j->Sk + c0) * Dv, *dqf = dq + f * j->Sq * G * D;
    if (j->tiles) {
        tiles_pack_keys(j->kt + f * j->kt_f, j->kt_ld, D, c0, c1, sc->kp);
        tiles_pack_keys(j->vt + f * j->vt_f, j->vt_ld, Dv, c0, c1, sc->vp);
    }
    for (npy_intp r0 = first; r0 < j->Sq; r0 += j->bq) {
        npy_intp r1 = r0 + j->bq < j->Sq ? r0 + j->bq : j->Sq, n = (r1 - r0) * G;
        const float *qb = q + r0 * G * D, *dob = dout + r0 * G * j->do_ld;
        tile_probs_and_grads(j, sc, r0, n, c0, w, qb, dob, kt, vt, lse2 + r0 * G, delta + r0 * G);
        if (j->tiles) {   /* dV += P^T dO, dQ += dS (K - c), dK += dS^T Q (D = Dv, a multiple of 16) */
            tiles_product(sc->s, 1, ld, w, n, dob, j->do_ld, dv, Dv, Dv);
            tiles_product(sc->dp, ld, 1, n, w, kc, D, dqf + r0 * G * D, D, D);
            tiles_product(sc->dp, 1, ld, w, n, qb, D, dk, D, D);
            continue;
        }
        if (Dv > 0)
            gemm_sgemm(ROW_MAJOR, TRANS, NO_TRANS, (blas_int)w, (blas_int)Dv, (blas_int)n, 1.0f, sc->s, (blas_int)ld,
                       dob, (blas_int)j->do_ld, 1.0f, dv, (blas_int)Dv);
        if (D > 0) {
            gemm_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (blas_int)n, (blas_int)D, (blas_int)w, 1.0f, sc->dp, (blas_int)ld,
                       kc, (blas_int)D, 1.0f, dqf + r0 * G * D, (blas_int)D);
            gemm_sgemm(ROW_MAJOR, TRANS, NO_TRANS, (blas_int)w, (blas_int)D, (blas_int)n, 1.0f, sc->dp, (blas_int)ld,
                       qb, (blas_int)D, 1.0f, dk, (blas_int)D);
        }
    }
}

/* Piece t: the units t, t + T, ... (heaviest first: the first key blocks under causal, seen by the most rows). */
static void run_backward_piece(void *ctx, long piece)
{
    flash_bwd_job *j = ctx;
    gemm_set_threads_local(1);
    npy_intp n = j->bq * j->G, strips = (j->bk + TILES_COLS - 1) / TILES_COLS;
    bwd_scratch sc = {.ld = strips * TILES_COLS};
    sc.s = alloc64((size_t)(n * sc.ld) * sizeof(float), 0);
    sc.dp = alloc64((size_t)(n * sc.ld) * sizeof(float), 0);
    sc.seen = malloc((size_t)n * sizeof(npy_intp));
    if (j->tiles) {
        sc.kp = alloc64((size_t)(strips * j->D * TILES_COLS) * sizeof(float), 0);
        sc.vp = alloc64((size_t)(strips * j->Dv * TILES_COLS) * sizeof(float), 0);
    }
    if (sc.s == NULL || sc.dp == NULL || sc.seen == NULL || (j->tiles && (sc.kp == NULL || sc.vp == NULL)))
        atomic_store(&j->failed, 1);
    else
        for (npy_intp u = piece; u < j->units; u += j->pieces)
            backward_unit(j, u, j->dqs[piece], &sc);
    free(sc.s);
    free(sc.dp);
    free(sc.seen);
    free(sc.kp);
    free(sc.vp);
}

/* A C-ordered float32 array of shape (a, b, c) (c = -1: any), writeable when asked. */
static int c_array(PyObject *obj, npy_intp a, npy_intp b, npy_intp c, int writeable)
{
    if (!usable(obj, 3) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj))
        return 0;
    PyArrayObject *x = (PyArrayObject *)obj;
    return PyArray_DIM(x, 0) == a && PyArray_DIM(x, 1) == b && (c < 0 || PyArray_DIM(x, 2) == c) &&
           (!writeable || PyArray_ISWRITEABLE(x));
}

/* A float32 [a, rows, >= cols] array with last stride 1 and element strides: its two strides in elements. */
static int strided_rows(PyObject *obj, npy_intp a, npy_intp rows, npy_intp cols, npy_intp *s0, npy_intp *s1)
{
    if (!usable(obj, 3))
        return 0;
    PyArrayObject *x = (PyArrayObject *)obj;
    if (PyArray_DIM(x, 0) != a || PyArray_DIM(x, 1) < rows || PyArray_DIM(x, 2) != cols ||
        PyArray_STRIDE(x, 0) % 4 || PyArray_STRIDE(x, 1) % 4 || PyArray_STRIDE(x, 1) < 4 * cols ||
        PyArray_STRIDE(x, 1) / 4 > INT_MAX)
        return 0;
    *s0 = PyArray_STRIDE(x, 0) / 4;
    *s1 = PyArray_STRIDE(x, 1) / 4;
    return 1;
}

PyObject *flashmask_backward(PyObject *self, PyObject *args)
{
    PyObject *qo, *doo, *deltao, *lseo, *ko, *kto, *vto, *dko, *dvo, *dqso;
    Py_ssize_t group, bq, bk;
    int causal, threads, tiles = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnpnn|p", &qo, &doo, &deltao, &lseo, &ko, &kto, &vto, &dko, &dvo, &dqso,
                          &group, &causal, &bq, &bk, &tiles))
        return NULL;
    if (gemm_sgemm == NULL || !usable(qo, 3) || !usable(ko, 3) || !usable(dvo, 3) || !usable(doo, 3) ||
        !PyTuple_Check(dqso) || PyTuple_GET_SIZE(dqso) < 1 || PyTuple_GET_SIZE(dqso) > MAX_THREADS || group < 1 ||
        bq < 1 || bk < 1)
        Py_RETURN_NONE;
    flash_bwd_job j = {0};
    PyArrayObject *q = (PyArrayObject *)qo, *k = (PyArrayObject *)ko, *dv = (PyArrayObject *)dvo,
                  *dout = (PyArrayObject *)doo;
    npy_intp rows = PyArray_DIM(q, 1);
    j.F = PyArray_DIM(q, 0);
    j.G = group;
    j.Sq = rows / group;
    j.D = PyArray_DIM(q, 2);
    j.Sk = PyArray_DIM(k, 1);
    j.Dv = PyArray_DIM(dv, 2);
    if (rows % group || !c_array(qo, j.F, rows, j.D, 0) || !c_array(ko, j.F, j.Sk, j.D, 0) ||
        !c_array(dko, j.F, j.Sk, j.D, 1) || !c_array(dvo, j.F, j.Sk, j.Dv, 1) || !c_array(deltao, j.F, rows, 1, 0) ||
        !c_array(lseo, j.F, rows, 1, 0) || !c_array(doo, j.F, rows, -1, 0) || PyArray_DIM(dout, 2) < j.Dv ||
        !strided_rows(kto, j.F, j.D, j.Sk, &j.kt_f, &j.kt_ld) || !strided_rows(vto, j.F, j.Dv, j.Sk, &j.vt_f, &j.vt_ld) ||
        rows > INT_MAX || j.Sk > INT_MAX)
        Py_RETURN_NONE;
    threads = (int)PyTuple_GET_SIZE(dqso);
    float *dqs[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        PyObject *x = PyTuple_GET_ITEM(dqso, t);
        if (!c_array(x, j.F, rows, j.D, 1))
            Py_RETURN_NONE;
        dqs[t] = PyArray_DATA((PyArrayObject *)x);
    }
    j.q = PyArray_DATA(q);
    j.dout = PyArray_DATA(dout);
    j.do_ld = PyArray_DIM(dout, 2);
    j.do_f = rows * j.do_ld;
    j.delta = PyArray_DATA((PyArrayObject *)deltao);
    j.lse2 = PyArray_DATA((PyArrayObject *)lseo);
    j.k = PyArray_DATA(k);
    j.kt = PyArray_DATA((PyArrayObject *)kto);
    j.vt = PyArray_DATA((PyArrayObject *)vto);
    j.dk = PyArray_DATA((PyArrayObject *)dko);
    j.dv = PyArray_DATA(dv);
    j.dqs = dqs;
    j.causal = causal;
    j.bq = bq;
    j.bk = bk;
    j.nkb = (j.Sk + bk - 1) / bk;
    j.units = j.F * j.nkb;
    j.pieces = threads;
    /* as the forward's condition: then the tiles' scores are the forward's own products, bit for bit */
    j.tiles = tiles && tiles_avx512() && j.Dv > 0 && j.Dv % 16 == 0 && bk % TILES_COLS == 0 && j.D == j.Dv;
    Py_BEGIN_ALLOW_THREADS
    pool_run(threads, (long)threads, run_backward_piece, &j, NULL);
    Py_END_ALLOW_THREADS
    if (atomic_load(&j.failed))
        return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

/* ---------------------------------------------------------------------------------------------
 * flashmask_transpose_heads(x, dst, kv_heads, threads) -> True | None: dst[f, d, s] <- x[b, s, h, d] for every
 * flattened (batch, key head) f = b * kv_heads + h, d < D, s < S: the preparation's K^T (and V^T) of every head at
 * once, x [B, S, kv_heads, D] C-ordered float32, dst [F, >= D, S] float32 with last stride 1 (padded rows: any row
 * stride). numpy's per-head contiguous copy and 2-D transpose took 5-8% of a causal forward at S = 8192; here blocks
 * of 16 positions (16 rows of D read once, D runs of 16 written) on the pool.
 */
typedef struct {
    const float *x;
    float *dst;
    npy_intp S, Hk, D, dst_f, dst_ld, chunk, nchunks;
} transpose_job;

#define TRANSPOSE_CHUNK 512   /* positions per piece */

/* fn(job, piece) over F heads x the chunks of S positions (*chunk, *nchunks: the job's own fields, set first) on
 * `threads` threads of the pool, without the GIL */
static void over_heads(int threads, npy_intp F, npy_intp S, pool_fn fn, void *job, npy_intp *chunk, npy_intp *nchunks)
{
    *chunk = TRANSPOSE_CHUNK;
    *nchunks = (S + *chunk - 1) / *chunk;
    Py_BEGIN_ALLOW_THREADS
    pool_run(threads, (long)(F * *nchunks), fn, job, NULL);
    Py_END_ALLOW_THREADS
}

static void transpose_piece(void *ctx, long piece)
{
    const transpose_job *j = ctx;
    npy_intp f = piece / j->nchunks, p0 = (piece % j->nchunks) * j->chunk;
    npy_intp p1 = p0 + j->chunk < j->S ? p0 + j->chunk : j->S, row = j->Hk * j->D;
    const float *src = j->x + ((f / j->Hk) * j->S * j->Hk + f % j->Hk) * j->D;   /* x[b, 0, h, 0] */
    float *dst = j->dst + f * j->dst_f;
    for (npy_intp p = p0; p < p1; p += 16) {
        npy_intp pe = p + 16 < p1 ? p + 16 : p1;
        for (npy_intp d = 0; d < j->D; d++) {
            float *o = dst + d * j->dst_ld;
            for (npy_intp i = p; i < pe; i++)
                o[i] = src[i * row + d];
        }
    }
}

PyObject *flashmask_transpose_heads(PyObject *self, PyObject *args)
{
    PyObject *xo, *dsto;
    Py_ssize_t kv_heads;
    int threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOni", &xo, &dsto, &kv_heads, &threads))
        return NULL;
    if (!usable(xo, 4) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)xo) || kv_heads < 1 || threads < 1)
        Py_RETURN_NONE;
    PyArrayObject *x = (PyArrayObject *)xo;
    transpose_job j = {.S = PyArray_DIM(x, 1), .Hk = PyArray_DIM(x, 2), .D = PyArray_DIM(x, 3)};
    npy_intp F = PyArray_DIM(x, 0) * j.Hk;
    if (j.Hk != kv_heads || !strided_rows(dsto, F, j.D, j.S, &j.dst_f, &j.dst_ld) ||
        !PyArray_ISWRITEABLE((PyArrayObject *)dsto))
        Py_RETURN_NONE;
    if (F == 0 || j.S == 0 || j.D == 0)
        Py_RETURN_TRUE;
    j.x = PyArray_DATA(x);
    j.dst = PyArray_DATA((PyArrayObject *)dsto);
    over_heads(threads, F, j.S, transpose_piece, &j, &j.chunk, &j.nchunks);
    Py_RETURN_TRUE;
}

/* flashmask_gather_heads(x, dst, kv_heads, scale, threads) -> True | None: dst[f, s * G + g, :D] <- scale *
 * x[b, s, h * G + g, :] for every f = b * kv_heads + h (the preparation's per-head Q rows, pre-multiplied), x
 * [B, S, kv_heads * G, D] C-ordered float32, dst [F, S * G, >= D] C-ordered float32 (its other columns are left
 * alone). One pass on the pool instead of numpy's per-head copies on Python threads. */
typedef struct {   /* (flashmask_scatter_heads's too) */
    const float *x;
    const float *parts[MAX_THREADS];
    float *dst;
    npy_intp S, Hk, G, D, W, nparts, chunk, nchunks;
    float scale;
} heads_job;

/* Piece `piece` of over_heads for a [B, S, Hk * G, D] array: head f, positions [*p0, *p1); returns the offset of its
 * element [b, 0, h * G, 0] */
static npy_intp head_piece(const heads_job *j, long piece, npy_intp *f, npy_intp *p0, npy_intp *p1)
{
    *f = piece / j->nchunks;
    *p0 = (piece % j->nchunks) * j->chunk;
    *p1 = *p0 + j->chunk < j->S ? *p0 + j->chunk : j->S;
    return ((*f / j->Hk) * j->S * j->Hk + *f % j->Hk) * j->G * j->D;
}

static void gather_piece(void *ctx, long piece)
{
    const heads_job *j = ctx;
    npy_intp f, p0, p1, run = j->G * j->D;
    const float *src = j->x + head_piece(j, piece, &f, &p0, &p1);   /* x[b, 0, h * G, 0] */
    float *dst = j->dst + f * j->S * j->G * j->W;
    for (npy_intp p = p0; p < p1; p++)
        for (npy_intp g = 0; g < j->G; g++) {
            const float *in = src + p * j->Hk * run + g * j->D;
            float *o = dst + (p * j->G + g) * j->W;
            for (npy_intp d = 0; d < j->D; d++)
                o[d] = in[d] * j->scale;
        }
}

PyObject *flashmask_gather_heads(PyObject *self, PyObject *args)
{
    PyObject *xo, *dsto;
    Py_ssize_t kv_heads;
    double scale;
    int threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOndi", &xo, &dsto, &kv_heads, &scale, &threads))
        return NULL;
    if (!usable(xo, 4) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)xo) || !usable(dsto, 3) ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)dsto) || !PyArray_ISWRITEABLE((PyArrayObject *)dsto) ||
        kv_heads < 1 || threads < 1)
        Py_RETURN_NONE;
    PyArrayObject *x = (PyArrayObject *)xo, *dst = (PyArrayObject *)dsto;
    npy_intp hq = PyArray_DIM(x, 2);
    heads_job j = {.S = PyArray_DIM(x, 1), .Hk = kv_heads, .G = hq / kv_heads, .D = PyArray_DIM(x, 3),
                    .W = PyArray_DIM(dst, 2), .scale = (float)scale};
    npy_intp F = PyArray_DIM(x, 0) * kv_heads;
    if (hq % kv_heads || PyArray_DIM(dst, 0) != F || PyArray_DIM(dst, 1) != j.S * j.G || j.W < j.D)
        Py_RETURN_NONE;
    if (F == 0 || j.S == 0 || j.G == 0 || j.D == 0)
        Py_RETURN_TRUE;
    j.x = PyArray_DATA(x);
    j.dst = PyArray_DATA(dst);
    over_heads(threads, F, j.S, gather_piece, &j, &j.chunk, &j.nchunks);
    Py_RETURN_TRUE;
}

/* flashmask_scatter_heads(x, parts, dst, kv_heads, scale, threads) -> True | None: the finish of the backward, the
 * inverse of gather_heads: dst[b, s, h * G + g, :] <- (x[f, s * G + g, :] + parts[0][f, ...] + parts[1][f, ...] + ...)
 * * scale for every f = b * kv_heads + h, the terms added in that order (numpy's in-place sums and product give the same
 * bits); x and each part [F, S * G, D] C-ordered float32, dst [B, S, kv_heads * G, D] C-ordered float32. */
static void scatter_piece(void *ctx, long piece)
{
    const heads_job *j = ctx;
    npy_intp f, p0, p1, run = j->G * j->D;
    float *dst = j->dst + head_piece(j, piece, &f, &p0, &p1);   /* dst[b, 0, h * G, 0] */
    npy_intp head = f * j->S * run;
    for (npy_intp p = p0; p < p1; p++) {
        float *o = dst + p * j->Hk * run;
        npy_intp at = head + p * run;
        for (npy_intp e = 0; e < run; e++) {
            float t = j->x[at + e];
            for (npy_intp k = 0; k < j->nparts; k++)
                t += j->parts[k][at + e];
            o[e] = t * j->scale;
        }
    }
}

PyObject *flashmask_scatter_heads(PyObject *self, PyObject *args)
{
    PyObject *xo, *partso, *dsto;
    Py_ssize_t kv_heads;
    double scale;
    int threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOndi", &xo, &partso, &dsto, &kv_heads, &scale, &threads))
        return NULL;
    if (!usable(dsto, 4) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)dsto) ||
        !PyArray_ISWRITEABLE((PyArrayObject *)dsto) || !PyTuple_Check(partso) ||
        PyTuple_GET_SIZE(partso) > MAX_THREADS || kv_heads < 1 || threads < 1)
        Py_RETURN_NONE;
    PyArrayObject *dst = (PyArrayObject *)dsto;
    npy_intp hq = PyArray_DIM(dst, 2);
    heads_job j = {.S = PyArray_DIM(dst, 1), .Hk = kv_heads, .G = hq / kv_heads, .D = PyArray_DIM(dst, 3),
                     .nparts = PyTuple_GET_SIZE(partso), .scale = (float)scale};
    npy_intp F = PyArray_DIM(dst, 0) * kv_heads;
    if (hq % kv_heads || !c_array(xo, F, j.S * j.G, j.D, 0))
        Py_RETURN_NONE;
    for (npy_intp k = 0; k < j.nparts; k++) {
        PyObject *part = PyTuple_GET_ITEM(partso, k);
        if (!c_array(part, F, j.S * j.G, j.D, 0))
            Py_RETURN_NONE;
        j.parts[k] = PyArray_DATA((PyArrayObject *)part);
    }
    if (F == 0 || j.S == 0 || j.G == 0 || j.D == 0)
        Py_RETURN_TRUE;
    j.x = PyArray_DATA((PyArrayObject *)xo);
    j.dst = PyArray_DATA(dst);
    over_heads(threads, F, j.S, scatter_piece, &j, &j.chunk, &j.nchunks);
    Py_RETURN_TRUE;
}
