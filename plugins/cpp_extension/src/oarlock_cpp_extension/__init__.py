"""oarlock-cpp-extension: custom operators written in C++ (and CUDA) against Paddle's "paddle/extension.h",
compiled at first use by oarlock.utils.cpp_extension.load() or ahead of time by setup(), and registered as
oarlock ops with their C++ (or Python) autograd rules. Public API: the names exported into
oarlock.utils.cpp_extension (see plugin.py), and register_library for plugins that ship compiled ops."""

from oarlock_cpp_extension.build import CompileError, get_build_directory
from oarlock_cpp_extension.jit import load
from oarlock_cpp_extension.packaging import CppExtension, CUDAExtension, register_library, setup

__all__ = ["CompileError", "CppExtension", "CUDAExtension", "get_build_directory", "load", "register_library",
           "setup"]
