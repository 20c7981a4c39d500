"""oarlock.utils.cpp_extension.load: compile custom-operator sources at first use and return a module of
their ops, as paddle.utils.cpp_extension.load does.

The library is registered as a plugin named `name` (so `oarlock plugins` lists it, with its kernels): its
ops are oarlock.ops.<name>.<op>, oarlock.<op> where that name is free, and attributes of the returned
module. Loading the same sources again finds the build in the cache and the ops already registered."""

from __future__ import annotations

import os
import types
from pathlib import Path

from oarlock import hookimpl

from oarlock_cpp_extension import build as _build
from oarlock_cpp_extension.library import Library

_LOADED: dict[str, types.ModuleType] = {}    # library path -> the module load() returned for it


class LibraryPlugin:
    """The plugin object of one loaded library: its registration hook defines the library's ops."""

    def __init__(self, library: Library, grad_rules=None, public=True, taken=()):
        self.library, self.grad_rules, self.public, self.taken = library, grad_rules, public, set(taken)

    @hookimpl
    def oarlock_register_ops(self, ops):
        self.library.define(ops, self.grad_rules, self.public, self.taken)


def _str_list(argument: str, value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)) or not all(isinstance(v, (str, os.PathLike)) for v in value):
        raise TypeError(f"oarlock.utils.cpp_extension.load(): argument '{argument}' must be a list of str, "
                        f"got {type(value).__name__} {value!r}")
    return [str(v) for v in value]


def load(name, sources, extra_cxx_cflags=None, extra_cuda_cflags=None, extra_ldflags=None,
         extra_include_paths=None, extra_library_paths=None, build_directory=None, verbose=False, *,
         extra_cflags=None, grad_rules=None, public=True):
    """Compile `sources` (C++ and, with nvcc, .cu files written against "paddle/extension.h") into a shared
    library, cached under `build_directory` (default get_build_directory()) by a hash of the sources, flags
    and compiler; register its ops and return a module holding them. A compile error raises CompileError with
    the compiler's message.

    Paddle's parameters, plus: `extra_cflags` (the torch spelling of extra_cxx_cflags, added to them),
    `grad_rules` ({op name: rule(ctx, *grads) or (rule, saves)}: a Python autograd rule instead of the
    library's PD_BUILD_GRAD_OP), `public` (also export each op as oarlock.<op> where that name is free)."""
    where = "oarlock.utils.cpp_extension.load()"
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{where}: argument 'name' must be an identifier (it names the library and its "
                         f"plugin), got {name!r}")
    sources = [str(sources)] if isinstance(sources, (str, os.PathLike)) else _str_list("sources", sources)
    if not sources:
        raise ValueError(f"{where}: argument 'sources' is empty; give the .cc/.cpp (and .cu) files")
    missing = [s for s in sources if not Path(s).is_file()]
    if missing:
        raise FileNotFoundError(f"{where}: argument 'sources': no such file(s): {missing}")
    sources = [str(Path(s).resolve()) for s in sources]
    ldflags = _str_list("extra_ldflags", extra_ldflags) + [f"-L{p}" for p in _str_list("extra_library_paths",
                                                                                         extra_library_paths)]
    result = _build.build(name, sources, _str_list("extra_cxx_cflags", extra_cxx_cflags)
                          + _str_list("extra_cflags", extra_cflags), _str_list("extra_cuda_cflags", extra_cuda_cflags),
                          ldflags, _str_list("extra_include_paths", extra_include_paths), build_directory, verbose)
    module = _LOADED.get(str(result.path))
    if module is None:
        module = _register(name, result.path, grad_rules, public)
        _LOADED[str(result.path)] = module
    module.__oarlock_build__ = result
    if verbose:
        how = "compiled" if result.compiled else "found in the cache"
        print(f"oarlock.utils.cpp_extension: {name}: {how} in {result.seconds:.3f} s: {module.__all__}")
    return module


def _register(name: str, path, grad_rules, public) -> types.ModuleType:
    from oarlock.plugin_api import default_registry
    from oarlock.plugins import default_manager, register_plugin
    library = Library(path, name)
    library.validate(grad_rules)
    registry = default_registry()
    if default_manager().pm.has_plugin(name):
        raise ValueError(f"oarlock.utils.cpp_extension.load(): a plugin named {name!r} is already registered "
                         f"(an earlier load() of other sources, or an installed plugin); one process loads one "
                         f"library per name: pick another name or restart the process")
    clashes = {op: registry.ops[op].plugin for op in library.op_names
               if op in registry.ops and op not in library.unsupported}
    if clashes:
        raise ValueError(f"oarlock.utils.cpp_extension.load(): library {name!r} declares ops already registered: "
                         + ", ".join(f"{op!r} (by plugin {owner!r})" for op, owner in clashes.items()))
    plugin = LibraryPlugin(library, grad_rules, public, taken=registry.api["oarlock"].keys())
    register_plugin(plugin, name)
    if set(library.functions) != set(library.op_names):   # registration failed: the manager warned; raise
        raise RuntimeError(f"oarlock.utils.cpp_extension.load(): registering library {name!r} failed: "
                           f"{default_manager().failures.get(name)}")
    return library_module(name, library)


def library_module(name: str, library: Library) -> types.ModuleType:
    """A module whose attributes are the library's ops (Paddle's load() returns one such)."""
    module = types.ModuleType(name, f"Custom operators of {library.path.name}: {', '.join(library.op_names)}.")
    module.__file__ = str(library.path)
    module.__all__ = list(library.op_names)
    for op, fn in library.functions.items():
        setattr(module, op, fn)
    return module
