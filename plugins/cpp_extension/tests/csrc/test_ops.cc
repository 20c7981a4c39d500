// Custom operators used by the tests, written as Paddle users write them (paddle/extension.h only).
#include <cmath>
#include <string>
#include <vector>

#include "paddle/extension.h"

// softplus(beta * x) / beta, with its gradient and second gradient in C++
template <typename data_t>
void softplus_kernel(const data_t* x, data_t* out, int64_t n, float beta) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::log1p(std::exp(beta * x[i])) / beta;
}

std::vector<paddle::Tensor> SoftplusForward(const paddle::Tensor& x, float beta) {
  PD_CHECK(beta > 0, "beta must be positive, got ", beta);
  auto out = paddle::empty_like(x);
  PD_DISPATCH_FLOATING_TYPES(x.type(), "softplus_forward", ([&] {
    softplus_kernel<data_t>(x.data<data_t>(), out.data<data_t>(), x.numel(), beta);
  }));
  return {out};
}

std::vector<paddle::Tensor> SoftplusBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out, float beta) {
  auto grad_x = paddle::empty(x.shape(), x.dtype(), x.place());
  PD_DISPATCH_FLOATING_TYPES(x.type(), "softplus_backward", ([&] {
    const data_t* xs = x.data<data_t>();
    const data_t* g = grad_out.data<data_t>();
    data_t* gx = grad_x.mutable_data<data_t>(x.place());
    for (int64_t i = 0; i < x.numel(); ++i) gx[i] = g[i] / (1 + std::exp(-beta * xs[i]));
  }));
  return {grad_x};
}

// the gradient op is gx = g * s(beta x): its gradients are ddg = ddx * s and dx = ddx * g * beta * s (1 - s)
std::vector<paddle::Tensor> SoftplusDoubleBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out,
                                                   const paddle::Tensor& ddx, float beta) {
  auto dx = paddle::empty_like(x);
  auto ddout = paddle::empty_like(x);
  PD_DISPATCH_FLOATING_TYPES(x.type(), "softplus_double_backward", ([&] {
    const data_t* xs = x.data<data_t>();
    const data_t* g = grad_out.data<data_t>();
    const data_t* dd = ddx.data<data_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      data_t s = 1 / (1 + std::exp(-beta * xs[i]));
      dx.data<data_t>()[i] = dd[i] * g[i] * beta * s * (1 - s);
      ddout.data<data_t>()[i] = dd[i] * s;
    }
  }));
  return {dx, ddout};
}

PD_BUILD_OP(test_softplus)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({"beta: float"})
    .SetKernelFn(PD_KERNEL(SoftplusForward));

