// softmax.cu: row-wise softmax, log_softmax and the fused cross-entropy forward of oarlock's "gpu" device.
//
// One block per row (blockDim.x a power of two from 32 to 1024, every thread taking part in the
// reductions). Pass 1 keeps an online (max, sum of exp(x - max)) pair per thread, merged across the warp
// with shuffles and across warps through shared memory; pass 2 writes the row. float32 accumulation for
// every input type; rows longer than the block loop. A row of -inf gives NaN, like the generic kernels
// (exp(x - max) with max = -inf).
// (kernels/prelude.cuh is prepended by fused.source)

// (m, s): running maximum and sum of exp(x - m). -inf entries add nothing; NaN propagates through s.
__device__ __forceinline__ void ms_add(float& m, float& s, float v) {
    if (v > m) {
        s = (m == OARLOCK_NEG_INF ? 0.0f : s * expf(m - v)) + 1.0f;
        m = v;
    } else if (v != OARLOCK_NEG_INF) {
        s += expf(v - m);
    }
}

__device__ __forceinline__ void ms_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == OARLOCK_NEG_INF) {                     // both empty so far
        s += s2;
        return;
    }
    float a = (m == OARLOCK_NEG_INF) ? 0.0f : s * expf(m - mn);
    float b = (m2 == OARLOCK_NEG_INF) ? 0.0f : s2 * expf(m2 - mn);
    s = a + b;
    m = mn;
}

// The block's (max, sum) in every thread; sh holds 64 floats.
__device__ __forceinline__ void block_max_sum(float& m, float& s, float* sh) {
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(OARLOCK_FULL_MASK, m, o);
        float s2 = __shfl_xor_sync(OARLOCK_FULL_MASK, s, o);
        ms_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
        sh[warp] = m;
        sh[32 + warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? sh[lane] : OARLOCK_NEG_INF;
        s = lane < warps ? sh[32 + lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(OARLOCK_FULL_MASK, m, o);
            float s2 = __shfl_xor_sync(OARLOCK_FULL_MASK, s, o);
            ms_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            sh[0] = m;
            sh[32] = s;
        }
    }
    __syncthreads();
    m = sh[0];
    s = sh[32];
}

template <typename T>
__device__ __forceinline__ void row_max_sum(const T* __restrict__ xr, long long n, float& m, float& s, float* sh) {
    m = OARLOCK_NEG_INF;
    s = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) ms_add(m, s, to_f(xr[i]));
    block_max_sum(m, s, sh);
}

// y = exp(x - max) / sum(exp(x - max)) along rows of n.
template <typename T>
__global__ void softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
    __shared__ float sh[64];
    const T* xr = x + (long long)blockIdx.x * n;
    T* yr = y + (long long)blockIdx.x * n;
    float m, s;
    row_max_sum(xr, n, m, s, sh);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f<T>(expf(to_f(xr[i]) - m) / s);
}

// y = (x - max) - log(sum(exp(x - max))) along rows of n.
template <typename T>
__global__ void log_softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
    __shared__ float sh[64];
    const T* xr = x + (long long)blockIdx.x * n;
    T* yr = y + (long long)blockIdx.x * n;
    float m, s;
    row_max_sum(xr, n, m, s, sh);
    const float log_s = logf(s);
    for (long long i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f<T>((to_f(xr[i]) - m) - log_s);
}

// Hard-label softmax cross entropy, one row (n classes) per block: loss[row] = -(log_softmax(x)[label]) * w
// with w = weight[label] (1 without a weight), scale[row] = w; both 0 where label == ignore_index. A label
// outside [0, n) (and not ignore_index) leaves loss and scale 0 and lowers *bad to the row's index, so
// the caller finds the first bad row with one read (start *bad at ~0).
template <typename T, typename L>
__global__ void cross_entropy_fwd(const T* __restrict__ x, const L* __restrict__ label, const T* __restrict__ weight,
                                  int has_weight, long long n, long long ignore_index, float* __restrict__ loss,
                                  float* __restrict__ scale, unsigned long long* bad) {
    __shared__ float sh[64];
    const long long row = blockIdx.x;
    const T* xr = x + row * n;
    float m, s;
    row_max_sum(xr, n, m, s, sh);
    if (threadIdx.x == 0) {
        const long long l = (long long)label[row];
        float value = 0.0f, w = 0.0f;
        if (l != ignore_index) {
            if (l < 0 || l >= n) {
                atomicMin(bad, (unsigned long long)row);
            } else {
                w = has_weight ? to_f(weight[l]) : 1.0f;
                const float log_p = (to_f(xr[l]) - m) - logf(s);
                value = 0.0f - log_p * w;
            }
        }
        loss[row] = value;
        scale[row] = w;
    }
}
