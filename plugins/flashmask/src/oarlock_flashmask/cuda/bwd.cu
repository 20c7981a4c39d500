// bwd.cu: the backward of FlashMask attention on tensor cores (FlashAttention-2's algorithm, deterministic).
// Compiled after prelude.cuh, tensor_core.cuh, mask.cuh and fwd.cu, in one source; every name here starts with
// fm_bwd_ / FM_BWD_.
//
// Layout (Paddle's BSHD): q, dO, O, dQ [B, Sq, Hq, D]; k, v, dK, dV [B, Sk, Hk, D] (T = bf16_t or half_t);
// lse, delta [B, Hq, Sq] float32. Query head h reads key/value head h / (Hq / Hk) and mask head h / (Hq / Hm).
//
// Three kernels, 128 threads (4 warps) each, tiles of 64 queries x 64 keys (the pre-pass's key block is 64):
//   fm_bwd_delta: delta = rowsum(dO * O) - grad_lse (grad_lse optional)           grid (ceil(B Sq Hq / 8))
//   fm_bwd_dkdv:  one CTA per (key block, kv head, batch); loops over the G = Hq / Hk query heads of its kv head
//                 and their query blocks; owns its 64 dK / dV rows (no atomics)     grid (nkb, Hk, B)
//   fm_bwd_dq:    one CTA per (query block, query head, batch); loops over the key blocks; owns its 64 dQ rows
//                                                                                  grid (nqb, Hq, B)
// Both recompute S = Q K^T and P = exp(S scale - lse) = exp2(S scale log2(e) - lse log2(e)) from the saved lse:
// P = 0 where masked and on rows whose lse is not finite (fully masked rows: lse = -inf) or past Sq. Tiles are
// classified with fm_classify (the pre-pass's per-block min/max): SKIP tiles are neither loaded nor computed,
// PARTIAL tiles are masked element by element with fm_masked, FULL tiles need no mask work (but keys past Sk
// are masked in the dq kernel's last key block; the dkdv kernel never writes its rows past Sk, and a row of an
// mma's A operand only reaches the same row of the result).
//
// Shared memory (dynamic_smem): 64-row tiles of T with a row stride of D + 8 elements (the 16-byte pad puts the
// 8 rows an ldmatrix reads in 8 different bank groups), filled by cp.async (16 bytes a thread, rows past the
// end zero-filled), double-buffered: the next non-skipped tile is in flight while the current one is computed.
// Bytes (gpu_backward.smem_bytes): dkdv 58368 (D = 64) / 107520 (D = 128), dq 57344 / 106496. Registers:
// __launch_bounds__(128, 2) lets ptxas use up to 255 a thread (2 CTAs per SM, what the shared memory allows at
// D = 128); without the minimum, ptxas squeezed fm_bwd_dq<., 64> to 168 registers (3 CTAs) and spilled.
// The fragment layouts are tensor_core.cuh's (mma.m16n8k16.row.col: A 16x16 row-major, B 16x8 "col", C 16x8
// float; lane = 4 g + t). Every matrix product is a warp-level mma_16816 with float32 accumulators; the five
// products and the source of each operand are spelled out where they are computed.

#define FM_BWD_THREADS 128
#define FM_BWD_BLOCK FM_STATS_BLOCK
#define FM_BWD_LOG2E 1.4426950408889634f
#define FM_BWD_INF __int_as_float(0x7f800000)

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FM_BWD_BOUNDS __launch_bounds__(FM_BWD_THREADS, 2)
#else
#define FM_BWD_BOUNDS
#endif

__device__ __forceinline__ int fm_bwd_min(int a, int b) { return a < b ? a : b; }

// lse -> lse log2(e) for the exp2 form, +inf (P = 0) when lse is not finite (a fully masked row) or the row is
// past the end
__device__ __forceinline__ float fm_bwd_lse2(const float* lse, long long index, bool valid) {
    if (!valid) return FM_BWD_INF;
    const float l = lse[index];
    return fabsf(l) <= 3.4028234663852886e38f ? l * FM_BWD_LOG2E : FM_BWD_INF;
}

