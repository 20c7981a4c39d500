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
// (kernels/prelude.cuh is prepended by fused.source)

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
