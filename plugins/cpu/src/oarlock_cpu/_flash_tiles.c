/*
 * The FlashMask C forward's tile kernels in AVX-512 (part of oarlock_cpu._gemm; used by _flash.c where the CPU has
 * AVX-512F and the head dim is a multiple of 16):
 *
 *   tiles_scores_softmax  P = 2^(Q K^T - m) for one query block against one key block, with each row's running
 *                         maximum m, sum and values rescaled on the way (the online softmax step)
 *   tiles_values          acc += P V
 *   tiles_probs           the backward's P = 2^(Q K^T - lse) (hidden keys 0)
 *   tiles_score_grads     the backward's dS = P (dO V^T - delta)
 *   tiles_product         acc += A B or A^T B, up to 64 columns at a time (the backward's dV, dQ and dK)
 *
 * Why not MKL's sgemm for these, as _flash.c's generic path: the sgemm calls run the products at full speed, but the
 * softmax between them was two more passes (max, then exp and sum) over a 128 x 512 score block that lives in L2:
 * a fifth of a causal forward. Here the scores of 8 rows x 32 keys stay in registers from the product through the
 * exponential, so the block is written once (as P) and read once (by the values product), and the row maximum
 * needs no pass of its own: each row's reference m is only moved when a score passes m + RESCALE_MARGIN (so every
 * weight is at most 2^RESCALE_MARGIN and no sum can overflow); the weights already written in that row are then
 * rescaled, as are its sum and values, as the standard online softmax does at every block. Past a row's first keys
 * that takes a score 2^8 times the largest weight so far, so the rescaling is rare where the softmax is not already
 * dominated by new keys.
 *
 * Rounding: the same products and sums as the sgemm path in another order; results agree within float32 rounding
 * (tested against the sgemm path and the float64 reference).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/npy_common.h>

#include "_flash_tiles.h"

#if TILES_AVX512

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512dq,fma")))
#define ROWS 8             /* query rows per register block of the scores */
#define COLS TILES_COLS
#define VROWS 6            /* rows per register block of the values product (6 x up to 4 vectors of sums) */
#define RESCALE_MARGIN 8.0f

int tiles_avx512(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("fma");
    }
    return cached;
}

/* 2^x lane-wise for x <= RESCALE_MARGIN, in the lanes of `keep` (0 elsewhere): x = n + r, n the nearest integer,
 * 2^r by a degree-6 polynomial (least-squares fit of the relative error on [-1/2, 1/2]: within 1e-7 in float32, as
 * the generic path's degree-7 Taylor polynomial), times 2^n by vscalefps, which also rounds the results under 2^-126
 * to subnormals and 0. A NaN x stays NaN; -inf gives 0 (clamped first: n = -inf would make r NaN). */
AVX512 static inline __m512 exp2_lanes(__m512 x, __mmask16 keep)
{
    x = _mm512_max_ps(_mm512_set1_ps(-160.0f), x);   /* (this operand order keeps a NaN x) */
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.53325076e-04f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.33947015e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.61849093e-03f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.55034243e-02f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.40226477e-01f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.93147182e-01f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* Row r's reference moves up to `top`: its weights so far in this block (p[0, done)), its sum lanes and its values
 * are rescaled by 2^(m - top). */
AVX512 static __attribute__((noinline)) void move_reference(float *m, float top, float *p, npy_intp done, float *sums,
                                                            float *acc, npy_intp dv)
{
    float alpha = *m == -INFINITY ? 0.0f : exp2f(*m - top);
    __m512 a = _mm512_set1_ps(alpha);
    _mm512_storeu_ps(sums, _mm512_mul_ps(_mm512_loadu_ps(sums), a));
    for (npy_intp c = 0; c < done; c++)
        p[c] *= alpha;
    for (npy_intp c = 0; c < dv; c++)
        acc[c] *= alpha;
    *m = top;
}

/* 32 lanes: those of the first `seen` (any range) */
static inline uint32_t first_keys(npy_intp seen)
{
    return seen >= 32 ? 0xffffffffu : seen <= 0 ? 0u : (uint32_t)((1u << seen) - 1u);
}

/* One row's 32 scores (x0, x1; lanes past `seen` hidden) -> weights in p[0, 32), added to its sum lanes. */
AVX512 static inline __attribute__((always_inline)) void weigh(__m512 x0, __m512 x1, npy_intp seen, float *m,
                                                               float *p_row, npy_intp c, float *sums, float *acc,
                                                               npy_intp dv)
{
    uint32_t lanes = first_keys(seen);
    __mmask16 k0 = (__mmask16)lanes, k1 = (__mmask16)(lanes >> 16);
    __m512 limit = _mm512_set1_ps(*m + RESCALE_MARGIN);
    if (lanes && (_mm512_mask_cmp_ps_mask(k0, x0, limit, _CMP_GT_OQ) |
                  _mm512_mask_cmp_ps_mask(k1, x1, limit, _CMP_GT_OQ))) {
        float top = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), k0, x0),
                                                       _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), k1, x1)));
        if (top > *m)
            move_reference(m, top, p_row, c, sums, acc, dv);
    }
    if (*m == -INFINITY)   /* nothing seen, or every score so far -inf: no weight yet */
        k0 = k1 = 0;
    __m512 ref = _mm512_set1_ps(*m);
    __m512 p0 = exp2_lanes(_mm512_sub_ps(x0, ref), k0), p1 = exp2_lanes(_mm512_sub_ps(x1, ref), k1);
    _mm512_storeu_ps(p_row + c, p0);
    _mm512_storeu_ps(p_row + c + 16, p1);
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_loadu_ps(sums), _mm512_add_ps(p0, p1)));
}

