"""The host emulation (oarlock_cuda.emulation) of kernels/tensor_core.cuh's warp-level primitives, checked on
a small test kernel family against numpy with random data. The expected register contents are written here
from PTX's rules (the fragment layouts of mma.sync m16n8k16 and ldmatrix), not by calling the emulator. The
same test source compiles with nvcc for sm_90 (skipped without nvcc)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oarlock
from oarlock_cuda import fused
from oarlock_cuda.emulation import MAX_SHARED_BYTES, HostRuntime, gxx

KERNELS = Path(fused.__file__).with_name("kernels")

TEST_SOURCE = r"""
// mma through ldmatrix: A [16][16] and B [k=16][n=8] row-major (global, 16-byte aligned) -> dynamic shared
// memory by cp.async; C, D [16][8] float; regs: each lane's a[4], b[2] as ldmatrix loaded them.
template <typename T>
__global__ void __launch_bounds__(32) tc_mma(const T* __restrict__ a, const T* __restrict__ b,
                                             const float* __restrict__ c, float* __restrict__ d, unsigned* regs) {
    T* sa = reinterpret_cast<T*>(dynamic_smem());
    T* sb = sa + 16 * 16;
    const int lane = threadIdx.x;
    cp_async_16(sa + 8 * lane, a + 8 * lane, true);                         // 32 chunks of 8 values
    if (lane < 16) cp_async_16(sb + 8 * lane, b + 8 * lane, true);          // 16 chunks
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    unsigned ra[4], rb[2];
    ldmatrix_x4(ra, sa + (lane % 16) * 16 + (lane / 16) * 8);   // matrices: rows 0-7 / 8-15, columns 0-7 / 8-15
    ldmatrix_x2_trans(rb, sb + (lane % 16) * 8);                // lanes 0-15: the rows k of B
    const int g = lane / 4, t = lane % 4;
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    mma_16816<T>(acc, ra, rb);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
    for (int i = 0; i < 4; ++i) regs[lane * 6 + i] = ra[i];
    regs[lane * 6 + 4] = rb[0];
    regs[lane * 6 + 5] = rb[1];
}

// ldmatrix from a static shared tile [32][16] of 16-bit values: lane i gives the address of row rows[i],
// column 8 halves[i]; mode 0 x4, 1 x4.trans, 2 x2, 3 x2.trans, 4 x4 from a misaligned address (host only).
__global__ void tc_ldmatrix(const unsigned short* tile, const int* rows, const int* halves, unsigned* regs,
                            int mode) {
    __shared__ __align__(16) unsigned short s[32 * 16];
    const int lane = threadIdx.x;
    for (int i = lane; i < 32 * 16; i += 32) s[i] = tile[i];
    __syncthreads();
    const unsigned short* row = s + rows[lane] * 16 + 8 * halves[lane];
    if (mode == 0 || mode == 1 || mode == 4) {
        unsigned r[4];
        if (mode == 0) ldmatrix_x4(r, row);
        else if (mode == 1) ldmatrix_x4_trans(r, row);
        else ldmatrix_x4(r, row + 1);
        for (int j = 0; j < 4; ++j) regs[lane * 4 + j] = r[j];
    } else {
        unsigned r[2];
        if (mode == 2) ldmatrix_x2(r, row);
        else ldmatrix_x2_trans(r, row);
        for (int j = 0; j < 2; ++j) regs[lane * 4 + j] = r[j];
    }
}

template <typename T>
__global__ void tc_pack2(const float* lo, const float* hi, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = pack2<T>(lo[i], hi[i]);
}

// per thread of each block: [aligned, bytes not 0xFF at the start, bytes not as written after a barrier]
__global__ void tc_smem(unsigned* out, int bytes) {
    unsigned char* s = dynamic_smem();
    const int t = threadIdx.x, n = blockDim.x, block = blockIdx.x;
    unsigned unwritten = 0, wrong = 0;
    for (int i = t; i < bytes; i += n) unwritten += s[i] != 0xFF;
    __syncthreads();
    for (int i = t; i < bytes; i += n) s[i] = (unsigned char)(i * 7 + block);
    __syncthreads();
    for (int i = (t + 1) % n; i < bytes; i += n) wrong += s[i] != (unsigned char)(i * 7 + block);
    unsigned* o = out + 3 * (block * n + t);
    o[0] = (unsigned long long)s % 16 == 0;
    o[1] = unwritten;
    o[2] = wrong;
}

