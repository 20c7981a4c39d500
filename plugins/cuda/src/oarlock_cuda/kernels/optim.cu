// optim.cu: the Adam / AdamW step (adam_step_) for oarlock's "gpu" device, one elementwise pass updating
// param, moment1, moment2 (and moment2_max for amsgrad) in place.
//
// It replays the generic kernel's operations in its order, rounding to the array type after each one
// (a no-op for float32; numpy rounds 16-bit arithmetic the same way), with the hyperparameter constants
// rounded as numpy rounds a Python float meeting that type (by the caller), and the module is compiled with
// --fmad=false, so the step is the generic (numpy) kernel's to the bit. `weak` says how numpy treats a
// Python float with this type: rounded to it (NEP 50, float16), or the product promoted to float32
// (ml_dtypes' bfloat16; then the coupled weight decay term stays float32 as numpy keeps it):
//   decoupled: param *= 1 - lr wd            coupled: g = param * wd + g
//   m1 += (g - m1) (1 - beta1);  m2 = m2 beta2 + g g (1 - beta2);  [amsgrad: m2max = max(m2max, m2)]
//   param -= m1 / (sqrt(m2) + eps sqrt(1 - beta2^t)) * lr sqrt(1 - beta2^t) / (1 - beta1^t)
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
__device__ __forceinline__ float rnd(float v) { return to_f(from_f<T>(v)); }

template <typename T>
__global__ void adam_step(T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ moment1,
                          T* __restrict__ moment2, T* __restrict__ moment2_max, int has_max, long long n,
                          int decoupled, int has_decay, int weak, float decay, float weight_decay,
                          float one_minus_beta1,
                          float beta2, float one_minus_beta2, float eps_term, float step_size) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = to_f(param[i]), g = to_f(grad[i]), m1 = to_f(moment1[i]), m2 = to_f(moment2[i]);
        if (decoupled) {
            if (has_decay) p = rnd<T>(p * decay);
        } else if (has_decay) {
            g = weak ? rnd<T>(rnd<T>(p * weight_decay) + g) : p * weight_decay + g;
        }
        float t = rnd<T>(g - m1);
        t = rnd<T>(t * one_minus_beta1);
        m1 = rnd<T>(m1 + t);
        m2 = rnd<T>(m2 * beta2);
        t = rnd<T>(g * g);
        t = rnd<T>(t * one_minus_beta2);
        m2 = rnd<T>(m2 + t);
        float second = m2;
        if (has_max) {
            const float old = to_f(moment2_max[i]);
            second = (m2 > old || m2 != m2) ? m2 : old;   // numpy's maximum: NaN wins
            moment2_max[i] = from_f<T>(second);
        }
        t = rnd<T>(sqrtf(second));
        t = rnd<T>(t + eps_term);
        t = rnd<T>(m1 / t);
        t = rnd<T>(t * step_size);
        p = rnd<T>(p - t);
        param[i] = from_f<T>(p);
        moment1[i] = from_f<T>(m1);
        moment2[i] = from_f<T>(m2);
    }
}
