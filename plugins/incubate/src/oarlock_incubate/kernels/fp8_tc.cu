// The blockwise-scaled FP8 GEMM of oarlock-incubate on the tensor cores (sm_89 / sm_90 and up): the semantics
// of fp8.cu's fp8_gemm_rows (fp8_gemm_blockwise's, with DeepSeek-V3's promotion) through PTX
// mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32. Appended to fp8.cu (it uses fp8_decode),
// self-contained like it: NVRTC, nvcc and the host emulation of oarlock-cuda's tests compile the same text.
//
// fp8_gemm_tc: out [m, n] (float32) = sum_j P_j * a_scale[m, j] * b_scale[n, j], where P_j is the float32 sum
//   of a[m, k] b[n, k] over the 128-wide slice j of K, produced by the MMA (the tensor core's accumulator) and
//   promoted into a separate float32 accumulator in registers after each slice, as DeepSeek-V3 / DeepGEMM do.
//   a [m, k], b [n, k]: float8 byte codes, row-major (b is "col" for the MMA: B[k][n] = b[n, k]); scales
//   float32 [m, ceil(k/128)], [n, ceil(k/128)].
//   Tiling: one block of 256 threads (8 warps, 2 x 4) per 128 x 128 tile of out; the K loop steps one 128-wide
//   scale slice at a time through shared memory (a 128 x 128 byte tile of a and of b, rows padded to 144 bytes
//   so that the fragment reads of the 8 row groups fall in distinct banks); each warp owns a 64 x 32 sub-tile =
//   4 x 4 MMA tiles of 16 x 8, and runs 4 k32 steps per slice. Global loads: 16-byte vectors when k % 16 == 0
//   and both operands are 16-byte aligned (the next slice's loads are issued before the current slice's MMAs),
//   bytes otherwise. Ragged m, n, k: the tiles are zero-padded in shared memory (zero codes contribute +0 to the
//   partial sums) and the stores are guarded.
//   grid (ceil(n/128), ceil(m/128)), block (256). fp8_gemm_tc<false> is the kernel; fp8_gemm_tc<true> runs
//   fp8_mma_model in place of the instruction (below).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k32", 8-bit types; lane = thread % 32,
// g = lane / 4, t = lane % 4; a 32-bit register holds 4 consecutive k elements, the lowest k in the low byte):
//   A (16 x 32, row):  a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] = A[g][16+4t..], a[3] = A[g+8][16+4t..]
//   B (32 x 8, col):   b[0] = B[4t..4t+3][g], b[1] = B[16+4t..16+4t+3][g]
//   C/D (16 x 8, f32): d[0], d[1] = D[g][2t], D[g][2t+1];  d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
//
// fp8_mma_model is a warp-collective model of the instruction written from that table with shuffles only (the
// products are exact in float32; they are added to d in k order with float32 rounding): the host emulation runs
// it in place of the PTX (so the kernel's fragment loads and tile arithmetic are checked on the CPU: a wrong
// lane mapping gives wrong sums), and on a GPU fp8_gemm_tc<true> runs it too, to tell a fault of the layout table
// from a fault of the kernel's use of it.

#define FP8_TC_TILE 128
#define FP8_TC_PITCH 144                                           // bytes per shared-memory row (128 + 16)

__device__ __forceinline__ float fp8_byte(unsigned word, int k, int e5m2) {
    return fp8_decode((unsigned char)(word >> (8 * (k & 3))), e5m2);
}

