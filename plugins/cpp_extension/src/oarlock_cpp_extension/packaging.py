"""Ahead-of-time builds: setup(), CppExtension, CUDAExtension and BuildExtension, as in
paddle.utils.cpp_extension, for a distribution that ships compiled custom operators; and register_library(),
which such a distribution's oarlock plugin calls from its `oarlock_register_ops` hook.

BuildExtension compiles each extension with the same compiler path as load() (build.compile_library: the
shipped "paddle/extension.h" on the include path, the ABI file linked in) into <package>/<name>.so. The
library is not a Python module: the plugin loads it by path with register_library."""

from __future__ import annotations

import os
from pathlib import Path

from oarlock_cpp_extension import build as _build
from oarlock_cpp_extension.library import Library


def _extension(sources, use_cuda: bool, args, kwargs):
    import setuptools   # only building a distribution needs setuptools
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    name = kwargs.pop("name", None) or "custom_ops_" + Path(str(sources[0])).stem
    extension = setuptools.Extension(name, [str(s) for s in sources], *args, **kwargs)
    extension.oarlock_cuda = use_cuda
    return extension


def CppExtension(sources, *args, **kwargs):
    """A setuptools.Extension of C++ custom-operator sources (CPU kernels). `name` (optional): the dotted
    name of the library built, e.g. "my_ops_pkg._ops" puts my_ops_pkg/_ops.so in the distribution."""
    return _extension(sources, False, args, kwargs)


def CUDAExtension(sources, *args, **kwargs):
    """As CppExtension, with .cu sources compiled by nvcc (CPU and GPU kernels)."""
    return _extension(sources, True, args, kwargs)


def _build_extension_class():
    from setuptools.command.build_ext import build_ext

    class BuildExtension(build_ext):
        """build_ext that compiles custom operators with oarlock's header and ABI (see module docstring)."""

        def get_ext_filename(self, ext_name):
            return os.path.join(*ext_name.split(".")) + ".so"

        def build_extension(self, ext):
            target = Path(self.get_ext_fullpath(ext.name))
            target.parent.mkdir(parents=True, exist_ok=True)
            cflags = list(ext.extra_compile_args or [])
            cuda_cflags = []
            if isinstance(ext.extra_compile_args, dict):   # Paddle's {"cxx": [...], "nvcc": [...]}
                cflags, cuda_cflags = ext.extra_compile_args.get("cxx", []), ext.extra_compile_args.get("nvcc", [])
            ldflags = list(ext.extra_link_args or []) + [f"-L{d}" for d in ext.library_dirs or []] \
                + [f"-l{lib}" for lib in ext.libraries or []]
            _build.compile_library(target, ext.sources, cflags, cuda_cflags, ldflags, ext.include_dirs or [],
                                   verbose=self.verbose)

    return BuildExtension


def __getattr__(name):
    if name == "BuildExtension":     # a setuptools subclass: made on first use, so importing needs no setuptools
        return _build_extension_class()
    raise AttributeError(name)


def setup(**attr):
    """setuptools.setup with `ext_modules` (a CppExtension/CUDAExtension or a list of them) built by
    BuildExtension."""
    import setuptools
    modules = attr.get("ext_modules")
    if modules is None:
        raise ValueError("oarlock.utils.cpp_extension.setup(): argument 'ext_modules' is required (a "
                         "CppExtension or CUDAExtension, or a list of them)")
    attr["ext_modules"] = modules if isinstance(modules, (list, tuple)) else [modules]
    cmdclass = dict(attr.get("cmdclass") or {})
    cmdclass.setdefault("build_ext", _build_extension_class())
    attr["cmdclass"] = cmdclass
    return setuptools.setup(**attr)


def register_library(ops, path, name: str | None = None, grad_rules=None, public=True) -> dict:
    """From a plugin's `oarlock_register_ops(ops)` hook: define the ops of the compiled library at `path`
    (built by setup()/BuildExtension) in the plugin's op library; returns {op name: callable}."""
    library = Library(path, name or Path(path).stem)
    library.validate(grad_rules)
    return library.define(ops, grad_rules, public)
