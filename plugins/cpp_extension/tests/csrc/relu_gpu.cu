// A CUDA custom operator in Paddle's style (paddle/extension.h, a __global__ kernel, PD_DISPATCH). Compiled by
// the tests with nvcc where nvcc exists; running it needs a GPU.
#include "paddle/extension.h"

template <typename data_t>
__global__ void relu_cuda_forward_kernel(const data_t* x, data_t* y, int64_t num) {
  int64_t gid = blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t i = gid; i < num; i += blockDim.x * gridDim.x) y[i] = x[i] > static_cast<data_t>(0.) ? x[i] : 0;
}

std::vector<paddle::Tensor> relu_cuda_forward(const paddle::Tensor& x) {
  auto out = paddle::empty_like(x);
  int64_t numel = x.numel();
  int block = 512;
  int grid = static_cast<int>((numel + block - 1) / block);
  PD_DISPATCH_FLOATING_TYPES(x.type(), "relu_cuda_forward_kernel", ([&] {
    relu_cuda_forward_kernel<data_t><<<grid, block>>>(x.data<data_t>(), out.mutable_data<data_t>(x.place()), numel);
  }));
  return {out};
}