// cp.async one 64-row tile of a [.., rows, heads, D] tensor into shared memory (row stride D + 8); `g` points to
// the tile's first row (for the tile's head), rows apart by `row_stride` elements; rows >= `rows` are zeroed.
template <typename T, int D>
__device__ __forceinline__ void fm_bwd_load_tile(T* s, const T* g, long long row_stride, int rows) {
    constexpr int chunks = D / 8;   // 16-byte chunks per row
#pragma unroll
    for (int c = (int)threadIdx.x; c < FM_BWD_BLOCK * chunks; c += FM_BWD_THREADS) {
        const int r = c / chunks, col = (c % chunks) * 8;
        const bool valid = r < rows;
        cp_async_16(s + r * (D + 8) + col, valid ? g + r * row_stride + col : g, valid);
    }
}

// The mask vectors of the keys [c0, c0 + 64) for (b, mask head mh) into shared memory, 4 ints a key (the
// first C used); keys past Sk get zeros (they are masked otherwise or never written).
__device__ __forceinline__ void fm_bwd_load_vectors(int* s, const FlashMaskSpec& m, int b, int mh, int c0) {
    const int tid = (int)threadIdx.x;
    if (tid < FM_BWD_BLOCK) {
        const int j = c0 + tid;
        if (j < m.sk) {
            const int* v = fm_vectors(m, b, mh, j);
            for (int p = 0; p < m.c; ++p) s[tid * 4 + p] = v[p];
        } else {
            for (int p = 0; p < 4; ++p) s[tid * 4 + p] = 0;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// delta[b, h, i] = sum_d dO[b, i, h, d] O[b, i, h, d] - grad_lse[b, h, i]: 16 threads a (b, i, h) row (flat
// row r = (b Sq + i) Hq + h, so a block reads 8 consecutive rows), a shuffle reduction within the 16.

template <typename T, int D>
__global__ void FM_BWD_BOUNDS fm_bwd_delta(const T* dout, const T* out, const float* grad_lse, int has_grad_lse,
                                           float* delta, int rows, int sq, int hq) {
    constexpr int per = D / 16;
    const int tid = (int)threadIdx.x;
    const long long r = (long long)blockIdx.x * (FM_BWD_THREADS / 16) + tid / 16;
    float s = 0.0f;
    if (r < rows) {
        const T* a = dout + r * D + (tid % 16) * per;
        const T* o = out + r * D + (tid % 16) * per;
#pragma unroll
        for (int e = 0; e < per; ++e) s += to_f(a[e]) * to_f(o[e]);
    }
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(OARLOCK_FULL_MASK, s, off);
    if (r < rows && tid % 16 == 0) {
        const long long h = r % hq, i = (r / hq) % sq, b = r / ((long long)hq * sq);
        const long long index = (b * hq + h) * sq + i;
        delta[index] = has_grad_lse ? s - grad_lse[index] : s;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The two warp-level product shapes of the backward (all five products are one of them). A warp computes a
// 16-row slab; `lane` = 4 g + t.
//
// fm_bwd_mma_abt: acc [16 x 8 NT] += A B^T with A [16 x 16 KS] and B [8 NT x 16 KS] both row-major tiles in
// shared memory (row stride S elements), i.e. the contraction runs along the rows of both tiles.
//   A fragment (a[0..3] = A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]): four 8x8 matrices of the
//   A tile, no transpose -> ldmatrix_x4, lane l addressing row l % 8 + 8 ((l / 8) % 2), column 8 (l / 16).
//   B fragment of the mma (B_mma = B^T, "col": b[0] = B_mma[2t..2t+1][g] = B[g][2t..2t+1]): two consecutive
//   elements of one row of the B tile, i.e. a non-transposed 8x8 matrix of it -> ldmatrix_x4 (no trans), lane l
//   addressing row l % 8 + 8 (l / 16), column 8 ((l / 8) % 2): registers 0, 1 are b[0], b[1] of n-tile 2j and
//   registers 2, 3 those of n-tile 2j + 1.
template <typename T, int S, int KS, int NT>
__device__ __forceinline__ void fm_bwd_mma_abt(float (&acc)[NT][4], const T* a, const T* b, int lane) {
    const T* a_lane = a + (lane % 8 + 8 * ((lane / 8) % 2)) * S + 8 * (lane / 16);
    const T* b_lane = b + (lane % 8 + 8 * (lane / 16)) * S + 8 * ((lane / 8) % 2);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
        unsigned af[4];
        ldmatrix_x4(af, a_lane + kk * 16);
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
            unsigned r[4];
            ldmatrix_x4(r, b_lane + j * 16 * S + kk * 16);
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            mma_16816<T>(acc[2 * j], af, b0);
            mma_16816<T>(acc[2 * j + 1], af, b1);
        }
    }
}

// fm_bwd_mma_cb: acc [16 x 8 DT] += C B with C [16 x 8 NT] held in registers as mma C fragments (float) and
// B [8 NT x 8 DT] a row-major tile in shared memory (row stride S): the contraction runs along C's columns
// and B's rows.
//   A fragment from registers (no shared memory): the C fragments of n-tiles 2j and 2j + 1 are exactly the A
//   fragment of k-step j once rounded to T: a[0] = C_2j[0..1] (row g, k 2t..), a[1] = C_2j[2..3] (row g + 8),
//   a[2] = C_2j+1[0..1] (row g, k 2t + 8..), a[3] = C_2j+1[2..3].
//   B fragment (b[0] = B[2t..2t+1][g]): two consecutive rows of one column of the B tile, i.e. a transposed 8x8
//   matrix -> ldmatrix_x4_trans, lane l addressing row l % 8 + 8 ((l / 8) % 2), column 8 (l / 16): registers
//   0, 1 are b[0], b[1] of d-tile 2n and registers 2, 3 those of d-tile 2n + 1.
template <typename T, int S, int NT, int DT>
__device__ __forceinline__ void fm_bwd_mma_cb(float (&acc)[DT][4], const float (&c)[NT][4], const T* b, int lane) {
    const T* b_lane = b + (lane % 8 + 8 * ((lane / 8) % 2)) * S + 8 * (lane / 16);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
        const unsigned af[4] = {pack2<T>(c[2 * j][0], c[2 * j][1]), pack2<T>(c[2 * j][2], c[2 * j][3]),
                                pack2<T>(c[2 * j + 1][0], c[2 * j + 1][1]),
                                pack2<T>(c[2 * j + 1][2], c[2 * j + 1][3])};
#pragma unroll
        for (int n = 0; n < DT / 2; ++n) {
            unsigned r[4];
            ldmatrix_x4_trans(r, b_lane + j * 16 * S + n * 16);
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            mma_16816<T>(acc[2 * n], af, b0);
            mma_16816<T>(acc[2 * n + 1], af, b1);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dK, dV of one key block. Warp w owns keys 16w..16w+15 of the block and computes everything transposed
// (keys in the rows): S^T = K Q^T, P^T, dP^T = V dO^T, dS^T, so that P^T and dS^T, left in C fragments, are
// directly the A operands of dV += P^T dO and dK += dS^T Q (no shared-memory round trip). The 64 queries of a
// tile go through the registers in chunks of NQ (32 for D = 128 keeps dK, dV (D floats a thread) and the
// chunk's S^T, dP^T (NQ / 2 floats each) within the register file; 64 for D = 64).

// the next work item (query head gi = it / nqb of the kv head, query block it % nqb) at or after `it` that is
// not SKIP, with its class; n when none
__device__ __forceinline__ int fm_bwd_next_query_block(const FlashMaskSpec& m, int b, int h0, int nqb, int kb,
                                                       int c0, int c1, int it, int n, int& cls) {
    for (; it < n; ++it) {
        const int r0 = (it % nqb) * FM_BWD_BLOCK;
        cls = fm_classify(m, b, (h0 + it / nqb) / m.head_div, kb, r0, fm_bwd_min(r0 + FM_BWD_BLOCK, m.sq), c0, c1);
        if (cls != FM_SKIP) return it;
    }
    return n;
}

template <typename T, int D>
__global__ void FM_BWD_BOUNDS fm_bwd_dkdv(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                          const float* delta, const int* sri, const int* bmin, const int* bmax,
                                          int has_sri, int hm, int c, int causal, int wl, int wr, T* dk, T* dv,
                                          int sq, int sk, int hq, int hk, float scale) {
    constexpr int S = D + 8;                       // shared row stride (elements)
    constexpr int TILE = FM_BWD_BLOCK * S;
    constexpr int NQ = D == 128 ? 32 : 64;         // queries per register chunk
    constexpr int NT = NQ / 8;                     // n-tiles (8 queries) of S^T / dP^T per chunk
    constexpr int DT = D / 8;                      // n-tiles (8 dims) of dK / dV
    T* ks = reinterpret_cast<T*>(dynamic_smem());  // [64][S]   K of the block
    T* vs = ks + TILE;                             // [64][S]   V
    T* qs = vs + TILE;                             // [2][64][S] Q tiles (double buffer)
    T* dos = qs + 2 * TILE;                        // [2][64][S] dO tiles
    float* lse_s = reinterpret_cast<float*>(dos + 2 * TILE);           // [2][64] lse log2(e) (+inf: P = 0)
    float* delta_s = lse_s + 2 * FM_BWD_BLOCK;                          // [2][64]
    int* vec_s = reinterpret_cast<int*>(delta_s + 2 * FM_BWD_BLOCK);   // [2][64][4] mask vectors of the keys

    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int kb = (int)blockIdx.x, h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int c0 = kb * FM_BWD_BLOCK, c1 = fm_bwd_min(c0 + FM_BWD_BLOCK, sk);
    const int group = hq / hk, h0 = h * group;
    const int nqb = (sq + FM_BWD_BLOCK - 1) / FM_BWD_BLOCK, n = group * nqb;
    const FlashMaskSpec m = fm_spec(sri, bmin, bmax, has_sri, hm, c, hq, causal, wl, wr, sq, sk);
    const long long q_rs = (long long)hq * D, k_rs = (long long)hk * D;
    const float scale_log2 = scale * FM_BWD_LOG2E;

    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.0f;

    int cls = FM_SKIP;
    int it = fm_bwd_next_query_block(m, b, h0, nqb, kb, c0, c1, 0, n, cls);
    auto load = [&](int item, int stage, int item_cls) {   // Q, dO (cp.async), lse, delta, vectors of an item
        const int hi = h0 + item / nqb, r0 = (item % nqb) * FM_BWD_BLOCK, rows = fm_bwd_min(FM_BWD_BLOCK, sq - r0);
        const long long at = ((long long)b * sq + r0) * q_rs + (long long)hi * D;
        fm_bwd_load_tile<T, D>(qs + stage * TILE, q + at, q_rs, rows);
        fm_bwd_load_tile<T, D>(dos + stage * TILE, dout + at, q_rs, rows);
        if (tid < FM_BWD_BLOCK) {
            const long long row = ((long long)b * hq + hi) * sq + r0 + tid;
            lse_s[stage * FM_BWD_BLOCK + tid] = fm_bwd_lse2(lse, row, tid < rows);
            delta_s[stage * FM_BWD_BLOCK + tid] = tid < rows ? delta[row] : 0.0f;
        }
        if (item_cls == FM_PARTIAL && m.sri != nullptr)
            fm_bwd_load_vectors(vec_s + stage * FM_BWD_BLOCK * 4, m, b, hi / m.head_div, c0);
    };
    if (it < n) {
        const long long at = ((long long)b * sk + c0) * k_rs + (long long)h * D;
        fm_bwd_load_tile<T, D>(ks, k + at, k_rs, c1 - c0);
        fm_bwd_load_tile<T, D>(vs, v + at, k_rs, c1 - c0);
        load(it, 0, cls);
    }
    cp_async_commit();   // group: K, V and the first item

    int stage = 0;
    while (it < n) {
        int next_cls = FM_SKIP;
        const int next = fm_bwd_next_query_block(m, b, h0, nqb, kb, c0, c1, it + 1, n, next_cls);
        if (next < n) load(next, stage ^ 1, next_cls);
        cp_async_commit();
        cp_async_wait<1>();   // everything but the prefetch has landed
        __syncthreads();

        const int r0 = (it % nqb) * FM_BWD_BLOCK;
        const T* qt = qs + stage * TILE;
        const T* dot = dos + stage * TILE;
        const float* lse_t = lse_s + stage * FM_BWD_BLOCK;
        const float* delta_t = delta_s + stage * FM_BWD_BLOCK;
        const int* vec_t = vec_s + stage * FM_BWD_BLOCK * 4;
        const bool partial = cls == FM_PARTIAL;
        for (int q0 = 0; q0 < FM_BWD_BLOCK && r0 + q0 < sq; q0 += NQ) {
            float s_acc[NT][4], dp_acc[NT][4];
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) s_acc[i][e] = dp_acc[i][e] = 0.0f;
            // (1) S^T = K Q^T [16 keys x NQ queries, k = D] (fm_bwd_mma_abt). A = K: the warp's 16 rows of the K
            //     tile, ldmatrix_x4 (no trans). B_mma = Q^T: rows q0.. of the Q tile, ldmatrix_x4 (no trans).
            fm_bwd_mma_abt<T, S, D / 16, NT>(s_acc, ks + warp * 16 * S, qt + q0 * S, lane);
            // P^T = exp2(S^T scale log2(e) - lse log2(e)); element e of n-tile i: key row g + 8 (e / 2), query
            // column 8 i + 2 t + e % 2 (of the chunk)
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kl = warp * 16 + g + 8 * (e / 2), ql = q0 + i * 8 + 2 * t + (e % 2);
                    float p = exp2f(s_acc[i][e] * scale_log2 - lse_t[ql]);
                    if (partial && fm_masked(m, vec_t + kl * 4, r0 + ql, c0 + kl)) p = 0.0f;
                    s_acc[i][e] = p;
                }
            // (2) dP^T = V dO^T [16 keys x NQ queries, k = D] (fm_bwd_mma_abt). A = V: the warp's 16 rows of the V
            //     tile, ldmatrix_x4 (no trans). B_mma = dO^T: rows q0.. of the dO tile, ldmatrix_x4 (no trans).
            fm_bwd_mma_abt<T, S, D / 16, NT>(dp_acc, vs + warp * 16 * S, dot + q0 * S, lane);
            // (3) dV += P^T dO [16 keys x D, k = NQ queries] (fm_bwd_mma_cb). A = P^T: the C fragments of (1)
            //     after the exponential, in registers (packed to T). B = dO: rows q0.. of the dO tile, [query][d]
            //     with the contraction along its rows -> ldmatrix_x4_trans.
            fm_bwd_mma_cb<T, S, NT, DT>(dv_acc, s_acc, dot + q0 * S, lane);
            // dS^T = P^T (dP^T - delta), delta of the query column
#pragma unroll
            for (int i = 0; i < NT; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    dp_acc[i][e] = s_acc[i][e] * (dp_acc[i][e] - delta_t[q0 + i * 8 + 2 * t + (e % 2)]);
            // (4) dK += dS^T Q [16 keys x D, k = NQ queries] (fm_bwd_mma_cb; times scale at the end). A = dS^T: C
            //     fragments of (2) after the update above, in registers. B = Q: rows q0.. of the Q tile, [query][d]
            //     with the contraction along its rows -> ldmatrix_x4_trans.
            fm_bwd_mma_cb<T, S, NT, DT>(dk_acc, dp_acc, qt + q0 * S, lane);
        }
        __syncthreads();   // this stage is free for the prefetch after next
        it = next;
        cls = next_cls;
        stage ^= 1;
    }
    cp_async_wait<0>();

    // dK (times scale) and dV of the warp's keys below Sk: C layout, row g / g+8, columns 8 i + 2 t, +1
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int j = c0 + warp * 16 + g + 8 * half;
        if (j < sk) {
            const long long row = ((long long)b * sk + j) * k_rs + (long long)h * D;
#pragma unroll
            for (int i = 0; i < DT; ++i) {
                const int d = i * 8 + 2 * t;
                *reinterpret_cast<unsigned*>(dk + row + d) =
                    pack2<T>(dk_acc[i][2 * half] * scale, dk_acc[i][2 * half + 1] * scale);
                *reinterpret_cast<unsigned*>(dv + row + d) =
                    pack2<T>(dv_acc[i][2 * half], dv_acc[i][2 * half + 1]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// dQ of one query block of one query head. Warp w owns queries 16w..16w+15 (rows of S, dP, dS): S = Q K^T,
// P, dP = dO V^T, dS; dS, left in C fragments, is directly the A operand of dQ += dS K. Each thread keeps lse and
// delta of its two rows (g, g+8) in registers.

// the next key block at or after `kb` that is not SKIP for (b, mh, rows [r0, r1)), with its class; nkb when none
__device__ __forceinline__ int fm_bwd_next_key_block(const FlashMaskSpec& m, int b, int mh, int r0, int r1, int kb,
                                                     int& cls) {
    for (; kb < m.nkb; ++kb) {
        const int c0 = kb * FM_BWD_BLOCK;
        cls = fm_classify(m, b, mh, kb, r0, r1, c0, fm_bwd_min(c0 + FM_BWD_BLOCK, m.sk));
        if (cls != FM_SKIP) return kb;
    }
    return m.nkb;
}

template <typename T, int D>
__global__ void FM_BWD_BOUNDS fm_bwd_dq(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                                        const float* delta, const int* sri, const int* bmin, const int* bmax,
                                        int has_sri, int hm, int c, int causal, int wl, int wr, T* dq, int sq, int sk,
                                        int hq, int hk, float scale) {
    constexpr int S = D + 8;
    constexpr int TILE = FM_BWD_BLOCK * S;
    constexpr int NT = FM_BWD_BLOCK / 8;           // n-tiles (8 keys) of S / dP
    constexpr int DT = D / 8;                      // n-tiles (8 dims) of dQ
    T* qs = reinterpret_cast<T*>(dynamic_smem());  // [64][S]    Q of the block
    T* dos = qs + TILE;                            // [64][S]    dO
    T* ks = dos + TILE;                            // [2][64][S] K tiles (double buffer)
    T* vs = ks + 2 * TILE;                         // [2][64][S] V tiles
    int* vec_s = reinterpret_cast<int*>(vs + 2 * TILE);   // [2][64][4] mask vectors of the tile's keys

    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int qb = (int)blockIdx.x, h = (int)blockIdx.y, b = (int)blockIdx.z;
    const int r0 = qb * FM_BWD_BLOCK, r1 = fm_bwd_min(r0 + FM_BWD_BLOCK, sq);
    const int hkv = h / (hq / hk);
    const FlashMaskSpec m = fm_spec(sri, bmin, bmax, has_sri, hm, c, hq, causal, wl, wr, sq, sk);
    const int mh = h / m.head_div;
    const long long q_rs = (long long)hq * D, k_rs = (long long)hk * D;
    const float scale_log2 = scale * FM_BWD_LOG2E;

    float lse_r[2], delta_r[2];   // rows g, g+8 of the warp
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int i = r0 + warp * 16 + g + 8 * half;
        const long long row = ((long long)b * hq + h) * sq + i;
        lse_r[half] = fm_bwd_lse2(lse, row, i < sq);
        delta_r[half] = i < sq ? delta[row] : 0.0f;
    }
    float dq_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq_acc[i][e] = 0.0f;

    int cls = FM_SKIP;
    int kb = fm_bwd_next_key_block(m, b, mh, r0, r1, 0, cls);
    auto load = [&](int block, int stage, int block_cls) {   // K, V (cp.async) and vectors of a key block
        const int c0 = block * FM_BWD_BLOCK, rows = fm_bwd_min(FM_BWD_BLOCK, sk - c0);
        const long long at = ((long long)b * sk + c0) * k_rs + (long long)hkv * D;
        fm_bwd_load_tile<T, D>(ks + stage * TILE, k + at, k_rs, rows);
        fm_bwd_load_tile<T, D>(vs + stage * TILE, v + at, k_rs, rows);
        if (block_cls == FM_PARTIAL && m.sri != nullptr)
            fm_bwd_load_vectors(vec_s + stage * FM_BWD_BLOCK * 4, m, b, mh, c0);
    };
    if (kb < m.nkb) {
        const long long at = ((long long)b * sq + r0) * q_rs + (long long)h * D;
        fm_bwd_load_tile<T, D>(qs, q + at, q_rs, r1 - r0);
        fm_bwd_load_tile<T, D>(dos, dout + at, q_rs, r1 - r0);
        load(kb, 0, cls);
    }
    cp_async_commit();   // group: Q, dO and the first key tile

    int stage = 0;
    while (kb < m.nkb) {
        int next_cls = FM_SKIP;
        const int next = fm_bwd_next_key_block(m, b, mh, r0, r1, kb + 1, next_cls);
        if (next < m.nkb) load(next, stage ^ 1, next_cls);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        const int c0 = kb * FM_BWD_BLOCK;
        const T* kt = ks + stage * TILE;
        const T* vt = vs + stage * TILE;
        const int* vec_t = vec_s + stage * FM_BWD_BLOCK * 4;
        const bool partial = cls == FM_PARTIAL, tail = sk - c0 < FM_BWD_BLOCK;
        float s_acc[NT][4], dp_acc[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) s_acc[i][e] = dp_acc[i][e] = 0.0f;
        // (5a) S = Q K^T [16 queries x 64 keys, k = D] (fm_bwd_mma_abt). A = Q: the warp's 16 rows of the Q tile,
        //      ldmatrix_x4 (no trans). B_mma = K^T: the K tile's rows, ldmatrix_x4 (no trans).
        fm_bwd_mma_abt<T, S, D / 16, NT>(s_acc, qs + warp * 16 * S, kt, lane);
        // P = exp2(S scale log2(e) - lse log2(e)); element e of n-tile i: query row g + 8 (e / 2), key column
        // 8 i + 2 t + e % 2; keys past Sk masked in the last block
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int jl = i * 8 + 2 * t + (e % 2), j = c0 + jl, row = r0 + warp * 16 + g + 8 * (e / 2);
                float p = exp2f(s_acc[i][e] * scale_log2 - lse_r[e / 2]);
                if ((tail && j >= sk) || (partial && fm_masked(m, vec_t + jl * 4, row, j))) p = 0.0f;
                s_acc[i][e] = p;
            }
        // (5b) dP = dO V^T [16 queries x 64 keys, k = D] (fm_bwd_mma_abt). A = dO: the warp's 16 rows of the dO
        //      tile, ldmatrix_x4 (no trans). B_mma = V^T: the V tile's rows, ldmatrix_x4 (no trans).
        fm_bwd_mma_abt<T, S, D / 16, NT>(dp_acc, dos + warp * 16 * S, vt, lane);
        // dS = P (dP - delta), delta of the query row
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp_acc[i][e] = s_acc[i][e] * (dp_acc[i][e] - delta_r[e / 2]);
        // (5c) dQ += dS K [16 queries x D, k = 64 keys] (fm_bwd_mma_cb; times scale at the end). A = dS: the C
        //      fragments of (5b) after the update above, in registers. B = K: the K tile, [key][d] with the
        //      contraction along its rows -> ldmatrix_x4_trans.
        fm_bwd_mma_cb<T, S, NT, DT>(dq_acc, dp_acc, kt, lane);
        __syncthreads();   // this stage is free for the prefetch after next
        kb = next;
        cls = next_cls;
        stage ^= 1;
    }
    cp_async_wait<0>();

    // dQ (times scale) of the warp's rows below Sq: C layout, row g / g+8, columns 8 n + 2 t, +1
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int i = r0 + warp * 16 + g + 8 * half;
        if (i < sq) {
            const long long row = ((long long)b * sq + i) * q_rs + (long long)h * D;
#pragma unroll
            for (int n = 0; n < DT; ++n)
                *reinterpret_cast<unsigned*>(dq + row + n * 8 + 2 * t) =
                    pack2<T>(dq_acc[n][2 * half] * scale, dq_acc[n][2 * half + 1] * scale);
        }
    }
}
