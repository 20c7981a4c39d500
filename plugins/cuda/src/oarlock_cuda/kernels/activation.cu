// activation.cu: gelu for oarlock's "gpu" device, exact (erf) and tanh forms, float32 arithmetic for every
// input type. Grid-stride loop over n elements.
//   exact: x * Phi(x), Phi from erfc so the negative tail keeps its digits: h = erfc(|x| / sqrt 2) / 2,
//          Phi = 1 - h for x >= 0, h otherwise (the generic kernel's formula and order);
//   tanh:  0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
// (kernels/prelude.cuh is prepended by fused.source)

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
