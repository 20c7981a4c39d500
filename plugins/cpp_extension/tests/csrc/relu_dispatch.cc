// The host half of the CUDA test op: PD_BUILD_OP and a dispatch on the tensor's place (Paddle's pattern).
#include "paddle/extension.h"

std::vector<paddle::Tensor> relu_cuda_forward(const paddle::Tensor& x);

std::vector<paddle::Tensor> ReluForward(const paddle::Tensor& x) {
  if (x.is_gpu()) return relu_cuda_forward(x);
  auto out = paddle::empty_like(x);
  PD_DISPATCH_FLOATING_TYPES(x.type(), "relu_cpu_forward", ([&] {
    for (int64_t i = 0; i < x.numel(); ++i) out.data<data_t>()[i] = x.data<data_t>()[i] > 0 ? x.data<data_t>()[i] : 0;
  }));
  return {out};
}

PD_BUILD_OP(test_relu_cuda).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(ReluForward));
