"""Build hook of oarlock-cpu: only the C extensions; all metadata lives in pyproject.toml."""

import os

import numpy
from setuptools import Extension, setup

# _memstat.c uses C11 <stdatomic.h>; MSVC provides it only behind these flags.
extra_compile_args = ["/std:c11", "/experimental:c11atomics"] if os.name == "nt" else []

# _kernels.c: vectorised loops. -O3 lets gcc vectorise; -fno-math-errno and -fno-trapping-math only say that
# errno and FP exception flags are never read. Not -ffast-math: the kernels test for NaN and rely on exact
# IEEE arithmetic (a split of x for an exact x^2, round-to-integer by a magic constant). FMA contraction
# (gcc's default) is allowed: see the comment at the top of _kernels.c.
kernel_compile_args = ["/O2", "/fp:precise"] if os.name == "nt" else ["-O3", "-fno-math-errno", "-fno-trapping-math"]

setup(
    ext_modules=[
        Extension(
            "oarlock_cpu._memstat",
            sources=["src/oarlock_cpu/_memstat.c"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=extra_compile_args,
        ),
        Extension(
            "oarlock_cpu._kernels",
            sources=["src/oarlock_cpu/_kernels.c"],
            depends=["src/oarlock_cpu/_kernels_coeffs.h", "src/oarlock_cpu/_clones.h", "src/oarlock_cpu/_pool.h",
                     "src/oarlock_cpu/_pool_api.h"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=kernel_compile_args,
        ),
        Extension(   # fused RMSNorm / LayerNorm rows: -fopenmp-simd vectorises their sums (no OpenMP runtime)
            "oarlock_cpu._rows",
            sources=["src/oarlock_cpu/_rows.c"],
            depends=["src/oarlock_cpu/_clones.h", "src/oarlock_cpu/_pool.h", "src/oarlock_cpu/_pool_api.h"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=kernel_compile_args + ([] if os.name == "nt" else ["-fopenmp-simd"]),
        ),
        Extension(   # the fused Adam update: no FMA contraction, so it rounds as the generic kernel does
            "oarlock_cpu._optim",
            sources=["src/oarlock_cpu/_optim.c"],
            depends=["src/oarlock_cpu/_clones.h", "src/oarlock_cpu/_pool.h", "src/oarlock_cpu/_pool_api.h"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=kernel_compile_args + ([] if os.name == "nt" else ["-ffp-contract=off"]),
        ),
    ] + ([] if os.name == "nt" else [
        Extension(   # matmul through a cblas opened at run time with dlopen (MKL's libmkl_rt): no BLAS to build
            "oarlock_cpu._gemm",
            # + fused attention over it, and the worker pool that runs split products
            sources=["src/oarlock_cpu/_gemm.c", "src/oarlock_cpu/_attention.c", "src/oarlock_cpu/_pool.c",
                     "src/oarlock_cpu/_flash.c",   # + the FlashMask causal forward (oarlock-flashmask's)
                     "src/oarlock_cpu/_flash_tiles.c"],   # and its AVX-512 tiles
            depends=["src/oarlock_cpu/_gemm.h", "src/oarlock_cpu/_pool.h", "src/oarlock_cpu/_clones.h",
                     "src/oarlock_cpu/_flash_tiles.h"],
            include_dirs=[numpy.get_include()],
            libraries=["m"],
            extra_compile_args=kernel_compile_args,
        ),
    ]),
)
