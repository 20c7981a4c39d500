"""Builds the C++ library as Paddle's custom-op packages do (paddle.utils.cpp_extension.setup): the sources,
written against "paddle/extension.h", become oarlock_custom_op_example/_ops.so (metadata: pyproject.toml)."""

from oarlock.utils.cpp_extension import CppExtension, setup

setup(ext_modules=CppExtension(sources=["csrc/fused_bias_relu.cc"], name="oarlock_custom_op_example._ops"),
      package_dir={"": "src"})
