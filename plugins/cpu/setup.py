"""Build hook of oarlock-cpu: only the C extension; all metadata lives in pyproject.toml."""

import os

import numpy
from setuptools import Extension, setup

# _memstat.c uses C11 <stdatomic.h>; MSVC provides it only behind these flags.
extra_compile_args = ["/std:c11", "/experimental:c11atomics"] if os.name == "nt" else []

setup(
    ext_modules=[
        Extension(
            "oarlock_cpu._memstat",
            sources=["src/oarlock_cpu/_memstat.c"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=extra_compile_args,
        )
    ],
)
