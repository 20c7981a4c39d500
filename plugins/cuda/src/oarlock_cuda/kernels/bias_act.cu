// bias_act.cu: Paddle's fused_bias_act (no quantisation) for oarlock's "gpu" device (oarlock-incubate's
// fused_bias_act_op; the generic kernel is in oarlock_incubate.fused_act). One thread per output number,
// grid-stride, float32 arithmetic, one rounding; h = x + bias (bias over the last axis, optional):
//   act 0 gelu:   h Phi(h), Phi from erfc as in activation.cu;   act 1 relu: max(h, 0);
//   act 2 swiglu: silu(a) b;   act 3 geglu: gelu(a) b,   a, b = the two halves of the last axis of h.
// (kernels/prelude.cuh is prepended by fused.source)

__device__ __forceinline__ float bias_act_gelu(float v) {
    const float h = 0.5f * erfcf(fabsf(v) / 1.4142135623730951f);
    float phi = h * -2.0f + 1.0f;
    phi = v >= 0.0f ? phi : 0.0f;
    return (phi + h) * v;
}

template <typename T>
__global__ void bias_act_fwd(const T* __restrict__ x, const T* __restrict__ bias, int has_bias, T* __restrict__ y,
                             long long n, long long out_cols, int act) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const int gated = act >= 2;
    const long long in_cols = gated ? 2 * out_cols : out_cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long r = i / out_cols;
        const long long c = i - r * out_cols;
        float a = to_f(x[r * in_cols + c]);
        if (has_bias) a = a + to_f(bias[c]);
        float out;
        if (act == 0) {
            out = bias_act_gelu(a);
        } else if (act == 1) {
            out = a > 0.0f ? a : 0.0f;
        } else {
            float b = to_f(x[r * in_cols + c + out_cols]);
            if (has_bias) b = b + to_f(bias[c + out_cols]);
            const float gate = act == 2 ? a / (1.0f + expf(-a)) : bias_act_gelu(a);
            out = gate * b;
        }
        y[i] = from_f<T>(out);
    }
}
