// rotary.cu: fused_rotary_embedding for oarlock's "gpu" device, one pass over x.
//   forward:   out[d] = x[d] cos[d] + x[p(d)] sin[d]
//   transpose: out[d] = x[d] cos[d] + x[p(d)] sin[p(d)]     (the gradient of x)
// with p(d) = d + D/2 on the first half of the last axis and d - D/2 on the second. x and out are
// contiguous; their leading axes are collapsed by the caller into three (n0, n1, n2) and cos and sin
// are addressed through element strides over (n0, n1, n2, D), 0 where they broadcast.
// (kernels/prelude.cuh is prepended by fused.source)

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
