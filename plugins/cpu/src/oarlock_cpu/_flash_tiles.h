/*
 * The FlashMask C forward's AVX-512 tile kernels (_flash_tiles.c), for _flash.c. Include after numpy's headers
 * (npy_intp). Where the compiler cannot target AVX-512 (not x86-64 gcc or clang), tiles_avx512() is 0 and the
 * kernels are empty: _flash.c then keeps its sgemm path.
 *
 * tiles_pack_keys: keys [c0, c1) of one head's K^T (kt, row stride kt_ld, d rows) into strips of TILES_COLS keys,
 * dst[strip][d][TILES_COLS], strip = (key - c0) / TILES_COLS; a last partial strip is padded with 0.
 * tiles_scores_softmax: for a block of n query rows (q, row stride d) and w keys (kp: their first packed strip), row r
 * seeing its first seen[r] keys (0 <= seen[r] <= w), writes the weights 2^(s - m[r]) into p (row stride p_ld, at
 * least w rounded up to 32: whole vectors are stored; hidden keys get 0), adds them to the row's 16 sum lanes
 * sums[16 r ...], and moves m[r] up where a score passes it by the margin (rescaling that row's weights so far in p,
 * its sum lanes and its values acc[r * dv ...]). m starts at -inf, the sums and acc at 0.
 * tiles_values: acc[n, dv] += p[n, :w] v[:w, dv] (v's row stride v_ld), dv a multiple of 16; the weights past each
 * row's seen[r] are 0 and not read.
 * tiles_product: acc[m, cols] += A[m, k] B[k, cols], A's element (i, c) at a[i * sa + c * sk] (so A or a transpose),
 * B's rows with stride b_ld, acc's with acc_ld; cols a multiple of 16.
 * tiles_probs (the backward): p = 2^(Q K^T - lse2[r]) for n rows x w keys (kp packed as above), 0 past each row's
 * seen[r]; the scores are the forward's own products (the same order of sums: the same bits).
 * tiles_score_grads (the backward): ds = p (dO V^T - delta[r]) for n rows x w keys, dO rows of dv floats (row stride
 * do_ld), vp V^T packed as K^T above (dv rows); p and ds with row strides p_ld, ds_ld (w rounded up to 32 at least).
 */
#ifndef OARLOCK_CPU_FLASH_TILES_H
#define OARLOCK_CPU_FLASH_TILES_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TILES_AVX512 1
#else
#define TILES_AVX512 0
#endif

#define TILES_COLS 32   /* keys per strip of the packed K^T */

int tiles_avx512(void);
void tiles_pack_keys(const float *kt, npy_intp kt_ld, npy_intp d, npy_intp c0, npy_intp c1, float *dst);
void tiles_scores_softmax(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w,
                          const npy_intp *seen, float *p, npy_intp p_ld, float *m, float *sums, float *acc,
                          npy_intp dv);
void tiles_values(const float *p, npy_intp p_ld, const float *v, npy_intp v_ld, npy_intp n, npy_intp w,
                  const npy_intp *seen, float *acc, npy_intp dv);
void tiles_product(const float *a, npy_intp sa, npy_intp sk, npy_intp m, npy_intp k, const float *b, npy_intp b_ld,
                   float *acc, npy_intp acc_ld, npy_intp cols);
void tiles_probs(const float *q, npy_intp d, const float *kp, npy_intp n, npy_intp w, const npy_intp *seen,
                 const float *lse2, float *p, npy_intp p_ld);
void tiles_score_grads(const float *dout, npy_intp do_ld, npy_intp dv, const float *vp, npy_intp n, npy_intp w,
                       const float *p, npy_intp p_ld, const float *delta, float *ds, npy_intp ds_ld);

#endif