// a 3-D grid of 3-D blocks: every thread writes its indices, the sizes, and two shuffles of its linear id
__global__ void tc_grid(int* out, float* shuffled) {
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    int* o = out + 12 * (bid * threads + tid);
    o[0] = blockIdx.x; o[1] = blockIdx.y; o[2] = blockIdx.z;
    o[3] = threadIdx.x; o[4] = threadIdx.y; o[5] = threadIdx.z;
    o[6] = gridDim.x; o[7] = gridDim.y; o[8] = gridDim.z;
    o[9] = blockDim.x; o[10] = blockDim.y; o[11] = blockDim.z;
    const int from = __shfl_sync(OARLOCK_FULL_MASK, tid, (tid + 5) % 32);
    __syncwarp();
    const float x = __shfl_xor_sync(OARLOCK_FULL_MASK, (float)tid, 3);
    shuffled[2 * (bid * threads + tid)] = (float)from;
    shuffled[2 * (bid * threads + tid) + 1] = x;
}

// the math the kernels may use: exp2f expf fmaxf fminf rsqrtf INFINITY
__global__ void __launch_bounds__(64) tc_math(const float* __restrict__ x, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        out[6 * i] = exp2f(v);
        out[6 * i + 1] = expf(v);
        out[6 * i + 2] = fmaxf(v, 0.5f);
        out[6 * i + 3] = fminf(v, 0.5f);
        out[6 * i + 4] = rsqrtf(fabsf(v) + 1.0f);
        out[6 * i + 5] = v > 1.5f ? INFINITY : -INFINITY;
    }
}
"""

NAMES = ["tc_mma<bf16_t>", "tc_mma<half_t>", "tc_ldmatrix", "tc_pack2<bf16_t>", "tc_pack2<half_t>", "tc_smem",
         "tc_grid", "tc_math"]


def _source(family="tc"):
    return (KERNELS / "prelude.cuh").read_text() + "\n" + (KERNELS / "tensor_core.cuh").read_text() + "\n" + \
        TEST_SOURCE


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    if gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    build = Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or tmp_path_factory.mktemp("emu"))
    return HostRuntime(build, _source, lambda family: NAMES)


def _run(rt, name, grid, block, args, shared_bytes=0):
    rt.launch(rt.function("tc", name, 0), 0, grid, block, args, shared_bytes)


def _np16(dtype):
    return oarlock.dtypes.convert_dtype(dtype).np


def _word(lo, hi):
    """A 32-bit register of two 16-bit values (bit patterns), lo in the low half."""
    return (np.asarray(lo, np.uint32) | (np.asarray(hi, np.uint32) << 16)).astype(np.uint32)


# -- the expected fragments, from PTX's rules (lane l: g = l // 4, t = l % 4) ---------------------------------

def _a_fragments(bits):
    """mma m16n8k16 A (16x16 row-major) registers per lane: a0 = A[g][2t..], a1 = A[g+8][2t..],
    a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i, (r, k) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
            out[lane, i] = _word(bits[r, k], bits[r, k + 1])
    return out


