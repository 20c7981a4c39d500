// Elementwise arithmetic on paddle::Tensor (x + y, x * 2, ...) as Paddle's custom-op API has it, for host
// tensors of one shape (or a tensor and a scalar). Kernels needing more call their own loops.
#pragma once

#include "paddle/ext/dispatch.h"
#include "paddle/ext/tensor.h"

namespace paddle {
namespace ext_detail {

template <typename F>
Tensor elementwise(const Tensor& x, const Tensor& y, const char* what, F f) {
  if (!x.is_cpu() || !y.is_cpu()) PD_THROW("paddle::Tensor ", what, ": oarlock's header computes it on CPU only");
  if (x.shape() != y.shape() || x.dtype() != y.dtype())
    PD_THROW("paddle::Tensor ", what, ": operands must have one shape and dtype, got ", DataTypeName(x.dtype()),
             " and ", DataTypeName(y.dtype()));
  Tensor out = empty(x.shape(), x.dtype(), x.place());
  PD_DISPATCH_FLOATING_AND_INTEGRAL_TYPES(x.dtype(), what, ([&] {
    const data_t* a = x.data<data_t>();
    const data_t* b = y.data<data_t>();
    data_t* o = out.data<data_t>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = f(a[i], b[i]);
  }));
  return out;
}

template <typename F>
Tensor with_scalar(const Tensor& x, double s, const char* what, F f) {
  Tensor other = full(x.shape(), s, x.dtype(), CPUPlace());
  return elementwise(x, other, what, f);
}

struct Add { template <typename T> T operator()(T a, T b) const { return a + b; } };
struct Sub { template <typename T> T operator()(T a, T b) const { return a - b; } };
struct Mul { template <typename T> T operator()(T a, T b) const { return a * b; } };
struct Div { template <typename T> T operator()(T a, T b) const { return a / b; } };

}  // namespace ext_detail

#define OARLOCK_TENSOR_OPERATOR(OP, F)                                                                   \
  inline Tensor operator OP(const Tensor& x, const Tensor& y) {                                          \
    return ext_detail::elementwise(x, y, "operator" #OP, ext_detail::F());                               \
  }                                                                                                      \
  inline Tensor operator OP(const Tensor& x, double s) {                                                 \
    return ext_detail::with_scalar(x, s, "operator" #OP, ext_detail::F());                               \
  }
OARLOCK_TENSOR_OPERATOR(+, Add)
OARLOCK_TENSOR_OPERATOR(-, Sub)
OARLOCK_TENSOR_OPERATOR(*, Mul)
OARLOCK_TENSOR_OPERATOR(/, Div)
#undef OARLOCK_TENSOR_OPERATOR

}  // namespace paddle
