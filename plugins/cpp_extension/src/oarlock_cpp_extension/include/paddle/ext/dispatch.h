// PD_DISPATCH_*_TYPES: run a lambda with `data_t` bound to the C++ type of a runtime dtype, as Paddle's
// custom operators write it:  PD_DISPATCH_FLOATING_TYPES(x.type(), "relu", ([&] { kernel<data_t>(...); }));
#pragma once

#include "paddle/ext/tensor.h"

#define PD_PRIVATE_CASE_TYPE(NAME, ENUM, TYPE, ...) \
  case ENUM: {                                      \
    using data_t = TYPE;                            \
    __VA_ARGS__();                                  \
    break;                                          \
  }

#define OARLOCK_DISPATCH_DEFAULT(NAME, DT) \
  default:                                 \
    PD_THROW("function ", NAME, " is not implemented for data type `", DT, "`")

#define OARLOCK_CASES_FLOATING(NAME, ...)                                             \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::FLOAT32, float, __VA_ARGS__)        \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::FLOAT64, double, __VA_ARGS__)
#define OARLOCK_CASES_HALF(NAME, ...)                                                             \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::FLOAT16, ::paddle::dtype::float16, __VA_ARGS__)  \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::BFLOAT16, ::paddle::dtype::bfloat16, __VA_ARGS__)
#define OARLOCK_CASES_INTEGRAL(NAME, ...)                                         \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::INT32, int, __VA_ARGS__)        \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::INT64, int64_t, __VA_ARGS__)    \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::INT8, int8_t, __VA_ARGS__)      \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::UINT8, uint8_t, __VA_ARGS__)    \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::INT16, int16_t, __VA_ARGS__)
#define OARLOCK_CASES_COMPLEX(NAME, ...)                                                      \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::COMPLEX64, std::complex<float>, __VA_ARGS__)  \
  PD_PRIVATE_CASE_TYPE(NAME, ::paddle::DataType::COMPLEX128, std::complex<double>, __VA_ARGS__)

#define OARLOCK_DISPATCH(TYPE, NAME, CASES)  \
  [&] {                                     \
    const auto& __dtype__ = TYPE;           \
    switch (__dtype__) {                    \
      CASES                                 \
      OARLOCK_DISPATCH_DEFAULT(NAME, __dtype__); \
    }                                       \
  }()

#define PD_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_FLOATING(NAME, __VA_ARGS__))
#define PD_DISPATCH_FLOATING_AND_HALF_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_FLOATING(NAME, __VA_ARGS__) OARLOCK_CASES_HALF(NAME, __VA_ARGS__))
#define PD_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_INTEGRAL(NAME, __VA_ARGS__))
#define PD_DISPATCH_COMPLEX_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_COMPLEX(NAME, __VA_ARGS__))
#define PD_DISPATCH_FLOATING_AND_INTEGRAL_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_FLOATING(NAME, __VA_ARGS__) OARLOCK_CASES_INTEGRAL(NAME, __VA_ARGS__))
#define PD_DISPATCH_FLOATING_AND_COMPLEX_TYPES(TYPE, NAME, ...) \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_FLOATING(NAME, __VA_ARGS__) OARLOCK_CASES_COMPLEX(NAME, __VA_ARGS__))
#define PD_DISPATCH_FLOATING_AND_INTEGRAL_AND_COMPLEX_TYPES(TYPE, NAME, ...)                           \
  OARLOCK_DISPATCH(TYPE, NAME, OARLOCK_CASES_FLOATING(NAME, __VA_ARGS__)                               \
                   OARLOCK_CASES_INTEGRAL(NAME, __VA_ARGS__) OARLOCK_CASES_COMPLEX(NAME, __VA_ARGS__))