// d += A B from the fragments of the 32 lanes, following the layout table above
__device__ void fp8_mma_model(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], int lane, int a_e5m2,
                              int b_e5m2) {
    const int g = lane >> 2, t = lane & 3;
    unsigned arow[2][8];        // rows g and g + 8 of A: word w holds k = 4w .. 4w + 3
    unsigned bcol[2][8];        // columns 2t and 2t + 1 of B, likewise
    for (int q = 0; q < 4; ++q) {
        for (int r = 0; r < 4; ++r) {   // lane 4g + q's a[r]: row g + 8 (r & 1), k = 16 (r >> 1) + 4q
            arow[r & 1][4 * (r >> 1) + q] = __shfl_sync(0xFFFFFFFFu, a[r], 4 * g + q);
        }
        for (int r = 0; r < 2; ++r) {   // lane 4c + q's b[r]: column c, k = 16r + 4q
            for (int c = 0; c < 2; ++c) bcol[c][4 * r + q] = __shfl_sync(0xFFFFFFFFu, b[r], 4 * (2 * t + c) + q);
        }
    }
    for (int i = 0; i < 4; ++i) {
        float acc = d[i];
        for (int k = 0; k < 32; ++k) {
            acc += fp8_byte(arow[i >> 1][k >> 2], k, a_e5m2) * fp8_byte(bcol[i & 1][k >> 2], k, b_e5m2);
        }
        d[i] = acc;
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_TC_MMA(AT, BT)                                                                                      \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." AT "." BT ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "       \
                 "{%8,%9}, {%0,%1,%2,%3};"                                                                      \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
#endif

// d += A B for one 16 x 8 x 32 step: the tensor-core instruction on sm_89+, the model elsewhere (or when asked;
// a template argument, so that the instruction's instantiation keeps its accumulators in registers)
template <bool Model>
__device__ __forceinline__ void fp8_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], int lane,
                                        int a_e5m2, int b_e5m2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if (!Model) {                   // the formats are uniform over the grid: no divergence
        if (!a_e5m2 && !b_e5m2) FP8_TC_MMA("e4m3", "e4m3");
        else if (!a_e5m2) FP8_TC_MMA("e4m3", "e5m2");
        else if (!b_e5m2) FP8_TC_MMA("e5m2", "e4m3");
        else FP8_TC_MMA("e5m2", "e5m2");
        return;
    }
#endif
    fp8_mma_model(d, a, b, lane, a_e5m2, b_e5m2);
}

// 16-byte chunk c (of 1024) of a 128 x 128 byte tile: row c / 8, bytes 16 (c % 8) ..
__device__ __forceinline__ uint4 fp8_tc_fetch(const unsigned char* __restrict__ x, long long rows, long long k,
                                              long long r0, long long k0, int c) {
    const long long row = r0 + c / 8, col = k0 + 16 * (c % 8);
    if (row >= rows || col >= k) return make_uint4(0u, 0u, 0u, 0u);   // k % 16 == 0: a chunk is in or out
    return *reinterpret_cast<const uint4*>(x + row * k + col);
}

// the byte path: the whole tile, zero beyond the edges
__device__ __forceinline__ void fp8_tc_copy_bytes(unsigned char* tile, const unsigned char* __restrict__ x,
                                                  long long rows, long long k, long long r0, long long k0) {
    for (int i = (int)threadIdx.x; i < FP8_TC_TILE * FP8_TC_TILE; i += (int)blockDim.x) {
        const long long row = r0 + i / FP8_TC_TILE, col = k0 + i % FP8_TC_TILE;
        tile[(i / FP8_TC_TILE) * FP8_TC_PITCH + i % FP8_TC_TILE] = row < rows && col < k ? x[row * k + col] : 0;
    }
}

__device__ __forceinline__ unsigned fp8_tc_word(const unsigned char* tile, int row, int col) {
    return *reinterpret_cast<const unsigned*>(tile + row * FP8_TC_PITCH + col);
}

