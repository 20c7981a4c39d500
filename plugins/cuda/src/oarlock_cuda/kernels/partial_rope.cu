// partial_rope.cu: Paddle's fused_partial_rope for oarlock's "gpu" device (oarlock-incubate's
// fused_partial_rope_op; the semantics and the generic kernel are in oarlock_incubate.fused_rope_partial).
// One thread per output number, grid-stride: the first nope = head_dim - pe numbers of a head are copied; output
// i of the pe part (h = pe / 2) reads the de-interleaved input q[i] = p[2i] (i < h) or p[2(i - h) + 1]:
//   forward:   out[i] = q[i] cos[i] - q[i + h] sin[i] (i < h),  q[i] cos[i] + q[i - h] sin[i] (i >= h)
//   transpose: r[i] = g[i] cos[i] + g[i + h] sin[i + h],  r[i + h] = g[i + h] cos[i + h] - g[i] sin[i],
//              stored re-interleaved: out[2i] = r[i], out[2i + 1] = r[i + h]
// cos / sin are [seq, pe] rows ([1, seq, 1, pe] in the op); float32 arithmetic, one rounding.
// (kernels/prelude.cuh is prepended by fused.source)

template <typename T>
__global__ void partial_rope_fwd(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                                 T* __restrict__ out, long long n, long long seq, long long heads, int head_dim,
                                 int pe, int transpose) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const int nope = head_dim - pe;
    const int h = pe / 2;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        const long long row = idx / head_dim;            // (batch, seq, head)
        const int col = (int)(idx - row * head_dim);
        if (col < nope) {
            out[idx] = x[idx];
            continue;
        }
        const T* p = x + row * head_dim + nope;
        const long long t = (row / heads) % seq;
        const T* c = cos + t * pe;
        const T* s = sin + t * pe;
        const int i = col - nope;
        float v;
        if (!transpose) {
            const float qi = to_f(p[i < h ? 2 * i : 2 * (i - h) + 1]);
            const float qo = to_f(p[i < h ? 2 * i + 1 : 2 * (i - h)]);   // q[i + h] below h, q[i - h] above
            v = i < h ? qi * to_f(c[i]) - qo * to_f(s[i]) : qi * to_f(c[i]) + qo * to_f(s[i]);
        } else {
            const int j = i / 2;                          // out[2j] = r[j], out[2j + 1] = r[j + h]
            if (i % 2 == 0) v = to_f(p[j]) * to_f(c[j]) + to_f(p[j + h]) * to_f(s[j + h]);
            else v = to_f(p[j + h]) * to_f(c[j + h]) - to_f(p[j]) * to_f(s[j]);
        }
        out[idx] = from_f<T>(v);
    }
}
