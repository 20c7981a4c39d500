"""The fiber scheduler of oarlock_cuda.emulation (the CUDA threads of a block run by turns on one OS thread):
barriers, warp collectives and atomics across warps and 3-D blocks, a barrier that not every thread reaches
failing the launch (instead of a hang), a missing __syncthreads showing in either direction of thread order
(before a read, and before a write that a slower warp has still to read),
stack depth, and the same on the portable ucontext switch (what a host that is not x86-64 builds)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from oarlock_cuda import emulation
from oarlock_cuda.emulation import HostRuntime, gxx

SOURCE = r"""
// every thread: the sum of its block's ids through shared memory and barriers, a warp sum by shuffles, the
// block's minimum by atomicMin; out: [sum, warp sum, shuffle up, shuffle down] per thread
__global__ void fb_reduce(int* out, unsigned long long* least, int rounds) {
    __shared__ int s[1024];
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int n = blockDim.x * blockDim.y * blockDim.z, b = blockIdx.x + gridDim.x * blockIdx.y;
    int total = 0;
    for (int r = 0; r < rounds; ++r) {
        s[t] = t + r;
        __syncthreads();
        for (int i = 0; i < n; ++i) total += s[i];
        __syncthreads();
    }
    int w = t;
    for (int o = 16; o; o /= 2) w += __shfl_xor_sync(0xffffffffu, w, o);
    const int up = __shfl_up_sync(0xffffffffu, t, 1), down = __shfl_down_sync(0xffffffffu, t, 3);
    __syncwarp();
    atomicMin(least + b, (unsigned long long)(100000 - t));
    int* o = out + 4 * (b * n + t);
    o[0] = total; o[1] = w; o[2] = up; o[3] = down;
}

// no barrier between the write and the reads: out[t] = [s[t + 1], s[t - 1]] (mod n) of the dynamic smem
__global__ void fb_race(unsigned* out) {
    unsigned* s = reinterpret_cast<unsigned*>(dynamic_smem());
    const int t = threadIdx.x, n = blockDim.x, b = blockIdx.x;
    s[t] = t;
    out[2 * (b * n + t)] = s[(t + 1) % n];
    out[2 * (b * n + t) + 1] = s[(t + n - 1) % n];
}

// two block sums back to back (norm.cu's block_sum); without the first barrier (guard 0) a warp that runs
// ahead overwrites sh[0] of the first sum before the other warps have read it
__device__ int fb_block_sum(int v, int* sh, int guard) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int o = 16; o; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (guard) __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? sh[lane] : 0;
        for (int o = 16; o; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}
__global__ void fb_sums(int* out, int guard) {
    __shared__ int sh[32];
    const int t = threadIdx.x, n = blockDim.x, b = blockIdx.x;
    out[2 * (b * n + t)] = fb_block_sum(t, sh, guard);
    out[2 * (b * n + t) + 1] = fb_block_sum(1, sh, guard);
}

