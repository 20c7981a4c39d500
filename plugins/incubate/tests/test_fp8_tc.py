"""The tensor-core FP8 GEMM (kernels/fp8_tc.cu, fp8_gemm_tc: mma.sync m16n8k32 on float8) without a GPU.

- nvcc compiles it for sm_89 and sm_90 with no warnings, and the PTX for those holds the e4m3 / e5m2 MMA
  instructions (the instruction's path, not the model's, is what a GPU of that kind runs);
- the host emulation (oarlock-cuda) runs the kernel with fp8_tc.cu's warp-shuffle model of the instruction:
  the model against the PTX ISA's layout table as fp8_tc.py writes it in Python (one MMA on fragments packed by
  the table, against float64), then the whole GEMM (tiles, fragment loads, edges, promotion) against the
  CUDA-core kernel bit for bit (the model adds in k order, as fp8_gemm_rows does) and against a float64
  reference within the format's bound; a kernel whose A fragment registers are swapped fails that check;
- the run-time choice: the tensor-core kernel from compute capability 8.9 on, the CUDA-core one below.

Not verified here: the instruction itself (its layout and its accumulation precision, which on Hopper is not
float32's in k order); bench/fp8_gpu_check.py runs the probe and the GEMM on a GPU. The GPU run is owed."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from oarlock_incubate import fp8_ops, fp8_tc

sys.path.insert(0, os.path.dirname(__file__))   # fp8_reference, next to this file
import fp8_reference as ref  # noqa: E402

emulation = pytest.importorskip("oarlock_cuda.emulation", reason="oarlock-cuda's host emulation is not installed")

FORMATS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]


def _host_runtime(build_dir, source):
    if emulation.gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    return emulation.HostRuntime(build_dir, lambda family: source, lambda family: fp8_ops.KERNELS)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    previous = fp8_ops.RUNTIME
    fp8_ops.RUNTIME = _host_runtime(tmp_path_factory.mktemp("fp8tc"), fp8_ops.source())
    fp8_ops.RUNTIME.compute_capability = lambda device: 90      # as an H100 / H200 would say
    try:
        yield fp8_ops.RUNTIME
    finally:
        fp8_ops.RUNTIME = previous


def _finite_codes(rng, shape, fmt):
    """random float8 codes of finite values of every binade (no NaN, no inf)."""
    top = ref.LAYOUT[fmt][2]
    return (rng.integers(0, top + 1, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def test_layout_table_places_every_element_once():
    for position, elements, shape in ((fp8_tc.a_position, 16, (16, 32)), (fp8_tc.b_position, 8, (32, 8)),
                                      (fp8_tc.c_position, 4, (16, 8))):
        seen = sorted(position(lane, i) for lane in range(32) for i in range(elements))
        assert seen == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


@pytest.mark.parametrize("a_fmt, b_fmt", FORMATS)
def test_mma_model_follows_the_ptx_layout_table(host, a_fmt, b_fmt):
    rng = np.random.default_rng(3)
    a, b = _finite_codes(rng, [16, 32], a_fmt), _finite_codes(rng, [32, 8], b_fmt)
    c = rng.standard_normal([16, 8]).astype(np.float32)
    got = fp8_tc.mma_probe(np, a, b, c, a_fmt, b_fmt)
    da, db = ref.decode(a, a_fmt), ref.decode(b, b_fmt)
    want = c.astype(np.float64) + da @ db
    bound = 33 * 2.0 ** -24 * (np.abs(c) + np.abs(da) @ np.abs(db))    # 32 float32 additions of exact products
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)


def _operands(m, n, k, a_fmt, b_fmt, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([m, k]) * np.exp(rng.uniform(-4, 4, [m, 1]))
    w = rng.standard_normal([n, k]) * np.exp(rng.uniform(-4, 4, [n, 1]))
    qa, sa = fp8_ops.quant_generic(np, x.astype(np.float32), "1x128", 0.0, True, a_fmt)
    qb, sb = fp8_ops.quant_generic(np, w.astype(np.float32), "1x128", 0.0, True, b_fmt)
    return qa, sa, qb, sb


def _reference_and_bound(qa, sa, qb, sb, a_fmt, b_fmt):
    """float64 product of the dequantized operands, and the bound of fp8_gemm.py's docstring."""
    k = qa.shape[1]
    da = ref.decode(qa, a_fmt) * np.repeat(sa, 128, axis=1)[:, :k]
    db = ref.decode(qb, b_fmt) * np.repeat(sb, 128, axis=1)[:, :k]
    return da @ db.T, (128 + -(-k // 128)) * 2.0 ** -24 * (np.abs(da) @ np.abs(db).T)


# (m, n, k): 2 x 2 tiles with ragged m, n and k on the byte path (k % 16 != 0); one tile on the 16-byte vector
# path with a ragged last slice of K
@pytest.mark.parametrize("m, n, k, a_fmt, b_fmt", [(200, 136, 300, "e4m3", "e5m2"), (72, 40, 272, "e4m3", "e4m3")])
def test_tensor_core_gemm_equals_the_cuda_core_gemm(host, m, n, k, a_fmt, b_fmt):
    qa, sa, qb, sb = _operands(m, n, k, a_fmt, b_fmt, seed=m)
    assert fp8_ops.gemm_kernel_for(0) == fp8_ops.TC_GEMM
    got = fp8_ops.gemm_gpu(np, qa, sa, qb, sb, a_fmt, b_fmt)                 # the choice for capability 9.0
    core = fp8_ops.gemm_gpu(np, qa, sa, qb, sb, a_fmt, b_fmt, kernel=fp8_ops.CORE_GEMM)
    want, bound = _reference_and_bound(qa, sa, qb, sb, a_fmt, b_fmt)
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
    np.testing.assert_array_equal(got, core)


@pytest.mark.parametrize("m, n, k", [(0, 5, 10), (3, 0, 10), (3, 5, 0)])
def test_empty_gemms(host, m, n, k):
    kb = -(-k // 128)
    rng = np.random.default_rng(0)
    qa, qb = _finite_codes(rng, [m, k], "e4m3"), _finite_codes(rng, [n, k], "e4m3")
    sa, sb = np.ones([m, kb], np.float32), np.ones([n, kb], np.float32)
    want = fp8_ops.gemm_generic(np, qa, sa, qb, sb)
    for kernel in (fp8_ops.TC_GEMM, fp8_ops.CORE_GEMM):
        np.testing.assert_array_equal(fp8_ops.gemm_gpu(np, qa, sa, qb, sb, kernel=kernel), want)
    assert want.shape == (m, n) and not want.any()


def test_gemm_kernel_choice_follows_the_compute_capability(monkeypatch):
    class Runtime:
        capability = 90

        def compute_capability(self, device):
            return self.capability

    runtime = Runtime()
    monkeypatch.setattr(fp8_ops, "RUNTIME", runtime)
    for capability, kernel in ((90, fp8_ops.TC_GEMM), (89, fp8_ops.TC_GEMM), (100, fp8_ops.TC_GEMM),
                               (86, fp8_ops.CORE_GEMM), (80, fp8_ops.CORE_GEMM), (70, fp8_ops.CORE_GEMM)):
        runtime.capability = capability
        assert fp8_ops.gemm_kernel_for(0) == kernel
    with pytest.raises(ValueError, match=r"gemm_gpu\(\): argument 'kernel' = 'cublas'; accepted"):
        fp8_ops.gemm_gpu(np, np.zeros([1, 1], np.uint8), np.ones([1, 1], np.float32), np.zeros([1, 1], np.uint8),
                         np.ones([1, 1], np.float32), kernel="cublas")


def test_a_wrong_fragment_mapping_fails(tmp_path):
    """The check above is sensitive to the lane mapping: the kernel with its A registers 1 and 2 swapped (rows
    g + 8, k 0-15 <-> rows g, k 16-31) leaves the bound."""
    right = "fa[i][1] = fp8_tc_word(tile_a, row + 8, kk + 4 * t);\n                fa[i][2] = " \
            "fp8_tc_word(tile_a, row, kk + 16 + 4 * t);"
    wrong = "fa[i][2] = fp8_tc_word(tile_a, row + 8, kk + 4 * t);\n                fa[i][1] = " \
            "fp8_tc_word(tile_a, row, kk + 16 + 4 * t);"
    source = fp8_ops.source()
    assert source.count(right) == 1
    runtime = _host_runtime(tmp_path, source.replace(right, wrong))
    qa, sa, qb, sb = _operands(40, 24, 160, "e4m3", "e4m3", seed=5)
    out = np.empty([40, 24], np.float32)
    args = (qa, sa, qb, sb, out, np.int64(40), np.int64(24), np.int64(160), np.int32(0), np.int32(0))
    runtime.launch(runtime.function("fp8", fp8_ops.TC_NAMES[False], 0), 0, (1, 1), (256,), args)
    want, bound = _reference_and_bound(qa, sa, qb, sb, "e4m3", "e4m3")
    assert np.mean(np.abs(out - want) > bound) > 0.5


@pytest.mark.parametrize("arch", ["sm_89", "sm_90"])
def test_nvcc_compiles_the_tensor_core_path_without_warnings(tmp_path, arch):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    unit = tmp_path / "fp8_tc_check.cu"
    unit.write_text(fp8_ops.source() + "\nvoid* keep[] = {" + ", ".join(f"(void*)&{n}" for n in fp8_ops.KERNELS)
                    + "};\n")
    ptx = tmp_path / "fp8.ptx"
    common = [nvcc, f"-arch={arch}", *fp8_ops.OPTIONS, "-Werror", "all-warnings"]
    done = subprocess.run([*common, "-ptx", str(unit), "-o", str(ptx)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    text = ptx.read_text()
    for a_fmt, b_fmt in FORMATS:
        assert f"mma.sync.aligned.m16n8k32.row.col.f32.{a_fmt}.{b_fmt}.f32" in text
    done = subprocess.run([*common, "-c", str(unit), "-o", str(tmp_path / "f.o")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr[-3000:]
