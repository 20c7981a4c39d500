// FP8 kernels of oarlock-incubate for device "gpu": blockwise float8 quantization (fp8_quant_blockwise's
// semantics: Paddle's ScaleWrapper, round to nearest even, satfinite) and the blockwise-scaled GEMM
// (fp8_gemm_blockwise's per-128-K promotion). Self-contained (no #include, NVRTC and the host emulation of
// oarlock-cuda's tests compile it alike); codes are bytes (the gpu device has no float8 arrays), inputs float32.
//
// fp8_quant_rows:  x [rows, cols] -> codes [rows, cols], decode scales [rows, ceil(cols/128)]; one warp per
//                  1 x 128 block, grid (ceil(cols/128), min(rows, 65535)), block (32).
// fp8_quant_tiles: x [rows, cols] -> codes, decode scales [ceil(rows/128), ceil(cols/128)]; one block of 256
//                  threads per 128 x 128 tile, grid (ceil(cols/128), ceil(rows/128)).
// fp8_gemm_rows:   out [m, n] = sum_j (sum_{k in block j} a[m, k] b[n, k]) * a_scale[m, j] * b_scale[n, j],
//                  float32, the sums in k order; one thread per output, block (16, 16). CUDA cores: the GEMM
//                  of GPUs below sm_89; fp8_tc.cu's fp8_gemm_tc (tensor cores) is the default from sm_89 on.

__device__ __forceinline__ float fp8_max_of(int e5m2) { return e5m2 ? 57344.0f : 448.0f; }

// float -> float8 code: round to nearest even; finite values beyond the largest and +-inf saturate; NaN -> 0x7F
__device__ __forceinline__ unsigned char fp8_encode(float v, int e5m2) {
    const unsigned sign = (__float_as_uint(v) >> 24) & 0x80u;
    const float a = fabsf(v);
    if (a != a) return (unsigned char)(sign | 0x7Fu);
    const unsigned top = e5m2 ? 0x7Bu : 0x7Eu;                  // the largest finite code
    if (a >= fp8_max_of(e5m2)) return (unsigned char)(sign | top);
    if (a < (e5m2 ? 0x1.0p-14f : 0x1.0p-6f)) {                   // subnormal: a multiple of the spacing
        return (unsigned char)(sign | (unsigned)rintf(a * (e5m2 ? 0x1.0p16f : 0x1.0p9f)));
    }
    const int mbits = e5m2 ? 2 : 3;
    const int bias = e5m2 ? 15 : 7;
    const unsigned drop = 23u - (unsigned)mbits;                  // float32 mantissa bits dropped
    const unsigned u = __float_as_uint(a);
    const unsigned r = (u + ((1u << (drop - 1u)) - 1u) + ((u >> drop) & 1u)) & ~((1u << drop) - 1u);
    const int exponent = (int)(r >> 23) - 127 + bias;            // a carry may have moved it up one binade
    const unsigned code = ((unsigned)exponent << mbits) | ((r >> drop) & ((1u << mbits) - 1u));
    return (unsigned char)(sign | (code < top ? code : top));
}

__device__ __forceinline__ float fp8_decode(unsigned char c, int e5m2) {
    const int mbits = e5m2 ? 2 : 3;
    const int bias = e5m2 ? 15 : 7;
    const unsigned mag = c & 0x7Fu;
    const unsigned e = mag >> mbits;
    const unsigned m = mag & ((1u << mbits) - 1u);
    float v;
    if ((!e5m2 && mag == 0x7Fu) || (e5m2 && e == 31u && m != 0u)) {
        v = __uint_as_float(0x7FC00000u);
    } else if (e5m2 && e == 31u) {
        v = __uint_as_float(0x7F800000u);
    } else if (e == 0u) {
        v = ldexpf((float)m, 1 - bias - mbits);
    } else {
        v = ldexpf((float)(m + (1u << mbits)), (int)e - bias - mbits);
    }
    return (c & 0x80u) ? -v : v;
}