def _b_fragments(bits):
    """mma m16n8k16 B (16x8, bits[k][n]) registers per lane: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]."""
    out = np.zeros((32, 2), np.uint32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        out[lane, 0] = _word(bits[2 * t, g], bits[2 * t + 1, g])
        out[lane, 1] = _word(bits[2 * t + 8, g], bits[2 * t + 9, g])
    return out


def _ldmatrix_expected(matrices, trans):
    """ldmatrix: register j of lane l holds matrix j's row l // 4, columns 2 (l % 4), 2 (l % 4) + 1, of the
    transpose with .trans (then rows 2 (l % 4), 2 (l % 4) + 1 of column l // 4)."""
    out = np.zeros((32, len(matrices)), np.uint32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for j, m in enumerate(matrices):
            out[lane, j] = _word(m[2 * t, g], m[2 * t + 1, g]) if trans else _word(m[g, 2 * t], m[g, 2 * t + 1])
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mma_16816_through_ldmatrix(rt, dtype):
    rng = np.random.default_rng(20 if dtype == "bfloat16" else 21)
    np16 = _np16(dtype)
    name = "tc_mma<bf16_t>" if dtype == "bfloat16" else "tc_mma<half_t>"
    for trial in range(3):
        scale = (1.0, 1e3, 1e-3)[trial]
        a = (rng.standard_normal((16, 16)) * scale).astype(np16)
        b = (rng.standard_normal((16, 8)) * scale).astype(np16)
        c = rng.standard_normal((16, 8)).astype(np.float32) * np.float32(trial)
        d = np.full((16, 8), np.nan, np.float32)
        regs = np.zeros((32, 6), np.uint32)
        _run(rt, name, (1,), (32,), (a, b, c, d, regs), shared_bytes=16 * 16 * 2 + 16 * 8 * 2)
        np.testing.assert_array_equal(regs[:, :4], _a_fragments(a.view(np.uint16)), err_msg=f"{dtype} A fragments")
        np.testing.assert_array_equal(regs[:, 4:], _b_fragments(b.view(np.uint16)), err_msg=f"{dtype} B fragments")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        want = c.astype(np.float64) + a64 @ b64
        terms = np.abs(c.astype(np.float64)) + np.abs(a64) @ np.abs(b64)
        bad = np.abs(d.astype(np.float64) - want) > 1e-5 * terms           # rtol 1e-5 of the terms' size
        assert not bad.any(), f"{dtype} trial {trial}: {d[bad][:4]} vs {want[bad][:4]}"
        # the model: the products exact in float32, accumulated in float32 from C in k order
        model = c.copy()
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        for k in range(16):
            model = model + np.outer(a32[:, k], b32[k, :])
        np.testing.assert_array_equal(d, model, err_msg=f"{dtype} float32 accumulation in k order")


def test_mma_16816_positive_data_rtol(rt):
    """Without cancellation the result is float32-accurate: plain rtol 1e-5 against float64."""
    rng = np.random.default_rng(22)
    for dtype, name in (("bfloat16", "tc_mma<bf16_t>"), ("float16", "tc_mma<half_t>")):
        np16 = _np16(dtype)
        a = rng.uniform(0.1, 2.0, (16, 16)).astype(np16)
        b = rng.uniform(0.1, 2.0, (16, 8)).astype(np16)
        c = rng.uniform(0.0, 1.0, (16, 8)).astype(np.float32)
        d = np.zeros((16, 8), np.float32)
        _run(rt, name, (1,), (32,), (a, b, c, d, np.zeros((32, 6), np.uint32)), shared_bytes=768)
        np.testing.assert_allclose(d, c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                                   err_msg=dtype)


def _ldmatrix(rt, mode, rng):
    tile = rng.integers(0, 2 ** 16, (32, 16), dtype=np.uint16)
    rows = rng.permutation(32).astype(np.int32)
    halves = rng.integers(0, 2, 32).astype(np.int32)
    regs = np.full((32, 4), 0xDEADBEEF, np.uint32)
    _run(rt, "tc_ldmatrix", (1,), (32,), (tile, rows, halves, regs, np.int32(mode)))
    # matrix j, row r: 8 values at tile[rows[8j + r], 8 halves[8j + r]:]
    matrices = [np.stack([tile[rows[8 * j + r], 8 * halves[8 * j + r]:8 * halves[8 * j + r] + 8]
                          for r in range(8)]) for j in range(4)]
    return regs, matrices


@pytest.mark.parametrize("mode, count, trans", [(0, 4, False), (1, 4, True), (2, 2, False), (3, 2, True)])
def test_ldmatrix_layouts(rt, mode, count, trans):
    rng = np.random.default_rng(30 + mode)
    for _ in range(3):
        regs, matrices = _ldmatrix(rt, mode, rng)
        want = _ldmatrix_expected(matrices[:count], trans)
        for lane in range(32):
            for j in range(count):
                assert regs[lane, j] == want[lane, j], \
                    f"mode {mode}: lane {lane} register {j}: {regs[lane, j]:#010x}, PTX gives {want[lane, j]:#010x}"
        assert (regs[:, count:] == 0xDEADBEEF).all()


def test_ldmatrix_misaligned_row_fails_the_launch(rt):
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        _ldmatrix(rt, 4, np.random.default_rng(35))
    _ldmatrix(rt, 0, np.random.default_rng(36))        # the next launch is clean


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_pack2(rt, dtype):
    rng = np.random.default_rng(40)
    n = 1000
    lo = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32)
    hi = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32)
    lo[:6] = [0.0, -0.0, np.inf, -np.inf, 1.00390625, 1.01171875]          # signs, infinities, ties to even
    hi[:6] = [1.0, 65504.0, -1e-8, 3.0, 1.0009765625 + 2 ** -11, 2049.0]
    out = np.zeros(n, np.uint32)
    _run(rt, f"tc_pack2<{'bf16_t' if dtype == 'bfloat16' else 'half_t'}>", (4,), (256,), (lo, hi, out, np.int32(n)))
    with np.errstate(over="ignore"):
        want = _word(lo.astype(_np16(dtype)).view(np.uint16), hi.astype(_np16(dtype)).view(np.uint16))
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shared_bytes", [0, 16, 1000, 48 * 1024 + 16, 200 * 1024])
def test_dynamic_smem(rt, shared_bytes):
    blocks, threads = 3, 64
    out = np.full((blocks, threads, 3), 12345, np.uint32)
    _run(rt, "tc_smem", (blocks,), (threads,), (out, np.int32(shared_bytes)), shared_bytes)
    assert (out[..., 0] == 1).all(), "dynamic_smem() is not 16-byte aligned"
    assert (out[..., 1] == 0).all(), "dynamic shared memory is not all 0xFF at the start of a block"
    assert (out[..., 2] == 0).all(), "dynamic shared memory does not hold what the block wrote"


