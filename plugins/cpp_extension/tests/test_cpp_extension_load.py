"""oarlock.utils.cpp_extension.load(): C++ custom operators written against "paddle/extension.h", compiled at
first use, cached, registered as oarlock ops with C++ (or Python) autograd rules.

The ops run in a subprocess (scripts/cpp_ops_job.py, once per module) because load() registers a plugin in
the process-wide registry, which the other test files of this pytest worker must not see; a second process
then loads the same sources to show the cache. Oracles: float64 numpy formulas and central differences of
the op itself (computed by the job, compared here)."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
JOB = HERE / "scripts" / "cpp_ops_job.py"
BETA = float(np.float32(1.7))   # the job's softplus beta, as the kernel's `float beta` holds it


def _job(build_dir, report, *extra):
    done = subprocess.run([sys.executable, str(JOB), str(build_dir), str(report), *extra], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(Path(str(report) + ".json").read_text())


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(report, arrays, second process's report): the first process compiles, the second hits the cache."""
    root = tmp_path_factory.mktemp("cpp_extension")
    first = _job(root / "build", root / "first")
    arrays = dict(np.load(str(root / "first") + ".npz"))
    second = _job(root / "build", root / "second", "--cache-only")
    return first, arrays, second


def _softplus(x):
    return np.log1p(np.exp(BETA * x)) / BETA


def test_forward_matches_float64_numpy(job):
    _, a, _ = job
    np.testing.assert_allclose(a["softplus_float64"], _softplus(a["x"]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a["softplus_float32"], _softplus(a["x"].astype(np.float32).astype(np.float64)),
                               rtol=1e-5, atol=1e-6)
    assert a["softplus_float32"].dtype == np.float32
    np.testing.assert_array_equal(a["prod"], a["x"] * a["y"])
    np.testing.assert_array_equal(a["sum"], a["x"] + a["y"])
    np.testing.assert_allclose(a["combine"], 2.0 * (a["x"] + a["y"]) + 0.5, rtol=1e-12)
    np.testing.assert_allclose(a["combine_bias"], -(a["x"] + 2 * a["y"]), rtol=1e-12)


def test_cpp_backward_matches_finite_differences(job):
    _, a, _ = job
    np.testing.assert_allclose(a["softplus_grad"], a["softplus_grad_fd"], rtol=1e-6, atol=1e-8)


def test_cpp_double_backward_matches_finite_differences(job):
    """PD_BUILD_DOUBLE_GRAD_OP is the gradient op's own rule: create_graph=True, then differentiate again."""
    _, a, _ = job
    np.testing.assert_allclose(a["softplus_grad2"], a["softplus_grad2_fd"], rtol=1e-6, atol=1e-8)


def test_two_outputs_and_an_output_without_gradient(job):
    _, a, _ = job
    x, y = a["x"], a["y"]
    np.testing.assert_allclose(a["mul_add_gx"], 2 * y + 2 * (x + y), rtol=1e-12)
    np.testing.assert_allclose(a["mul_add_gy"], 2 * x + 2 * (x + y), rtol=1e-12)
    # only Prod in the loss: Sum's gradient reaches the C++ backward as zeros
    np.testing.assert_array_equal(a["prod_only_gx"], y)
    np.testing.assert_array_equal(a["prod_only_gy"], x)


def test_python_autograd_rule(job):
    _, a, _ = job
    np.testing.assert_allclose(a["cube_grad"], 3 * a["x"] ** 2, rtol=1e-12)


def test_inplace_op_and_its_inplace_gradient(job):
    first, a, _ = job
    assert first["inplace_returns_input"]
    np.testing.assert_allclose(a["inplace_values"], 3.0 * a["x"], rtol=1e-12)
    w = np.random.default_rng(1).standard_normal(a["x"].shape)   # the job's weights
    np.testing.assert_allclose(a["inplace_grad"], 3.0 * w + 18.0 * a["x"], rtol=1e-12)
    assert "leaf Tensor that requires grad" in first["error_inplace_leaf"]


def test_second_load_hits_the_cache(job):
    first, _, second = job
    print(f"\nfirst load (compile): {first['load_seconds']:.3f} s; second load, new process (cache): "
          f"{second['load_seconds']:.3f} s")
    assert first["compiled"] and not second["compiled"]
    assert second["library"] == first["library"] and second["mtime"] == first["mtime"]   # not rebuilt
    assert second["load_seconds"] < first["load_seconds"]
    assert first["same_module_again"]    # and in the same process, the same module


def test_registered_as_op_public_name_and_plugin(job):
    first, _, _ = job
    assert first["op_library"] and first["public_name"]
    # 6 forward ops + 3 gradient ops + 1 second-order gradient op, each one CPU kernel
    assert first["plugin_kernels"] == 10


def test_zero_copy(job):
    first, _, _ = job
    assert first["identity_shares_memory"]            # an input returned as is: the same array
    assert first["output_owner"].startswith("c_char_Array")   # outputs: views of the C++ allocation


def test_bad_input_errors_name_op_and_cause(job):
    first, _, _ = job
    assert "test_softplus()" in first["error_int_dtype"] and "int64" in first["error_int_dtype"]
    assert "beta must be positive, got -1" in first["error_pd_check"] and "test_ops.cc" in first["error_pd_check"]
    assert first["error_attr_type"].startswith("TypeError") and "'scale'" in first["error_attr_type"]
    assert 'got "max"' in first["error_attr_str"]
    assert "'cpx_test_ops' is already registered" in first["error_reload_other"]
    # an op using what oarlock lacks (a vector output) is left out with a warning, and its function says why
    assert any("'test_vector_out' left out" in w and "vector outputs" in w for w in first["warnings"])
    assert first["error_left_out"].startswith("NotImplementedError") and "paddle::Vec" in first["error_left_out"]


def test_compile_error_carries_the_compilers_message(tmp_path):
    from oarlock_cpp_extension import CompileError
    from oarlock_cpp_extension.build import build
    with pytest.raises(CompileError) as info:
        build("broken", [str(HERE / "csrc" / "broken_op.cc")], build_directory=str(tmp_path))
    message = str(info.value)
    assert "broken_op.cc" in message and "no_such_method_here" in message and "error" in message
    assert not list(tmp_path.rglob("*.so"))   # nothing half-built left for the cache to find


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"), reason="nvcc is not installed")
def test_cuda_source_compiles_with_nvcc(tmp_path):
    """A .cu source goes through nvcc and the library links the CUDA runtime. This machine has no GPU: the
    CUDA kernel is compiled, not run; the library's CPU branch runs through the ABI (nothing registered)."""
    from oarlock_cpp_extension import abi
    from oarlock_cpp_extension.build import build
    result = build("relu_cuda", [str(HERE / "csrc" / "relu_dispatch.cc"), str(HERE / "csrc" / "relu_gpu.cu")],
                   cflags=["-O0"], cuda_cflags=["-O0"], build_directory=str(tmp_path))
    lib = abi.bind(ctypes.CDLL(str(result.path)))
    assert lib.oarlock_built_with_cuda() == 1
    assert [m["name"] for m in abi.describe(lib)] == ["test_relu_cuda"]
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    (out,) = abi.run(lib, 0, "test_relu_cuda", [[x]], [], np)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
