"""Entry point of oarlock-cpp-extension: exports oarlock.utils.cpp_extension (Paddle's names)."""

from __future__ import annotations

from oarlock import hookimpl

import oarlock_cpp_extension as ext
from oarlock_cpp_extension import packaging

NAMESPACE = "oarlock.utils.cpp_extension"


@hookimpl
def oarlock_register_api(api):
    api.namespace(NAMESPACE, "C++/CUDA custom operators: load() compiles at first use, setup() ahead of time.")
    for name in ("load", "setup", "CppExtension", "CUDAExtension", "get_build_directory", "CompileError"):
        api.export(NAMESPACE, name, getattr(ext, name))
    api.export(NAMESPACE, "BuildExtension", packaging.BuildExtension)