def test_dynamic_smem_limits(rt):
    out = np.zeros((1, 32, 3), np.uint32)
    _run(rt, "tc_smem", (1,), (32,), (out, np.int32(MAX_SHARED_BYTES)), MAX_SHARED_BYTES)
    assert (out[..., 1:] == 0).all()
    with pytest.raises(ValueError, match="shared memory"):
        _run(rt, "tc_smem", (1,), (32,), (out, np.int32(0)), MAX_SHARED_BYTES + 1)


def test_grid_3d(rt):
    grid, block = (2, 3, 4), (8, 4, 2)
    blocks, threads = 24, 64
    out = np.full((blocks, threads, 12), -1, np.int32)
    shuffled = np.zeros((blocks, threads, 2), np.float32)
    _run(rt, "tc_grid", grid, block, (out, shuffled))
    bz, by, bx = np.unravel_index(np.arange(blocks), grid[::-1])
    tz, ty, tx = np.unravel_index(np.arange(threads), block[::-1])
    for k, want in enumerate((bx, by, bz)):
        np.testing.assert_array_equal(out[:, :, k], np.broadcast_to(want[:, None], (blocks, threads)))
    for k, want in enumerate((tx, ty, tz)):
        np.testing.assert_array_equal(out[:, :, 3 + k], np.broadcast_to(want[None, :], (blocks, threads)))
    np.testing.assert_array_equal(out[:, :, 6:9], np.broadcast_to(grid, (blocks, threads, 3)))
    np.testing.assert_array_equal(out[:, :, 9:12], np.broadcast_to(block, (blocks, threads, 3)))
    tid = np.arange(threads)
    warp_base = tid // 32 * 32
    np.testing.assert_array_equal(shuffled[:, :, 0], np.broadcast_to(warp_base + (tid + 5) % 32, (blocks, threads)))
    np.testing.assert_array_equal(shuffled[:, :, 1], np.broadcast_to(tid ^ 3, (blocks, threads)))


def test_launch_checks(rt):
    out = np.zeros((24, 64, 12), np.int32)
    shuffled = np.zeros((24, 64, 2), np.float32)
    fn = rt.function("tc", "tc_grid", 0)
    with pytest.raises(TypeError, match="argument 1 has dtype float64"):
        rt.launch(fn, 0, (1,), (32,), (out, shuffled.astype(np.float64)))
    with pytest.raises(TypeError, match="1 arguments for 2 parameters"):
        rt.launch(fn, 0, (1,), (32,), (out,))
    with pytest.raises(ValueError, match="multiple of 32"):
        rt.launch(fn, 0, (1,), (8, 2), (out, shuffled))
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        rt.launch(fn, 0, (1, 1, 1, 1), (32,), (out, shuffled))
    with pytest.raises(KeyError):
        rt.function("tc", "tc_nothing", 0)


def test_math(rt):
    x = np.random.default_rng(50).uniform(-4, 4, 100).astype(np.float32)
    out = np.zeros((100, 6), np.float32)
    _run(rt, "tc_math", (2,), (64,), (x, out, np.int32(100)))
    want = np.stack([np.exp2(x), np.exp(x), np.maximum(x, 0.5), np.minimum(x, 0.5), 1 / np.sqrt(np.abs(x) + 1),
                     np.where(x > 1.5, np.inf, -np.inf)], axis=1).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_test_source_compiles_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    refs = "\n".join(f"    (void*)&{name}," for name in NAMES)
    src = tmp_path / "tc.cu"
    src.write_text(_source() + f"\nextern void* oarlock_instances[];\nvoid* oarlock_instances[] = {{\n{refs}\n}};\n")
    flags = [o.replace("--fmad", "-fmad") for o in fused.OPTIONS]
    done = subprocess.run([nvcc, "-arch=sm_90", "--cubin", *flags, "-Werror", "all-warnings", "-o",
                           str(tmp_path / "tc.cubin"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tc.cubin").stat().st_size > 0
