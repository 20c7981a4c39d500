// Does not compile: the tests check that the compiler's own message reaches the user.
#include "paddle/extension.h"

std::vector<paddle::Tensor> Broken(const paddle::Tensor& x) {
  return {x.no_such_method_here()};
}
PD_BUILD_OP(test_broken).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(Broken));