void tiles_pack_keys(const float *kt, npy_intp kt_ld, npy_intp d, npy_intp c0, npy_intp c1, float *dst)
{
    for (npy_intp c = c0; c < c1; c += TILES_COLS) {
        npy_intp width = c1 - c < TILES_COLS ? c1 - c : TILES_COLS;
        float *o = dst + ((c - c0) / TILES_COLS) * d * TILES_COLS;
        for (npy_intp e = 0; e < d; e++, o += TILES_COLS) {
            memcpy(o, kt + e * kt_ld + c, (size_t)width * sizeof(float));
            memset(o + width, 0, (size_t)(TILES_COLS - width) * sizeof(float));
        }
    }
}

/* acc[i] (two vectors: 32 keys) = row i of a (rows of `inner` floats, row stride lda; rows < `rows` used) times one
 * packed strip bp ([inner][32]), for i < ROWS (rows past `rows` repeat row 0 and are not stored by the callers) */
AVX512 static inline __attribute__((always_inline)) void strip_product(const float *a, npy_intp lda, npy_intp rows,
                                                                       const float *bp, npy_intp inner,
                                                                       __m512 acc[ROWS][2])
{
    const float *ar[ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++) {
        ar[i] = a + (i < rows ? i : 0) * lda;
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    for (npy_intp e = 0; e < inner; e++, bp += COLS) {
        __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            __m512 x = _mm512_set1_ps(ar[i][e]);
            acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        }
    }
}

AVX512 void tiles_scores_softmax(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w,
                                 const npy_intp *seen, float *p, npy_intp p_ld, float *m, float *sums, float *acc,
                                 npy_intp dv)
{
    for (npy_intp c = 0; c < w; c += COLS, kp += d * COLS) {
        for (npy_intp r0 = 0; r0 < n; r0 += ROWS) {
            npy_intp rows = n - r0 < ROWS ? n - r0 : ROWS, most = 0;
            for (npy_intp i = 0; i < rows; i++)
                most = seen[r0 + i] - c > most ? seen[r0 + i] - c : most;
            __m512 a[ROWS][2];
            if (most > 0) {
                strip_product(q + r0 * d, d, rows, kp, d, a);
            } else {
#pragma GCC unroll 8
                for (int i = 0; i < ROWS; i++)
                    a[i][0] = a[i][1] = _mm512_setzero_ps();
            }
#pragma GCC unroll 8
            for (int i = 0; i < ROWS; i++)   /* (constant indices: the accumulators stay in registers) */
                if (i < rows) {
                    npy_intp r = r0 + i, vis = seen[r] - c < w - c ? seen[r] - c : w - c;
                    weigh(a[i][0], a[i][1], vis, m + r, p + r * p_ld, c, sums + r * 16, acc + r * dv, dv);
                }
        }
    }
}

/* The backward's two score-shaped products, out = epilogue(A B - row_value[r]) for n rows (a, row stride lda, `inner`
 * floats) x w keys (bp packed as K^T): PROBS: 2^x in the row's first seen[r] keys, 0 after; GRADS: p * x. */
