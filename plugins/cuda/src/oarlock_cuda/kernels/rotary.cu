// rotary.cu: fused_rotary_embedding for oarlock's "gpu" device, one pass over x.
//   forward:   out[d] = x[d] cos[d] + x[p(d)] sin[d]
//   transpose: out[d] = x[d] cos[d] + x[p(d)] sin[p(d)]     (the gradient of x)
// with p(d) = d + D/2 on the first half of the last axis and d - D/2 on the second. x and out are
// contiguous; their leading axes are collapsed by the caller into three (n0, n1, n2) and cos and sin
// are addressed through element strides over (n0, n1, n2, D), 0 where they broadcast.
// ---- prelude (the same in every kernels/*.cu): self-contained, no #include, so NVRTC (cupy.RawModule)
// and nvcc compile the file alike. 16-bit floats are storage types converted to and from float32 by hand:
// IEEE half through PTX cvt (round to nearest even), bfloat16 by bits (round to nearest even, NaN kept).
// A host build (no __CUDACC__, used by the CPU emulation in the tests) converts half through _Float16.
struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

#define OARLOCK_NEG_INF __int_as_float(0xff800000)
#define OARLOCK_FULL_MASK 0xffffffffu

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(half_t v) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
#else
    _Float16 h;
    __builtin_memcpy(&h, &v.bits, 2);
    return (float)h;
#endif
}
__device__ __forceinline__ float to_f(bf16_t v) { return __uint_as_float(((unsigned int)v.bits) << 16); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ half_t from_f<half_t>(float v) {
    half_t h;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
#else
    _Float16 f = (_Float16)v;
    __builtin_memcpy(&h.bits, &f, 2);
#endif
    return h;
}
template <> __device__ __forceinline__ bf16_t from_f<bf16_t>(float v) {
    unsigned int u = __float_as_uint(v);
    bf16_t b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {          // NaN: keep the sign, make it quiet
        b.bits = (unsigned short)((u >> 16) | 0x40u);
    } else {                                         // round to nearest, ties to even
        b.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return b;
}
// ---- end of prelude

// The loop over the elements, with index arithmetic in I: 32-bit division is several times cheaper than
// 64-bit on the GPU, so the kernel picks unsigned int whenever x has fewer than 2^31 elements.
template <typename T, typename I>
__device__ __forceinline__ void rotary_loop(const T* __restrict__ x, const T* __restrict__ cosv,
                                            const T* __restrict__ sinv, T* __restrict__ out, I total, I n1, I n2,
                                            I d, long long c0, long long c1, long long c2, long long cd,
                                            long long s0, long long s1, long long s2, long long sd, int transpose) {
    const I half = d >> 1;
    const I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += stride) {
        const I k = i % d;
        I r = i / d;
        const I i2 = r % n2;
        r /= n2;
        const I i1 = r % n1;
        const I i0 = r / n1;
        const I p = k < half ? k + half : k - half;
        const long long cbase = (long long)i0 * c0 + (long long)i1 * c1 + (long long)i2 * c2;
        const long long sbase = (long long)i0 * s0 + (long long)i1 * s1 + (long long)i2 * s2;
        const float a = to_f(x[i]) * to_f(cosv[cbase + (long long)k * cd]);
        const float b = to_f(x[i - k + p]) * to_f(sinv[sbase + (long long)(transpose ? p : k) * sd]);
        out[i] = from_f<T>(a + b);
    }
}

template <typename T>
__global__ void rotary_fwd(const T* __restrict__ x, const T* __restrict__ cosv, const T* __restrict__ sinv,
                           T* __restrict__ out, long long total, long long n1, long long n2, long long d,
                           long long c0, long long c1, long long c2, long long cd,
                           long long s0, long long s1, long long s2, long long sd, int transpose) {
    if (total < 2147483648LL) {   // i + stride stays below 2^32
        rotary_loop<T, unsigned int>(x, cosv, sinv, out, (unsigned int)total, (unsigned int)n1, (unsigned int)n2,
                                     (unsigned int)d, c0, c1, c2, cd, s0, s1, s2, sd, transpose);
    } else {
        rotary_loop<T, long long>(x, cosv, sinv, out, total, n1, n2, d, c0, c1, c2, cd, s0, s1, s2, sd, transpose);
    }
}