// threads below `stop` return before the barrier; mode 0 __syncthreads, 1 __syncwarp, 2 a shuffle
__global__ void fb_hang(int* out, int stop, int mode) {
    if ((int)threadIdx.x < stop) return;
    if (mode == 0) __syncthreads();
    else if (mode == 1) __syncwarp();
    else out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

// a deep frame on every fiber's stack (64 KiB), live across a barrier
__global__ void fb_stack(int* out) {
    volatile int big[16384];
    for (int i = 0; i < 16384; ++i) big[i] = i + threadIdx.x;
    __syncthreads();
    long long sum = 0;
    for (int i = 0; i < 16384; ++i) sum += big[i];
    out[threadIdx.x] = (int)(sum % 1000003);
}
"""

NAMES = ["fb_reduce", "fb_race", "fb_sums", "fb_hang", "fb_stack"]
PRELUDE = Path(emulation.__file__).with_name("kernels")


def _source(family):
    return (PRELUDE / "prelude.cuh").read_text() + "\n" + (PRELUDE / "tensor_core.cuh").read_text() + SOURCE


@pytest.fixture(scope="module", params=["switch", "ucontext"])
def rt(request, tmp_path_factory):
    if gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    build = Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or tmp_path_factory.mktemp("emu"))
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "ucontext":
            patch.setattr(emulation, "FLAGS", (*emulation.FLAGS, "-DEMU_UCONTEXT"))
        runtime = HostRuntime(build, _source, lambda family: NAMES)
        runtime.function("fb", "fb_reduce", 0)      # built with these flags
    return runtime


def _run(rt, name, grid, block, args, shared_bytes=0):
    rt.launch(rt.function("fb", name, 0), 0, grid, block, args, shared_bytes)


@pytest.mark.parametrize("block", [(32,), (256,), (8, 4, 4), (1024,)])
def test_barriers_shuffles_atomics(rt, block):
    grid, rounds = (3, 2), 3
    n, blocks = int(np.prod(block)), 6
    out = np.zeros((blocks, n, 4), np.int32)
    least = np.full(blocks, 2 ** 40, np.uint64)
    _run(rt, "fb_reduce", grid, block, (out, least, np.int32(rounds)))
    t = np.arange(n)
    assert (out[..., 0] == sum(n * (n - 1) // 2 + n * r for r in range(rounds))).all()
    assert (out[..., 1] == (t // 32 * 32 * 32 + 31 * 16)[None]).all()
    lane = t % 32
    assert (out[..., 2] == np.where(lane >= 1, t - 1, t)[None]).all()
    assert (out[..., 3] == np.where(lane + 3 < 32, t + 3, t)[None]).all()
    assert (least == 100000 - (n - 1)).all()


def test_missing_syncthreads_shows_either_way(rt):
    """Without the barrier one direction of thread order reads the 0xFF bytes of unwritten shared memory
    in block 0, the other in block 1: a missing __syncthreads fails a kernel's test whichever thread reads."""
    n = 64
    out = np.zeros((2, n, 2), np.uint32)
    _run(rt, "fb_race", (2,), (n,), (out,), 4 * n)
    poison = out == 0xFFFFFFFF
    assert poison[0, :, 0].any() and poison[1, :, 1].any()


def test_missing_leading_syncthreads_shows(rt):
    """Warp 0, which runs first in thread order (block 0, after two __syncthreads), overwrites the block sum
    sh[0] of the first reduction that the other warps have not read yet, unless a barrier keeps it back."""
    n = 128
    out = np.zeros((2, n, 2), np.int32)
    _run(rt, "fb_sums", (2,), (n,), (out, np.int32(1)))
    assert (out[..., 0] == n * (n - 1) // 2).all() and (out[..., 1] == n).all()
    _run(rt, "fb_sums", (2,), (n,), (out, np.int32(0)))
    assert (out[0, :, 0] != n * (n - 1) // 2).any()


@pytest.mark.parametrize("mode, what", [(0, "__syncthreads"), (1, "warp-collective"), (2, "warp-collective")])
def test_barrier_not_every_thread_reaches_fails_the_launch(rt, mode, what):
    out = np.zeros(64, np.int32)
    with pytest.raises(RuntimeError, match=f"fb_hang: .*{what}.*not every"):
        _run(rt, "fb_hang", (2,), (64,), (out, np.int32(3), np.int32(mode)))
    _run(rt, "fb_hang", (2,), (64,), (out, np.int32(0), np.int32(mode)))     # every thread: fine, and after
    _run(rt, "fb_hang", (2,), (64,), (out, np.int32(64), np.int32(mode)))    # none reaches it: fine too


def test_deep_stack(rt):
    out = np.zeros(128, np.int32)
    _run(rt, "fb_stack", (2,), (128,), (out,))
    t = np.arange(128)
    assert (out == (16384 * 16383 // 2 + 16384 * t) % 1000003).all()