enum { PROBS, GRADS };

AVX512 static inline __attribute__((always_inline)) void product_rows(int epilogue, const float *a, npy_intp lda,
                                                                      npy_intp inner, const float *bp, npy_intp n,
                                                                      npy_intp w, const npy_intp *seen,
                                                                      const float *row_value, const float *p,
                                                                      npy_intp p_ld, float *out, npy_intp out_ld)
{
    for (npy_intp c = 0; c < w; c += COLS, bp += inner * COLS)
        for (npy_intp r0 = 0; r0 < n; r0 += ROWS) {
            npy_intp rows = n - r0 < ROWS ? n - r0 : ROWS;
            __m512 acc[ROWS][2];
            strip_product(a + r0 * lda, lda, rows, bp, inner, acc);
#pragma GCC unroll 8
            for (int i = 0; i < ROWS; i++)
                if (i < rows) {
                    npy_intp r = r0 + i;
                    __m512 ref = _mm512_set1_ps(row_value[r]), y0, y1;
                    __m512 x0 = _mm512_sub_ps(acc[i][0], ref), x1 = _mm512_sub_ps(acc[i][1], ref);
                    if (epilogue == PROBS) {
                        uint32_t lanes = first_keys(seen[r] - c);
                        y0 = exp2_lanes(x0, (__mmask16)lanes);
                        y1 = exp2_lanes(x1, (__mmask16)(lanes >> 16));
                    } else {
                        y0 = _mm512_mul_ps(_mm512_loadu_ps(p + r * p_ld + c), x0);
                        y1 = _mm512_mul_ps(_mm512_loadu_ps(p + r * p_ld + c + 16), x1);
                    }
                    _mm512_storeu_ps(out + r * out_ld + c, y0);
                    _mm512_storeu_ps(out + r * out_ld + c + 16, y1);
                }
        }
}

AVX512 void tiles_probs(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w, const npy_intp *seen,
                        const float *lse2, float *p, npy_intp p_ld)
{
    product_rows(PROBS, q, d, d, kp, n, w, seen, lse2, NULL, 0, p, p_ld);
}

AVX512 void tiles_score_grads(const float *dout, npy_intp do_ld, npy_intp dv, const float *vp, npy_intp n, npy_intp w,
                              const float *p, npy_intp p_ld, const float *delta, float *ds, npy_intp ds_ld)
{
    product_rows(GRADS, dout, do_ld, dv, vp, n, w, NULL, delta, p, p_ld, ds, ds_ld);
}

/* acc[rows, 16 nv columns] += A[rows, :k] B[:k, 16 nv columns] for up to VROWS rows, the sums in registers (nv <= 4
 * vectors: a constant where inlined); A's element (i, c) at a[i * sa + c * sk] (sk = 1: rows of A; sa = 1: A read
 * transposed), B's rows b (row stride b_ld) */
