"""Shared fixtures for the FlashMask GPU tests (test_gpu_forward.py, test_gpu_backward.py):

host_kernels   (module) the name expressions the host build compiles, as names_of(family): all of gpu.names()
               unless a test module overrides this fixture
host           (module) gpu.RUNTIME swapped for oarlock_cuda.emulation.HostRuntime (the kernels compiled for the
               host with g++), into OARLOCK_CUDA_EMU_CACHE if set; skipped without oarlock_cuda or g++
no_launch      gpu.RUNTIME swapped for gpu_support.NoLaunch: any fused kernel launch fails the test

gpu_support.py (importable from these tests: this folder is put on sys.path) holds their plain helpers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from oarlock_flashmask import gpu

sys.path.insert(0, os.path.dirname(__file__))

from gpu_support import NoLaunch  # noqa: E402  (importable once this folder is on sys.path, the line above)


@pytest.fixture(scope="module")
def host_kernels():
    return gpu.names


@pytest.fixture(scope="module")
def host(tmp_path_factory, host_kernels):
    emulation = pytest.importorskip("oarlock_cuda.emulation")
    if emulation.gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    build = Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or tmp_path_factory.mktemp("emu"))
    build.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpu, "RUNTIME", emulation.HostRuntime(build, gpu.source, host_kernels))
        yield gpu.RUNTIME


@pytest.fixture
def no_launch(monkeypatch):
    monkeypatch.setattr(gpu, "RUNTIME", NoLaunch())
