// moe.cu: Paddle's moe_gate_dispatch and moe_combine for oarlock's "gpu" device (the semantics are in
// oarlock_incubate.moe_dispatch / moe_combine; the generic kernels there are the reference).
//   moe_topk:      one thread per token: the k largest gate_logits + corr_bias (ties to the lower expert id),
//                  expert_id and combine_weights (the logits without the bias);
//   moe_rank:      one thread per expert, walking the slots in the stable sort order ((choice, token) with
//                  use_pad, else token * k + choice): each slot's rank within its expert and the expert's count;
//                  then thread 0 turns the counts into expert_offset (an inclusive cumulative sum). A counting
//                  sort needs no radix-sort workspace and gives the same order as Paddle's stable sort;
//   moe_scatter:   one block per slot: a slot ranked >= capacity is dropped (scatter_index 0, weight 0), else
//                  its row of y (e * capacity + rank padded, start of e + rank otherwise) gets x's token row;
//   moe_combine_fwd: y[s, h] = sum_j w[s, j] * x[index[s, j], h], float32 arithmetic, j in order;
//   moe_combine_bwd: one block per slot (s, j): dw[s, j] = sum_h g[s, h] x[index, h] (a tree sum in shared
//                  memory) and, for a non-zero weight, dx[index] = g[s] * w[s, j] -- the wrapper launches it only
//                  when no row of x is named by two live slots (else the generic kernel sums them).
// (kernels/prelude.cuh is prepended by fused.source)

__global__ void moe_topk(const float* __restrict__ gate, const float* __restrict__ bias, int has_bias,
                         int* __restrict__ expert_id, float* __restrict__ combine, long long rows, int experts,
                         int k) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < rows; s += stride) {
        const float* g = gate + s * experts;
        for (int j = 0; j < k; ++j) {
            int best = -1;
            float best_score = 0.0f;
            for (int e = 0; e < experts; ++e) {
                bool taken = false;
                for (int i = 0; i < j; ++i) taken = taken || expert_id[s * k + i] == e;
                if (taken) continue;
                const float score = has_bias ? g[e] + bias[e] : g[e];
                if (best < 0 || score > best_score) {   // strictly greater: ties keep the lower id
                    best = e;
                    best_score = score;
                }
            }
            expert_id[s * k + j] = best;
            combine[s * k + j] = g[best];
        }
    }
}

__global__ void moe_rank(const int* __restrict__ expert_id, long long* __restrict__ rank,
                         long long* __restrict__ counts, long long* __restrict__ offset, long long rows, int experts,
                         int k, int use_pad) {
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        long long n = 0;
        if (use_pad) {
            for (int j = 0; j < k; ++j)
                for (long long s = 0; s < rows; ++s)
                    if (expert_id[s * k + j] == e) rank[s * k + j] = n++;
        } else {
            for (long long slot = 0; slot < rows * k; ++slot)
                if (expert_id[slot] == e) rank[slot] = n++;
        }
        counts[e] = n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        long long total = 0;
        for (int e = 0; e < experts; ++e) {
            total += counts[e];
            offset[e] = total;
        }
    }
}

template <typename T>
__global__ void moe_scatter(const T* __restrict__ x, const int* __restrict__ expert_id,
                            const long long* __restrict__ rank, const long long* __restrict__ counts,
                            const long long* __restrict__ offset, T* __restrict__ y, int* __restrict__ scatter_index,
                            float* __restrict__ combine, long long rows, long long hidden, int k, long long capacity,
                            int use_pad) {
    for (long long slot = blockIdx.x; slot < rows * k; slot += gridDim.x) {
        const long long s = slot / k;
        const long long j = slot - s * k;
        const int e = expert_id[slot];
        const long long r = rank[slot];
        if (r >= capacity) {
            if (threadIdx.x == 0) {
                scatter_index[j * rows + s] = 0;
                combine[slot] = 0.0f;
            }
            continue;
        }
        const long long row = use_pad ? e * capacity + r : offset[e] - counts[e] + r;
        if (threadIdx.x == 0) scatter_index[j * rows + s] = (int)row;
        for (long long h = threadIdx.x; h < hidden; h += blockDim.x) y[row * hidden + h] = x[s * hidden + h];
    }
}

template <typename T>
__global__ void moe_combine_fwd(const T* __restrict__ x, const T* __restrict__ weights,
                                const int* __restrict__ index, T* __restrict__ y, long long rows, long long hidden,
                                int k) {
    const long long n = rows * hidden;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long s = i / hidden;
        const long long h = i - s * hidden;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const long long src = index[s * k + j];
            acc = acc + to_f(weights[s * k + j]) * to_f(x[src * hidden + h]);
        }
        y[i] = from_f<T>(acc);
    }
}

template <typename T>
__global__ void moe_combine_bwd(const T* __restrict__ x, const T* __restrict__ weights,
                                const int* __restrict__ index, const T* __restrict__ grad_y, T* __restrict__ dx,
                                T* __restrict__ dw, long long slots, long long hidden, int k) {
    __shared__ float partial[1024];
    for (long long slot = blockIdx.x; slot < slots; slot += gridDim.x) {
        const long long s = slot / k;
        const long long src = index[slot];
        const float w = to_f(weights[slot]);
        float acc = 0.0f;
        for (long long h = threadIdx.x; h < hidden; h += blockDim.x) {
            const float g = to_f(grad_y[s * hidden + h]);
            acc = acc + g * to_f(x[src * hidden + h]);
            if (w != 0.0f) dx[src * hidden + h] = from_f<T>(g * w);
        }
        partial[threadIdx.x] = acc;
        __syncthreads();
        for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) partial[threadIdx.x] = partial[threadIdx.x] + partial[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) dw[slot] = from_f<T>(partial[0]);
        __syncthreads();
    }
}