PD_BUILD_GRAD_OP(test_softplus)
    .Inputs({"X", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .Attrs({"beta: float"})
    .SetKernelFn(PD_KERNEL(SoftplusBackward));

PD_BUILD_DOUBLE_GRAD_OP(test_softplus)
    .Inputs({"X", paddle::Grad("Out"), paddle::Grad(paddle::Grad("X"))})
    .Outputs({paddle::Grad("X"), paddle::Grad(paddle::Grad("Out"))})
    .Attrs({"beta: float"})
    .SetKernelFn(PD_KERNEL(SoftplusDoubleBackward));

// two inputs, two outputs: (x * y, x + y), written through Tensor* outputs (Paddle's "out" kernel form)
void MulAddForward(const paddle::Tensor& x, const paddle::Tensor& y, paddle::Tensor* prod, paddle::Tensor* sum) {
  PD_CHECK(x.shape() == y.shape(), "x and y must have one shape");
  prod->reshape(x.shape());
  sum->reshape(x.shape());
  PD_DISPATCH_FLOATING_TYPES(x.type(), "mul_add", ([&] {
    const data_t* a = x.data<data_t>();
    const data_t* b = y.data<data_t>();
    data_t* p = prod->mutable_data<data_t>(x.place());
    data_t* s = sum->mutable_data<data_t>(x.place());
    for (int64_t i = 0; i < x.numel(); ++i) {
      p[i] = a[i] * b[i];
      s[i] = a[i] + b[i];
    }
  }));
}

std::vector<paddle::Tensor> MulAddBackward(const paddle::Tensor& x, const paddle::Tensor& y,
                                           const paddle::Tensor& gprod, const paddle::Tensor& gsum) {
  return {gprod * y + gsum, gprod * x + gsum};
}

PD_BUILD_OP(test_mul_add)
    .Inputs({"X", "Y"})
    .Outputs({"Prod", "Sum"})
    .SetKernelFn(PD_KERNEL(MulAddForward));

PD_BUILD_GRAD_OP(test_mul_add)
    .Inputs({"X", "Y", paddle::Grad("Prod"), paddle::Grad("Sum")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Y")})
    .SetKernelFn(PD_KERNEL(MulAddBackward));

// a list input, an optional input and list/string/bool attributes: out = sum(xs) * scale[0] + scale[1] (+ bias)
std::vector<paddle::Tensor> CombineForward(const std::vector<paddle::Tensor>& xs, const paddle::optional<paddle::Tensor>& bias,
                                           const std::vector<double>& scale, const std::string& mode, bool negate,
                                           const std::vector<int64_t>& expect_shape) {
  PD_CHECK(mode == "sum", "mode must be \"sum\", got \"", mode, "\"");
  PD_CHECK(xs[0].shape() == expect_shape, "expect_shape differs from the first input's shape");
  auto out = paddle::zeros(xs[0].shape(), xs[0].dtype(), xs[0].place());
  PD_DISPATCH_FLOATING_TYPES(xs[0].type(), "combine", ([&] {
    data_t* o = out.data<data_t>();
    for (const auto& x : xs)
      for (int64_t i = 0; i < x.numel(); ++i) o[i] += x.data<data_t>()[i];
    for (int64_t i = 0; i < out.numel(); ++i) {
      o[i] = o[i] * scale[0] + scale[1] + (bias ? bias->data<data_t>()[i] : 0);
      if (negate) o[i] = -o[i];
    }
  }));
  return {out};
}

PD_BUILD_OP(test_combine)
    .Inputs({paddle::Vec("X"), paddle::Optional("Bias")})
    .Outputs({"Out"})
    .Attrs({"scale: std::vector<double>", "mode: std::string", "negate: bool", "expect_shape: std::vector<int64_t>"})
    .SetKernelFn(PD_KERNEL(CombineForward));

// returns its input as is (no copy), and a cube without a C++ gradient (tests give it a Python rule)
std::vector<paddle::Tensor> IdentityForward(const paddle::Tensor& x) { return {x}; }
PD_BUILD_OP(test_identity).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(IdentityForward));

std::vector<paddle::Tensor> CubeForward(const paddle::Tensor& x) { return {x * x * x}; }
PD_BUILD_OP(test_cube).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(CubeForward));

// in place: x *= factor, the call returns x; the gradient op scales the incoming gradient in place as well
void ScaleInplace(paddle::Tensor& x, float factor) {  // NOLINT: Paddle's in-place kernels take Tensor&
  PD_DISPATCH_FLOATING_TYPES(x.type(), "scale_inplace", ([&] {
    for (int64_t i = 0; i < x.numel(); ++i) x.data<data_t>()[i] *= factor;
  }));
}
PD_BUILD_OP(test_scale_inplace)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({"factor: float"})
    .SetInplaceMap({{"X", "Out"}})
    .SetKernelFn(PD_KERNEL(ScaleInplace));
PD_BUILD_GRAD_OP(test_scale_inplace)
    .Inputs({paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .Attrs({"factor: float"})
    .SetInplaceMap({{paddle::Grad("Out"), paddle::Grad("X")}})
    .SetKernelFn(PD_KERNEL(ScaleInplace));

// a vector output, which oarlock does not run yet: load() leaves the op out with a warning
PD_BUILD_OP(test_vector_out).Inputs({"X"}).Outputs({paddle::Vec("Out")}).SetKernelFn(PD_KERNEL(IdentityForward));
