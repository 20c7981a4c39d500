// activation.cu: gelu for oarlock's "gpu" device, exact (erf) and tanh forms, float32 arithmetic for every
// input type. Grid-stride loop over n elements.
//   exact: x * Phi(x), Phi from erfc so the negative tail keeps its digits: h = erfc(|x| / sqrt 2) / 2,
//          Phi = 1 - h for x >= 0, h otherwise (the generic kernel's formula and order);
//   tanh:  0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
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

template <typename T>
__global__ void gelu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n, int use_tanh) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = to_f(x[i]);
        float out;
        if (use_tanh) {
            const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            out = 0.5f * v * (1.0f + tanhf(inner));
        } else {
            const float h = 0.5f * erfcf(fabsf(v) / 1.4142135623730951f);
            float phi = h * -2.0f + 1.0f;
            phi = v >= 0.0f ? phi : 0.0f;
            out = (phi + h) * v;
        }
        y[i] = from_f<T>(out);
    }
}
