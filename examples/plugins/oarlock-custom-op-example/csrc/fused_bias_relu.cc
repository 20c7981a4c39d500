// out = relu(x + bias), bias broadcast over the rows of x; its gradient in C++ (PD_BUILD_GRAD_OP).
#include <vector>

#include "paddle/extension.h"

std::vector<paddle::Tensor> FusedBiasReluForward(const paddle::Tensor& x, const paddle::Tensor& bias) {
  PD_CHECK(x.is_cpu(), "fused_bias_relu: only CPU tensors");
  PD_CHECK(bias.shape().size() == 1 && bias.shape()[0] == x.shape().back(),
           "fused_bias_relu: bias must be 1-D with the last dimension of x");
  auto out = paddle::empty_like(x);
  int64_t cols = bias.numel();
  PD_DISPATCH_FLOATING_TYPES(x.type(), "fused_bias_relu", ([&] {
    const data_t* xs = x.data<data_t>();
    const data_t* b = bias.data<data_t>();
    data_t* o = out.data<data_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      data_t v = xs[i] + b[i % cols];
      o[i] = v > 0 ? v : 0;
    }
  }));
  return {out};
}

std::vector<paddle::Tensor> FusedBiasReluBackward(const paddle::Tensor& out, const paddle::Tensor& grad_out,
                                                  const paddle::Tensor& bias) {
  auto grad_x = paddle::empty_like(out);
  auto grad_bias = paddle::zeros(bias.shape(), bias.dtype(), bias.place());
  int64_t cols = bias.numel();
  PD_DISPATCH_FLOATING_TYPES(out.type(), "fused_bias_relu_grad", ([&] {
    const data_t* o = out.data<data_t>();
    const data_t* g = grad_out.data<data_t>();
    data_t* gx = grad_x.data<data_t>();
    data_t* gb = grad_bias.data<data_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      gx[i] = o[i] > 0 ? g[i] : 0;
      gb[i % cols] += gx[i];
    }
  }));
  return {grad_x, grad_bias};
}

PD_BUILD_OP(fused_bias_relu)
    .Inputs({"X", "Bias"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(FusedBiasReluForward));

PD_BUILD_GRAD_OP(fused_bias_relu)
    .Inputs({"Out", paddle::Grad("Out"), "Bias"})
    .Outputs({paddle::Grad("X"), paddle::Grad("Bias")})
    .SetKernelFn(PD_KERNEL(FusedBiasReluBackward));