template <bool Model>
__global__ void __launch_bounds__(256) fp8_gemm_tc(const unsigned char* __restrict__ a,
                                                   const float* __restrict__ a_scale,
                                                   const unsigned char* __restrict__ b,
                                                   const float* __restrict__ b_scale, float* __restrict__ out,
                                                   long long m, long long n, long long k, int a_e5m2,
                                                   int b_e5m2) {
    __shared__ __align__(16) unsigned char tile_a[FP8_TC_TILE * FP8_TC_PITCH];
    __shared__ __align__(16) unsigned char tile_b[FP8_TC_TILE * FP8_TC_PITCH];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;           // the warp's sub-tile in the block's tile
    const long long m0 = (long long)blockIdx.y * FP8_TC_TILE, n0 = (long long)blockIdx.x * FP8_TC_TILE;
    const long long slices = (k + FP8_TC_TILE - 1) / FP8_TC_TILE;
    const bool vec = k % 16 == 0 && (reinterpret_cast<unsigned long long>(a) & 15u) == 0 &&
                     (reinterpret_cast<unsigned long long>(b) & 15u) == 0;

    float acc[4][4][4], part[4][4][4];                            // [m tile][n tile][fragment]
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    uint4 next_a[4], next_b[4];                                   // the vector path's next slice, in flight
    if (vec) {
        for (int i = 0; i < 4; ++i) {
            next_a[i] = fp8_tc_fetch(a, m, k, m0, 0, tid + 256 * i);
            next_b[i] = fp8_tc_fetch(b, n, k, n0, 0, tid + 256 * i);
        }
    }
    for (long long s = 0; s < slices; ++s) {
        const long long k0 = s * FP8_TC_TILE;
        __syncthreads();                                          // the previous slice's readers are done
        if (vec) {
            for (int i = 0; i < 4; ++i) {
                const int c = tid + 256 * i, at = (c / 8) * FP8_TC_PITCH + 16 * (c % 8);
                *reinterpret_cast<uint4*>(tile_a + at) = next_a[i];
                *reinterpret_cast<uint4*>(tile_b + at) = next_b[i];
            }
            if (s + 1 < slices) {
                for (int i = 0; i < 4; ++i) {
                    next_a[i] = fp8_tc_fetch(a, m, k, m0, k0 + FP8_TC_TILE, tid + 256 * i);
                    next_b[i] = fp8_tc_fetch(b, n, k, n0, k0 + FP8_TC_TILE, tid + 256 * i);
                }
            }
        } else {
            fp8_tc_copy_bytes(tile_a, a, m, k, m0, k0);
            fp8_tc_copy_bytes(tile_b, b, n, k, n0, k0);
        }
        __syncthreads();
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
                for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
        for (int kk = 0; kk < FP8_TC_TILE; kk += 32) {
            unsigned fa[4][4], fb[4][2];
            for (int i = 0; i < 4; ++i) {
                const int row = wm + 16 * i + g;
                fa[i][0] = fp8_tc_word(tile_a, row, kk + 4 * t);
                fa[i][1] = fp8_tc_word(tile_a, row + 8, kk + 4 * t);
                fa[i][2] = fp8_tc_word(tile_a, row, kk + 16 + 4 * t);
                fa[i][3] = fp8_tc_word(tile_a, row + 8, kk + 16 + 4 * t);
            }
            for (int j = 0; j < 4; ++j) {
                const int col = wn + 8 * j + g;                   // B[k][col] = b[col, k]: a row of tile_b
                fb[j][0] = fp8_tc_word(tile_b, col, kk + 4 * t);
                fb[j][1] = fp8_tc_word(tile_b, col, kk + 16 + 4 * t);
            }
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) fp8_mma<Model>(part[i][j], fa[i], fb[j], lane, a_e5m2, b_e5m2);
        }
        // promotion: the slice's partial sums, scaled by its two decode scales, join the float32 accumulator
        float sa[4][2], sb[4][2];
        for (int i = 0; i < 4; ++i) {
            for (int h = 0; h < 2; ++h) {
                const long long row = m0 + wm + 16 * i + g + 8 * h;
                const long long col = n0 + wn + 8 * i + 2 * t + h;
                sa[i][h] = row < m ? a_scale[row * slices + s] : 0.0f;
                sb[i][h] = col < n ? b_scale[col * slices + s] : 0.0f;
            }
        }
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
                for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e] * (sa[i][e >> 1] * sb[j][e & 1]);
    }
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
            for (int e = 0; e < 4; ++e) {
                const long long row = m0 + wm + 16 * i + g + 8 * (e >> 1);
                const long long col = n0 + wn + 8 * j + 2 * t + (e & 1);
                if (row < m && col < n) out[row * n + col] = acc[i][j][e];
            }
        }
    }
}

// One warp, one MMA: lane l's fragments a[l][0..3], b[l][0..2], c[l][0..4] from global memory, d = c + A B back
// (fp8_tc.py packs them from whole matrices by the layout table, in Python): a check of the table against the
// instruction on a GPU (fp8_mma_probe<false>) and against the model (<true>, and the host emulation).
template <bool Model>
__global__ void fp8_mma_probe(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
                              const float* __restrict__ c, float* __restrict__ d, int a_e5m2, int b_e5m2) {
    const int lane = (int)threadIdx.x & 31;
    const unsigned fa[4] = {a[4 * lane], a[4 * lane + 1], a[4 * lane + 2], a[4 * lane + 3]};
    const unsigned fb[2] = {b[2 * lane], b[2 * lane + 1]};
    float acc[4] = {c[4 * lane], c[4 * lane + 1], c[4 * lane + 2], c[4 * lane + 3]};
    fp8_mma<Model>(acc, fa, fb, lane, a_e5m2, b_e5m2);
    for (int i = 0; i < 4; ++i) d[4 * lane + i] = acc[i];
}
