// dropout.cu: dropout forward for oarlock's "gpu" device: out = x * mask and the mask itself in one pass.
// Element i is kept when u_i >= p, u_i = (z_i >> 40) * 2^-24 in [0, 1) (a float32 uniform, the generic
// kernel's comparison), z_i = SplitMix64 of key + (i + 1) * golden: a counter-based hash, so every element
// is independent of the launch shape and the caller only draws `key` from the device generator. The mask
// holds `scale` (1 / (1 - p) rounded to the input type, or 1 for downscale_in_infer) where kept, 0 elsewhere.
// (kernels/prelude.cuh is prepended by fused.source)

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long key, unsigned long long i) {
    unsigned long long z = key + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

template <typename T>
__global__ void dropout_fwd(const T* __restrict__ x, T* __restrict__ out, T* __restrict__ mask, long long n,
                            unsigned long long key, float p, float scale) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float u = (float)(splitmix64(key, (unsigned long long)i) >> 40) * 5.9604644775390625e-08f;
        const float m = u >= p ? scale : 0.0f;
        mask[i] = from_f<T>(m);
        out[i] = from_f<T>(to_f(x[i]) * m);
    }
}
