// fwd.cu: FlashMask attention forward on the GPU (FlashAttention-2 style, mma.sync m16n8k16 tensor cores).
// Compiled after prelude.cuh, tensor_core.cuh and mask.cuh (oarlock_flashmask.gpu.source); self-contained.
//
// fm_block_stats: the pre-pass of mask.cuh: for every (b, mask head, key block of FM_BLOCK_N columns, vector c)
//   the min and the max of startend_row_indices over the block's columns -> bmin, bmax [B, Hm, nkb, C].
//
// fm_fwd<T, D>: q [B, Sq, Hq, D], k and v [B, Sk, Hk, D] (BSHD, contiguous) -> out [B, Sq, Hq, D] (T) and
//   lse [B, Hq, Sq] (float32, natural log of the scaled scores' row sums). Query head h reads kv head
//   h / (Hq / Hk) and mask head h / (Hq / Hm). One CTA of 4 warps per (query block of FM_BLOCK_M = 64 rows,
//   query head, batch); warp w owns rows 16 w .. 16 w + 15 of the block (one m16 tile).
//
//   BLOCK_M = 64 (not 128): the warp keeps its Q fragments (D / 16 x 4 registers), the float32 output
//   accumulator (D / 2 registers) and the 16 x 64 score tile (32 registers) in registers: 128 registers for
//   D = 128 at one m-tile per warp, twice that (spills) at two. 64 x 64 tiles also classify the mask more
//   finely (more SKIP tiles for document and window masks) and give Sq / 64 x Hq x B CTAs to fill the GPU.
//
//   Pipeline: key tiles of FM_BLOCK_N = 64 keys (the pre-pass granularity). Before any load, each thread
//   (uniformly over the CTA) finds the next non-SKIP key tile: the causal / window constraints bound the
//   range of key blocks, and fm_classify with the pre-pass stats drops SKIP blocks inside it, so a skipped
//   tile costs neither loads nor math (only its classification: a few integer compares). K and V tiles are
//   double-buffered in shared memory and loaded with cp.async (zero-filled past Sk): while tile i is being
//   computed, tile i+1's K (with, for a PARTIAL tile, its mask vectors) and V are in flight, in two commit
//   groups, so S = Q K^T only waits for K and P V only for V:
//     wait(K_i) sync | issue K_{i+1}, V_{i+1} | S = Q K_i^T, mask, online softmax | wait(V_i) sync | O += P V_i
//   The Q tile is staged through the second V buffer (loaded once, read into registers before the first
//   prefetch can overwrite it), and the output is staged through the first K buffer for 16-byte stores.
//
//   Shared memory (rows padded by 8 elements = 16 bytes: ldmatrix's eight 16-byte rows then fall on distinct
//   bank quads, conflict free): K [2][64][D + 8] + V [2][64][D + 8] (T) + mask vectors [2][64 * 4] (int):
//   38912 bytes for D = 64, 71680 bytes for D = 128: room for 5 / 3 CTAs per sm_90 SM; the registers (ptxas for
//   sm_90: 139 for D = 64, 255 for D = 128, no spills) allow 3 / 2. The grid is (query block, query head, batch)
//   with the last query blocks first (under causal-like masks they have the most key tiles).
//
//   Mask: FULL tiles do no mask work; PARTIAL tiles set the masked scores to -inf element by element with
//   fm_masked (key j's vectors from shared memory); the last key tile also masks keys >= Sk; rows >= Sq are
//   computed on zero-filled Q and never stored. Online softmax in float32 in the mma C-fragment layout
//   (each thread holds rows g and g + 8 of its warp's 16 rows): scores scaled by scale * log2(e) once, row
//   max over the 4 lanes of a row group with __shfl_xor_sync, exp2f, the row sums kept per thread and reduced
//   at the end. P is rounded to T and reused in registers as the A operand of P V. A row with every key
//   masked gets out 0 and lse -inf (never NaN).
//
//   tile_counts (when record != 0): int [B, Hq, nqb, 2] = (FULL, PARTIAL) key tiles this CTA computed: the
//   tests check the skipping against the CPU classification.

#define FM_BLOCK_M 64
#define FM_BLOCK_N FM_STATS_BLOCK
#define FM_THREADS 128
#define FM_MAX_C 4

