"""Compiling custom-operator sources into a shared library, cached by a hash of what went into it.

The key covers the sources' bytes, the flags, the compiler's identity (its path and `--version`), the
headers and the ABI file shipped here, so editing any of them rebuilds and nothing else does. Builds land in
<build_directory>/<name>/<key>/lib<name>.so, written to a temporary name and renamed into place under a
file lock, so concurrent processes (the ranks of one job) build once and never load half a file.
C++ sources go through the system C++ compiler ($CXX, else c++/g++); .cu sources through nvcc, which also
defines OARLOCK_WITH_CUDA for the ABI file and links the CUDA runtime."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
INCLUDE = PACKAGE / "include"
ABI_SOURCE = PACKAGE / "csrc" / "oarlock_op_abi.cc"
# hidden visibility: each library keeps its own op table (see csrc/oarlock_op_abi.cc); the ABI is exported
CXX_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
CUDA_SUFFIXES = (".cu",)


class CompileError(RuntimeError):
    """The compiler rejected a custom-operator source; the message holds its output."""


@dataclass
class BuildResult:
    path: Path          # the shared library
    compiled: bool      # False: found in the cache
    seconds: float      # time spent building, or looking up the cache


def get_build_directory(verbose: bool = False) -> str:
    """Root folder of compiled custom operators: $OARLOCK_EXTENSION_DIR, else ~/.cache/oarlock_extensions
    (Paddle's rule, with its PADDLE_EXTENSION_DIR read too). Created if missing."""
    root = os.environ.get("OARLOCK_EXTENSION_DIR") or os.environ.get("PADDLE_EXTENSION_DIR") \
        or os.path.join(os.path.expanduser("~/.cache"), "oarlock_extensions")
    os.makedirs(root, exist_ok=True)
    if verbose:
        print(f"oarlock.utils.cpp_extension: build directory {root}")
    return root


def cxx_compiler() -> str:
    """The C++ compiler: $CXX, else the first of c++, g++, clang++ on PATH."""
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise RuntimeError("oarlock.utils.cpp_extension: no C++ compiler found (set CXX or install g++)")


def nvcc_compiler() -> str:
    """nvcc: $CUDA_HOME/bin/nvcc, else nvcc on PATH."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [os.path.join(home, "bin", "nvcc")] if home else []
    for candidate in candidates + [shutil.which("nvcc") or ""]:
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("oarlock.utils.cpp_extension: a .cu source needs nvcc, which is not installed "
                       "(set CUDA_HOME or put nvcc on PATH)")


@lru_cache(maxsize=None)
def cuda_root(nvcc: str) -> Path:
    """The CUDA toolkit nvcc belongs to: $CUDA_HOME, else the TOP nvcc reports (nvcc may be a wrapper script)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home)
    probe = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                           capture_output=True, text=True, check=False)
    for line in (probe.stdout + probe.stderr).splitlines():
        if line.startswith("#$ TOP="):
            return Path(line.split("=", 1)[1].strip()).resolve()
    return Path(nvcc).resolve().parent.parent


@lru_cache(maxsize=None)
def _identity(compiler: str) -> str:
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return compiler + "\n" + out.stdout


def _shipped_files() -> list[Path]:
    return sorted(INCLUDE.rglob("*.h")) + [ABI_SOURCE]


def cache_key(sources, cflags, cuda_cflags, ldflags, include_paths) -> str:
    digest = hashlib.sha256()
    uses_cuda = any(str(s).endswith(CUDA_SUFFIXES) for s in sources)
    compilers = [cxx_compiler()] + ([nvcc_compiler()] if uses_cuda else [])
    for part in [*compilers, *(map(_identity, compilers))]:
        digest.update(part.encode() + b"\0")
    for path in [*sources, *_shipped_files()]:
        digest.update(str(path).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    for flags in (cflags, cuda_cflags, ldflags, include_paths):
        digest.update(repr(list(flags)).encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def _run(command: list[str], what: str, verbose: bool) -> None:
    if verbose:
        print(" ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if verbose and done.stdout:
        print(done.stdout)
    if done.returncode != 0:
        raise CompileError(f"oarlock.utils.cpp_extension: compiling {what} failed (exit {done.returncode}):\n"
                           f"{' '.join(command)}\n{done.stderr or done.stdout}")


def compile_library(target: Path, sources, cflags=(), cuda_cflags=(), ldflags=(), include_paths=(),
                    verbose=False) -> None:
    """Compile `sources` and the ABI file into the shared library `target` (no caching here)."""
    includes = [f"-I{INCLUDE}"] + [f"-I{p}" for p in include_paths]
    cxx = cxx_compiler()
    cuda_sources = [s for s in sources if str(s).endswith(CUDA_SUFFIXES)]
    cpp_sources = [str(s) for s in sources if s not in cuda_sources] + [str(ABI_SOURCE)]
    objects, defines, libs = [], [], []
    if cuda_sources:
        nvcc = nvcc_compiler()
        defines = ["-DOARLOCK_WITH_CUDA", "-DPADDLE_WITH_CUDA"]
        root = cuda_root(nvcc)
        lib_dirs = [d for d in (root / "lib64", root / "lib") if d.is_dir()]
        includes.append(f"-I{root / 'include'}")
        libs = [flag for d in lib_dirs for flag in (f"-L{d}", f"-Wl,-rpath,{d}")] + ["-lcudart"]
        for source in cuda_sources:
            obj = target.with_name(Path(source).stem + ".cu.o")
            _run([nvcc, "-c", str(source), "-o", str(obj), "-std=c++17", "-O2", "-Xcompiler",
                  "-fPIC,-fvisibility=hidden", *defines, *includes, *cuda_cflags], str(source), verbose)
            objects.append(str(obj))
    _run([cxx, *CXX_FLAGS, "-shared", *defines, *includes, *cflags, *cpp_sources, *objects, "-o", str(target),
          *ldflags, *libs], ", ".join(map(str, sources)), verbose)


def build(name: str, sources, cflags=(), cuda_cflags=(), ldflags=(), include_paths=(), build_directory=None,
          verbose=False) -> BuildResult:
    """The library for `sources`: from the cache when an identical build exists, else compiled now."""
    start = time.perf_counter()
    key = cache_key(sources, cflags, cuda_cflags, ldflags, include_paths)
    folder = Path(build_directory or get_build_directory()) / name / key
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"lib{name}.so"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            if verbose:
                print(f"oarlock.utils.cpp_extension: {name}: cached build {target}")
            return BuildResult(target, False, time.perf_counter() - start)
        partial = folder / f".lib{name}.{os.getpid()}.so"
        try:
            compile_library(partial, sources, cflags, cuda_cflags, ldflags, include_paths, verbose)
            os.replace(partial, target)
        finally:
            if partial.exists():
                partial.unlink()
    if verbose:
        print(f"oarlock.utils.cpp_extension: {name}: compiled {target}")
    return BuildResult(target, True, time.perf_counter() - start)