// Paddle's ScaleWrapper: the multiplier mapping a block of maximum `amax` onto the format
__device__ __forceinline__ float fp8_scale(float amax, float eps, int pow2, int e5m2) {
    const float a = fmaxf(amax, eps);
    if (a == 0.0f) return 1.0f;
    const float s = fp8_max_of(e5m2) / a;
    if (isinf(s)) return pow2 ? 0x1.0p127f : 0x1.FEp127f;
    if (s == 0.0f || !pow2) return s;
    return __uint_as_float(__float_as_uint(s) & 0xFF800000u);    // round down to a power of two
}

__device__ __forceinline__ float fp8_warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

__global__ void fp8_quant_rows(const float* __restrict__ x, unsigned char* __restrict__ q,
                               float* __restrict__ decode, long long rows, long long cols, float eps, int pow2,
                               int e5m2) {
    const long long blocks_per_row = (cols + 127) / 128;
    const long long first = (long long)blockIdx.x * 128;
    const long long left = cols - first;
    const int width = left < 128 ? (int)left : 128;
    const int lane = (int)threadIdx.x;
    for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
        const long long base = row * cols + first;
        float amax = 0.0f;                                        // fmaxf ignores NaN, as the block maximum must
        for (int i = lane; i < width; i += 32) amax = fmaxf(amax, fabsf(x[base + i]));
        const float s = fp8_scale(fp8_warp_max(amax), eps, pow2, e5m2);
        for (int i = lane; i < width; i += 32) q[base + i] = fp8_encode(x[base + i] * s, e5m2);
        if (lane == 0) decode[row * blocks_per_row + blockIdx.x] = 1.0f / s;
    }
}

__global__ void fp8_quant_tiles(const float* __restrict__ x, unsigned char* __restrict__ q,
                                float* __restrict__ decode, long long rows, long long cols, float eps, int pow2,
                                int e5m2) {
    __shared__ float warp_max[8];
    __shared__ float tile_scale;
    const long long r0 = (long long)blockIdx.y * 128;
    const long long c0 = (long long)blockIdx.x * 128;
    const int nr = rows - r0 < 128 ? (int)(rows - r0) : 128;
    const int nc = cols - c0 < 128 ? (int)(cols - c0) : 128;
    const int lane = (int)threadIdx.x % 32;
    const int warp = (int)threadIdx.x / 32;
    float amax = 0.0f;
    for (int i = (int)threadIdx.x; i < nr * nc; i += (int)blockDim.x) {
        amax = fmaxf(amax, fabsf(x[(r0 + i / nc) * cols + c0 + i % nc]));
    }
    amax = fp8_warp_max(amax);
    if (lane == 0) warp_max[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        const float tile_max = fp8_warp_max(lane < (int)blockDim.x / 32 ? warp_max[lane] : 0.0f);
        if (lane == 0) tile_scale = fp8_scale(tile_max, eps, pow2, e5m2);
    }
    __syncthreads();
    const float s = tile_scale;
    for (int i = (int)threadIdx.x; i < nr * nc; i += (int)blockDim.x) {
        const long long at = (r0 + i / nc) * cols + c0 + i % nc;
        q[at] = fp8_encode(x[at] * s, e5m2);
    }
    if (threadIdx.x == 0) decode[(long long)blockIdx.y * gridDim.x + blockIdx.x] = 1.0f / s;
}

__global__ void fp8_gemm_rows(const unsigned char* __restrict__ a, const float* __restrict__ a_scale,
                              const unsigned char* __restrict__ b, const float* __restrict__ b_scale,
                              float* __restrict__ out, long long m, long long n, long long k, int a_e5m2,
                              int b_e5m2) {
    const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
    const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
    if (row >= m || col >= n) return;
    const long long blocks = (k + 127) / 128;
    float acc = 0.0f;
    for (long long j = 0; j < blocks; ++j) {
        const long long end = (j + 1) * 128 < k ? (j + 1) * 128 : k;
        float partial = 0.0f;                                     // exact products, float32 sums in k order
        for (long long t = j * 128; t < end; ++t) {
            partial += fp8_decode(a[row * k + t], a_e5m2) * fp8_decode(b[col * k + t], b_e5m2);
        }
        acc += partial * (a_scale[row * blocks + j] * b_scale[col * blocks + j]);
    }
    out[row * n + col] = acc;
}
