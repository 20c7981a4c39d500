// norm.cu: layer_norm and rms_norm forward and their fused backward (_normalize_grad for a [rows, n] view
// normalised over n) for oarlock's "gpu" device.
//
// Forward: one block per row (blockDim.x a power of two from 32 to 1024); the statistics in float32 with
// the generic kernel's formulas (mean, then the mean of squared deviations: two passes, no cancellation;
// rstd = 1 / sqrt(var + eps)), then out = (x - mean) * rstd * weight + bias in that order. mean and rstd
// are written per row (float32), as the generic kernel returns them.
// Backward: dx one block per row (two row means, as the generic _normalize_grad), dweight and dbias by a
// column kernel that writes per-chunk partial sums [chunks, n] (summed by the caller).
// (kernels/prelude.cuh is prepended by fused.source)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(OARLOCK_FULL_MASK, v, o);
    return v;
}

// The block's sum in every thread; sh holds 32 floats. Safe to call back to back.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? sh[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

template <typename T>
__global__ void layer_norm_fwd(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                               int has_weight, int has_bias, long long n, float eps, T* __restrict__ y,
                               float* __restrict__ mean_out, float* __restrict__ rstd_out) {
    __shared__ float sh[32];
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    float acc = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += to_f(xr[i]);
    const float mean = block_sum(acc, sh) / (float)n;
    acc = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float d = to_f(xr[i]) - mean;
        acc += d * d;
    }
    const float var = block_sum(acc, sh) / (float)n;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        float h = (to_f(xr[i]) - mean) * rstd;
        if (has_weight) h = h * to_f(weight[i]);
        if (has_bias) h = h + to_f(bias[i]);
        yr[i] = from_f<T>(h);
    }
    if (threadIdx.x == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

template <typename T>
__global__ void rms_norm_fwd(const T* __restrict__ x, const T* __restrict__ weight, int has_weight, long long n,
                             float eps, T* __restrict__ y, float* __restrict__ rstd_out) {
    __shared__ float sh[32];
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    float acc = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = to_f(xr[i]);
        acc += v * v;
    }
    const float var = block_sum(acc, sh) / (float)n;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        float h = to_f(xr[i]) * rstd;
        if (has_weight) h = h * to_f(weight[i]);
        yr[i] = from_f<T>(h);
    }
    if (threadIdx.x == 0) rstd_out[row] = rstd;
}

// dx of out = xhat * weight (+ bias), xhat = (x - mean) * rstd (center) or x * rstd, over rows of n:
// gh = g * weight; dx = (gh - xhat * mean(gh * xhat) - mean(gh) [center only]) * rstd.
template <typename T>
__global__ void norm_bwd_rows(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ g,
                              const float* __restrict__ mean, const float* __restrict__ rstd, int has_weight,
                              int center, long long n, T* __restrict__ dx) {
    __shared__ float sh[32];
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    const T* gr = g + row * n;
    T* dr = dx + row * n;
    const float mu = center ? mean[row] : 0.0f, r = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float xh = center ? (to_f(xr[i]) - mu) * r : to_f(xr[i]) * r;
        const float gh = has_weight ? to_f(gr[i]) * to_f(weight[i]) : to_f(gr[i]);
        a += gh * xh;
        b += gh;
    }
    const float mean_ghx = block_sum(a, sh) / (float)n;
    const float mean_gh = block_sum(b, sh) / (float)n;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float xh = center ? (to_f(xr[i]) - mu) * r : to_f(xr[i]) * r;
        const float gh = has_weight ? to_f(gr[i]) * to_f(weight[i]) : to_f(gr[i]);
        float d = gh - xh * mean_ghx;
        if (center) d = d - mean_gh;
        dr[i] = from_f<T>(d * r);
    }
}

// Partial column sums of g * xhat (dweight) and g (dbias): block (32, 8) covers 32 columns; blockIdx.y is
// a chunk of rows_per_chunk rows; the partials go to dw_part / db_part [gridDim.y, n].
template <typename T>
__global__ void norm_bwd_cols(const T* __restrict__ x, const T* __restrict__ g, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int center, long long rows, long long n,
                              long long rows_per_chunk, float* __restrict__ dw_part, float* __restrict__ db_part) {
    __shared__ float sw[8][33];
    __shared__ float sb[8][33];
    const long long col = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long r0 = (long long)blockIdx.y * rows_per_chunk;
    const long long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float aw = 0.0f, ab = 0.0f;
    if (col < n) {
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) {
            const float gv = to_f(g[r * n + col]);
            const float xv = to_f(x[r * n + col]);
            const float xh = center ? (xv - mean[r]) * rstd[r] : xv * rstd[r];
            aw += gv * xh;
            ab += gv;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < n) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 8; ++k) {
            tw += sw[k][threadIdx.x];
            tb += sb[k][threadIdx.x];
        }
        dw_part[(long long)blockIdx.y * n + col] = tw;
        db_part[(long long)blockIdx.y * n + col] = tb;
    }
}