struct __align__(16) fm_chunk16 { unsigned x, y, z, w; };    // one 16-byte shared/global transfer

// -- the pre-pass ----------------------------------------------------------------------------------------

// sri [BH = B * Hm, Sk, C] -> bmin, bmax [BH, nkb, C]; one thread per output element (grid-stride)
__global__ void fm_block_stats(const int* __restrict__ sri, int* __restrict__ bmin, int* __restrict__ bmax, int bh,
                               int sk, int c, int nkb) {
    const long long total = (long long)bh * nkb * c;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const int vec = (int)(idx % c);
        const long long rest = idx / c;
        const int kb = (int)(rest % nkb);
        const long long head = rest / nkb;
        const int j0 = kb * FM_BLOCK_N;
        const int n = sk - j0 < FM_BLOCK_N ? sk - j0 : FM_BLOCK_N;
        const int* p = sri + (head * sk + j0) * c + vec;
        int lo = p[0], hi = p[0];
#pragma unroll 8
        for (int j = 1; j < n; ++j) {
            const int x = p[(long long)j * c];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        bmin[idx] = lo;
        bmax[idx] = hi;
    }
}

// -- the forward kernel ----------------------------------------------------------------------------------

template <typename T, int D>
__global__ void __launch_bounds__(FM_THREADS)
fm_fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const int* __restrict__ sri,
       const int* __restrict__ bmin, const int* __restrict__ bmax, T* __restrict__ out, float* __restrict__ lse,
       int* __restrict__ tile_counts, int sq, int sk, int hq, int hk, int hm, int c, int has_sri, int causal,
       int wl, int wr, float scale_log2, int nkb, int record) {
    static_assert(D % 16 == 0 && D <= 256, "head dim");
    constexpr int PITCH = D + 8;                       // elements per shared-memory row (16 bytes of padding)
    constexpr int TILE = FM_BLOCK_N * PITCH;           // elements per K or V buffer
    constexpr int CHUNKS = D / 8;                      // 16-byte chunks per row
    constexpr int PER_THREAD = FM_BLOCK_N * CHUNKS / FM_THREADS;
    constexpr int VEC = FM_BLOCK_N * FM_MAX_C;         // ints per mask-vector buffer
    static_assert(FM_BLOCK_M == FM_BLOCK_N, "the Q and output staging reuse one K/V buffer");

    T* sK = reinterpret_cast<T*>(dynamic_smem());     // [2][64][PITCH]
    T* sV = sK + 2 * TILE;                             // [2][64][PITCH]
    T* sQ = sV + TILE;                                 // Q staging: the second V buffer
    int* sVec = reinterpret_cast<int*>(sV + 2 * TILE); // [2][64 * C]

    // the last query blocks first: under causal-like masks they have the most key tiles, so the long CTAs start
    // in the first wave and the short ones fill the tail
    const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int r0 = qb * FM_BLOCK_M;
    const int r1 = r0 + FM_BLOCK_M < sq ? r0 + FM_BLOCK_M : sq;
    const int kvh = h / (hq / hk);
    const int mh = h / (hq / hm);

    const FlashMaskSpec spec = fm_spec(sri, bmin, bmax, has_sri, hm, c, hq, causal, wl, wr, sq, sk);

    const long long q_stride = (long long)hq * D;      // elements from one row (token) to the next
    const long long kv_stride = (long long)hk * D;
    const T* q_base = q + ((long long)b * sq * hq + h) * D;
    const T* k_base = k + ((long long)b * sk * hk + kvh) * D;
    const T* v_base = v + ((long long)b * sk * hk + kvh) * D;
    const int* vec_base = has_sri ? sri + ((long long)b * hm + mh) * sk * c : sri;

    // the key blocks the causal / window constraints leave (fm_classify then drops the SKIP ones among them)
    const int off = sk - sq;
    int kb_lo = 0, kb_hi = nkb;
    if (causal || wr >= 0) {
        const long long last = (long long)r1 - 1 + off + (causal ? 0 : wr);     // the last visible key
        if (last < 0) kb_hi = 0;
        else if (last / FM_BLOCK_N + 1 < kb_hi) kb_hi = (int)(last / FM_BLOCK_N + 1);
    }
    if (wl >= 0) {
        const long long first = (long long)r0 + off - wl;                        // the first visible key
        if (first > 0) kb_lo = first / FM_BLOCK_N < nkb ? (int)(first / FM_BLOCK_N) : nkb;
    }
    // the first non-SKIP key block at or after `from` (kb_hi when none) and its class
    auto next_tile = [&](int from, int& cls) {
        for (int kb = from; kb < kb_hi; ++kb) {
            const int c0 = kb * FM_BLOCK_N;
            cls = fm_classify(spec, b, mh, kb, r0, r1, c0, c0 + FM_BLOCK_N < sk ? c0 + FM_BLOCK_N : sk);
            if (cls != FM_SKIP) return kb;
        }
        return kb_hi;
    };
    auto load_rows = [&](T* dst, const T* base, long long stride, int row0, int rows) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * FM_THREADS, row = idx / CHUNKS, ch = idx % CHUNKS;
            const bool ok = row0 + row < rows;
            cp_async_16(dst + row * PITCH + ch * 8, ok ? base + (row0 + row) * stride + ch * 8 : base, ok);
        }
    };
    auto load_vectors = [&](int* dst, int c0) {
        for (int i = tid; i < FM_BLOCK_N * c; i += FM_THREADS) {
            const bool ok = c0 + i / c < sk;
            cp_async_4(dst + i, ok ? vec_base + (long long)c0 * c + i : vec_base, ok);
        }
    };

    // prologue: Q and the first tile's K (+ vectors) in one group, its V in the next
    int cls = FM_SKIP;
    int cur = next_tile(kb_lo, cls);
    if (cur < kb_hi) {
        load_rows(sK, k_base, kv_stride, cur * FM_BLOCK_N, sk);
        if (has_sri && cls == FM_PARTIAL) load_vectors(sVec, cur * FM_BLOCK_N);
    }
    load_rows(sQ, q_base, q_stride, r0, sq);
    cp_async_commit();
    if (cur < kb_hi) load_rows(sV, v_base, kv_stride, cur * FM_BLOCK_N, sk);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    unsigned qf[D / 16][4];                            // the warp's 16 x D Q tile as A fragments
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], sQ + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * PITCH + kk * 16 + (lane >> 4) * 8);

    float o[D / 8][4];                                 // the output accumulator (C fragments, 8 columns each)
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    float row_max[2] = {OARLOCK_NEG_INF, OARLOCK_NEG_INF};   // rows g, g + 8 (scaled, log2 units)
    float row_sum[2] = {0.f, 0.f};                     // this thread's part of the row sums
    int n_full = 0, n_partial = 0;

    for (int it = 0; cur < kb_hi; ++it) {
        const int buf = it & 1;
        int next_cls = FM_SKIP;
        const int nxt = next_tile(cur + 1, next_cls);
        cp_async_wait<1>();                            // K_cur (and its vectors) have landed
        __syncthreads();                               // ... for every thread; buffer buf ^ 1 is free again
        if (nxt < kb_hi) {
            load_rows(sK + (buf ^ 1) * TILE, k_base, kv_stride, nxt * FM_BLOCK_N, sk);
            if (has_sri && next_cls == FM_PARTIAL) load_vectors(sVec + (buf ^ 1) * VEC, nxt * FM_BLOCK_N);
        }
        cp_async_commit();
        if (nxt < kb_hi) load_rows(sV + (buf ^ 1) * TILE, v_base, kv_stride, nxt * FM_BLOCK_N, sk);
        cp_async_commit();

        // S = Q K^T: 16 x 64 per warp, eight n8 tiles
        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
        const T* kt = sK + buf * TILE;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                unsigned r[4];
                ldmatrix_x4(r, kt + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * PITCH + kk * 16 + ((lane >> 3) & 1) * 8);
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma_16816<T>(s[2 * np], qf[kk], b0);
                mma_16816<T>(s[2 * np + 1], qf[kk], b1);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] *= scale_log2;
            s[nt][1] *= scale_log2;
            s[nt][2] *= scale_log2;
            s[nt][3] *= scale_log2;
        }

        // the mask: element by element on PARTIAL tiles, the Sk boundary on the last tile
        const int c0 = cur * FM_BLOCK_N;
        if (cls == FM_PARTIAL || c0 + FM_BLOCK_N > sk) {
            const int* vec = sVec + buf * VEC;
            const bool partial = cls == FM_PARTIAL;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = r0 + warp * 16 + g + (e >> 1) * 8;
                    const int col = c0 + nt * 8 + 2 * t + (e & 1);
                    if (col >= sk || (partial && fm_masked(spec, vec + (col - c0) * c, row, col)))
                        s[nt][e] = OARLOCK_NEG_INF;
                }
            }
        }

        // online softmax
        float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
        }
        float base[2], alpha[2], part[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(OARLOCK_FULL_MASK, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(OARLOCK_FULL_MASK, mx[r], 2));
            base[r] = mx[r] == OARLOCK_NEG_INF ? 0.f : mx[r];   // every score so far masked: exp2(-inf) = 0
            alpha[r] = exp2f(row_max[r] - base[r]);
            row_max[r] = mx[r];
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] = exp2f(s[nt][0] - base[0]);
            s[nt][1] = exp2f(s[nt][1] - base[0]);
            s[nt][2] = exp2f(s[nt][2] - base[1]);
            s[nt][3] = exp2f(s[nt][3] - base[1]);
            part[0] += s[nt][0] + s[nt][1];
            part[1] += s[nt][2] + s[nt][3];
        }
        row_sum[0] = row_sum[0] * alpha[0] + part[0];
        row_sum[1] = row_sum[1] * alpha[1] + part[1];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
        // P as A fragments: the C fragments of n-tiles 2 ks and 2 ks + 1 are the A fragment of k-step ks
        unsigned pa[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            pa[ks][0] = pack2<T>(s[2 * ks][0], s[2 * ks][1]);
            pa[ks][1] = pack2<T>(s[2 * ks][2], s[2 * ks][3]);
            pa[ks][2] = pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]);
            pa[ks][3] = pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3]);
        }

        cp_async_wait<2>();                            // V_cur has landed (K, V of the next tile may not)
        __syncthreads();
        const T* vt = sV + buf * TILE;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                unsigned r[4];
                ldmatrix_x4_trans(r, vt + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * PITCH + dp * 16
                                         + (lane >> 4) * 8);
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma_16816<T>(o[2 * dp], pa[ks], b0);
                mma_16816<T>(o[2 * dp + 1], pa[ks], b1);
            }
        }
        n_full += cls == FM_FULL;
        n_partial += cls == FM_PARTIAL;
        cur = nxt;
        cls = next_cls;
    }

    // epilogue: the row sums over the row group's 4 lanes, out = O / l via shared memory, lse
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        row_sum[r] += __shfl_xor_sync(OARLOCK_FULL_MASK, row_sum[r], 1);
        row_sum[r] += __shfl_xor_sync(OARLOCK_FULL_MASK, row_sum[r], 2);
        inv[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
    }
    cp_async_wait<0>();
    __syncthreads();                                   // every warp is done with the K / V buffers
    T* sO = sK;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
        const int row = warp * 16 + g, col = dt * 8 + 2 * t;
        *reinterpret_cast<unsigned*>(sO + row * PITCH + col) = pack2<T>(o[dt][0] * inv[0], o[dt][1] * inv[0]);
        *reinterpret_cast<unsigned*>(sO + (row + 8) * PITCH + col) =
            pack2<T>(o[dt][2] * inv[1], o[dt][3] * inv[1]);
    }
    if (t == 0) {
        constexpr float LN2 = 0.69314718055994531f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = r0 + warp * 16 + g + 8 * r;
            if (row < sq)
                lse[((long long)b * hq + h) * sq + row] =
                    row_sum[r] > 0.f ? (row_max[r] + log2f(row_sum[r])) * LN2 : OARLOCK_NEG_INF;
        }
    }
    __syncthreads();
    T* out_base = out + ((long long)b * sq * hq + h) * D;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int idx = tid + i * FM_THREADS, row = idx / CHUNKS, ch = idx % CHUNKS;
        if (r0 + row < sq)
            *reinterpret_cast<fm_chunk16*>(out_base + (r0 + row) * q_stride + ch * 8) =
                *reinterpret_cast<const fm_chunk16*>(sO + row * PITCH + ch * 8);
    }
    if (record && tid == 0) {
        int* counts = tile_counts + (((long long)b * hq + h) * gridDim.x + qb) * 2;
        counts[0] = n_full;
        counts[1] = n_partial;
    }
}
