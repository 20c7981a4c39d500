// oarlock's "paddle/extension.h": the custom-operator API of PaddlePaddle 3.2 (paddle::Tensor, paddle::empty,
// PD_BUILD_OP, PD_BUILD_GRAD_OP, PD_DISPATCH_*_TYPES, PD_THROW, PADDLE_ENFORCE_*), written for oarlock, so that
// Paddle's custom-operator sources compile unchanged. oarlock.utils.cpp_extension.load() puts the folder above
// this one on the include path and links each library with csrc/oarlock_op_abi.cc, the C ABI oarlock calls.
#pragma once

#include "paddle/ext/enforce.h"
#include "paddle/ext/tensor.h"
#include "paddle/ext/dispatch.h"
#include "paddle/ext/math.h"
#include "paddle/ext/op_meta.h"
