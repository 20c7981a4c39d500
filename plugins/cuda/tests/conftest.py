"""Fixtures shared by oarlock-cuda's kernel tests."""

import os
from pathlib import Path

import pytest

from oarlock_cuda import fused
from oarlock_cuda.emulation import HostRuntime, gxx


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    build = Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or tmp_path_factory.mktemp("emu"))
    previous = fused.RUNTIME
    fused.RUNTIME = HostRuntime(build, fused.source, lambda family: fused.FAMILIES[family][1])
    try:
        yield fused.RUNTIME
    finally:
        fused.RUNTIME = previous