AVX512 static inline __attribute__((always_inline)) void product_vectors(int nv, const float *a, npy_intp sa,
                                                                         npy_intp sk, const float *b, npy_intp b_ld,
                                                                         float *acc, npy_intp acc_ld, npy_intp rows,
                                                                         npy_intp k)
{
    __m512 s[VROWS][4], bv[4];
    const float *ar[VROWS];
#pragma GCC unroll 6
    for (int i = 0; i < VROWS; i++) {
        ar[i] = a + (i < rows ? i : 0) * sa;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            s[i][v] = i < rows ? _mm512_loadu_ps(acc + i * acc_ld + 16 * v) : _mm512_setzero_ps();
    }
    for (npy_intp c = 0, o = 0; c < k; c++, o += sk, b += b_ld) {
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 6
        for (int i = 0; i < VROWS; i++) {
            __m512 x = _mm512_set1_ps(ar[i][o]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                s[i][v] = _mm512_fmadd_ps(x, bv[v], s[i][v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < VROWS; i++)   /* (constant indices: the sums stay in registers) */
        if (i < rows)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                _mm512_storeu_ps(acc + i * acc_ld + 16 * v, s[i][v]);
}

/* The same for `cols` columns (16, 32, 48 or 64) */
AVX512 static void product_block(const float *a, npy_intp sa, npy_intp sk, const float *b, npy_intp b_ld, float *acc,
                                 npy_intp acc_ld, npy_intp rows, npy_intp k, npy_intp cols)
{
    switch (cols / 16) {
    case 4:
        product_vectors(4, a, sa, sk, b, b_ld, acc, acc_ld, rows, k);
        break;
    case 3:
        product_vectors(3, a, sa, sk, b, b_ld, acc, acc_ld, rows, k);
        break;
    case 2:
        product_vectors(2, a, sa, sk, b, b_ld, acc, acc_ld, rows, k);
        break;
    default:
        product_vectors(1, a, sa, sk, b, b_ld, acc, acc_ld, rows, k);
    }
}

AVX512 void tiles_product(const float *a, npy_intp sa, npy_intp sk, npy_intp m, npy_intp k, const float *b,
                          npy_intp b_ld, float *acc, npy_intp acc_ld, npy_intp cols)
{
    for (npy_intp r0 = 0; r0 < m; r0 += VROWS)
        for (npy_intp c0 = 0; c0 < cols; c0 += 64)
            product_block(a + r0 * sa, sa, sk, b + c0, b_ld, acc + r0 * acc_ld + c0, acc_ld,
                          m - r0 < VROWS ? m - r0 : VROWS, k, cols - c0 < 64 ? cols - c0 : 64);
}

AVX512 void tiles_values(const float *p, npy_intp p_ld, const float *v, npy_intp v_ld, npy_intp n, npy_intp w,
                         const npy_intp *seen, float *acc, npy_intp dv)
{
    for (npy_intp r0 = 0; r0 < n; r0 += VROWS) {
        npy_intp rows = n - r0 < VROWS ? n - r0 : VROWS, most = 0;
        for (npy_intp i = 0; i < rows; i++)   /* the block's weights are 0 past its rows' last seen key */
            most = seen[r0 + i] > most ? seen[r0 + i] : most;
        most = most < w ? most : w;
        for (npy_intp c0 = 0; c0 < dv; c0 += 64)
            product_block(p + r0 * p_ld, p_ld, 1, v + c0, v_ld, acc + r0 * dv + c0, dv, rows, most,
                          dv - c0 < 64 ? dv - c0 : 64);
    }
}

#else

int tiles_avx512(void)
{
    return 0;
}

void tiles_pack_keys(const float *kt, npy_intp kt_ld, npy_intp d, npy_intp c0, npy_intp c1, float *dst)
{
    (void)kt, (void)kt_ld, (void)d, (void)c0, (void)c1, (void)dst;
}

void tiles_scores_softmax(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w,
                          const npy_intp *seen, float *p, npy_intp p_ld, float *m, float *sums, float *acc,
                          npy_intp dv)
{
    (void)q, (void)d, (void)kp, (void)n, (void)w, (void)seen, (void)p, (void)p_ld, (void)m,
        (void)sums, (void)acc, (void)dv;
}

void tiles_probs(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w, const npy_intp *seen,
                 const float *lse2, float *p, npy_intp p_ld)
{
    (void)q, (void)d, (void)kp, (void)n, (void)w, (void)seen, (void)lse2, (void)p, (void)p_ld;
}

void tiles_score_grads(const float *dout, npy_intp do_ld, npy_intp dv, const float *vp, npy_intp n, npy_intp w,
                       const float *p, npy_intp p_ld, const float *delta, float *ds, npy_intp ds_ld)
{
    (void)dout, (void)do_ld, (void)dv, (void)vp, (void)n, (void)w, (void)p, (void)p_ld, (void)delta, (void)ds,
        (void)ds_ld;
}

void tiles_product(const float *a, npy_intp sa, npy_intp sk, npy_intp m, npy_intp k, const float *b, npy_intp b_ld,
                   float *acc, npy_intp acc_ld, npy_intp cols)
{
    (void)a, (void)sa, (void)sk, (void)m, (void)k, (void)b, (void)b_ld, (void)acc, (void)acc_ld, (void)cols;
}

void tiles_values(const float *p, npy_intp p_ld, const float *v, npy_intp v_ld, npy_intp n, npy_intp w,
                  const npy_intp *seen, float *acc, npy_intp dv)
{
    (void)p, (void)p_ld, (void)v, (void)v_ld, (void)n, (void)w, (void)seen, (void)acc, (void)dv;
}

#endif
