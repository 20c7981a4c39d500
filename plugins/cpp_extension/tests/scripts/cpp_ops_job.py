"""One process of test_cpp_extension_load.py: load() tests/csrc/test_ops.cc into BUILD_DIR, exercise its ops
and write what the tests assert on to REPORT (arrays to REPORT.npz, the rest to REPORT.json).

Run in a subprocess because load() registers the library as a plugin of the process-wide registry, which
the other test files of a pytest worker must not see. `--cache-only`: just load again and report the build.

    python cpp_ops_job.py BUILD_DIR REPORT [--cache-only]
"""

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import oarlock
from oarlock.plugin_api import array_of
from oarlock.plugins import default_manager
from oarlock.utils.cpp_extension import load

SOURCE = Path(__file__).resolve().parent.parent / "csrc" / "test_ops.cc"
BETA = 1.7


def central_differences(fn, x, w=None, eps=1e-6):
    """(w, d sum(fn(x) * w) / dx) by central differences; w: random weights unless given (float64 numpy)."""
    w = np.random.default_rng(1).standard_normal(fn(x).shape) if w is None else w
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = (np.sum(fn(up) * w) - np.sum(fn(down) * w)) / (2 * eps)
    return w, grad


def error_of(call) -> str:
    try:
        call()
    except Exception as exc:   # the test asserts on the type and message
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def main(build_dir, report, cache_only=False):
    start = time.perf_counter()
    # test_cube has no PD_BUILD_GRAD_OP: it takes this Python rule, d(x^3) = 3 x^2 g
    cube_rule = (lambda ctx, g: (g * 3.0 * ctx.saved[0] * ctx.saved[0],), ("x",))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ops = load("cpx_test_ops", [str(SOURCE)], build_directory=build_dir, extra_cxx_cflags=["-O0"],
                   grad_rules={"test_cube": cube_rule})
    seconds = time.perf_counter() - start
    build = ops.__oarlock_build__
    result = {"warnings": [str(w.message) for w in seen],
              "compiled": build.compiled, "load_seconds": seconds, "library": str(build.path),
              "mtime": build.path.stat().st_mtime_ns}
    if cache_only:
        Path(report + ".json").write_text(json.dumps(result))
        return
    arrays = {}
    rng = np.random.default_rng(0)
    x64 = rng.standard_normal((3, 5))
    y64 = rng.standard_normal((3, 5))
    arrays["x"], arrays["y"] = x64, y64

    # forward in both float dtypes
    for dt in ("float32", "float64"):
        arrays[f"softplus_{dt}"] = ops.test_softplus(oarlock.to_tensor(x64.astype(dt)), BETA).numpy()

    # first-order gradient through the C++ backward kernel, against central differences of the op itself
    def softplus(a):
        return ops.test_softplus(oarlock.to_tensor(a), BETA).numpy()
    w, fd = central_differences(softplus, x64)
    x = oarlock.to_tensor(x64, stop_gradient=False)
    (g,) = oarlock.grad([(ops.test_softplus(x, BETA) * oarlock.to_tensor(w)).sum()], [x], create_graph=True)
    arrays["softplus_grad"], arrays["softplus_grad_fd"] = g.numpy(), fd

    # second order through PD_BUILD_DOUBLE_GRAD_OP: d/dx sum(g * v), against differences of the C++ gradient
    v = rng.standard_normal(x64.shape)

    def first_grad(a):
        t = oarlock.to_tensor(a, stop_gradient=False)
        (gt,) = oarlock.grad([(ops.test_softplus(t, BETA) * oarlock.to_tensor(w)).sum()], [t])
        return gt.numpy()
    _, fd2 = central_differences(first_grad, x64, v)
    (gg,) = oarlock.grad([(g * oarlock.to_tensor(v)).sum()], [x])
    arrays["softplus_grad2"], arrays["softplus_grad2_fd"] = gg.numpy(), fd2

    # two inputs, two outputs; a loss that uses only one output (the other's gradient is zeros)
    xa, ya = (oarlock.to_tensor(a, stop_gradient=False) for a in (x64, y64))
    prod, total = ops.test_mul_add(xa, ya)
    arrays["prod"], arrays["sum"] = prod.numpy(), total.numpy()
    gx, gy = oarlock.grad([(prod * 2.0).sum() + (total * total).sum()], [xa, ya], retain_graph=True)
    arrays["mul_add_gx"], arrays["mul_add_gy"] = gx.numpy(), gy.numpy()
    gx_only, gy_only = oarlock.grad([prod.sum()], [xa, ya])
    arrays["prod_only_gx"], arrays["prod_only_gy"] = gx_only.numpy(), gy_only.numpy()

    # list input, optional input, list/string/bool attributes
    xs = [oarlock.to_tensor(x64), oarlock.to_tensor(y64)]
    arrays["combine"] = ops.test_combine(xs, None, [2.0, 0.5], "sum", False, [3, 5]).numpy()
    arrays["combine_bias"] = ops.test_combine(xs, oarlock.to_tensor(y64), [1.0, 0.0], "sum", True, [3, 5]).numpy()

    # the Python autograd rule given to load()
    xc = oarlock.to_tensor(x64, stop_gradient=False)
    (gc,) = oarlock.grad([ops.test_cube(xc).sum()], [xc])
    arrays["cube_grad"] = gc.numpy()

    # in place: the call returns its input, written; the gradient op runs on a copy of the incoming gradient,
    # which the loss's other term also receives
    xs_in = oarlock.to_tensor(x64)
    result["inplace_returns_input"] = ops.test_scale_inplace(xs_in, 3.0) is xs_in
    arrays["inplace_values"] = xs_in.numpy()
    leaf = oarlock.to_tensor(x64, stop_gradient=False)
    scaled = ops.test_scale_inplace(leaf * 1.0, 3.0)
    (g_in,) = oarlock.grad([(scaled * oarlock.to_tensor(w)).sum() + (scaled * scaled).sum()], [leaf])
    arrays["inplace_grad"] = g_in.numpy()
    result["error_inplace_leaf"] = error_of(lambda: ops.test_scale_inplace(leaf, 2.0))

    # zero copy: an input returned as is is the same memory; outputs are views of C++-allocated memory
    xi = oarlock.to_tensor(x64)
    same = ops.test_identity(xi)
    out = array_of(ops.test_softplus(xi, BETA))
    result["identity_shares_memory"] = bool(np.shares_memory(array_of(same), array_of(xi)))
    result["output_owner"] = type(out.base.base).__name__ if out.base is not None else "numpy"

    # registration: op library, public name, module attribute, plugin listing
    result["op_library"] = oarlock.ops.cpx_test_ops.test_softplus is ops.test_softplus
    result["public_name"] = oarlock.test_softplus is ops.test_softplus
    rows = {row.name: row for row in default_manager().info()}
    result["plugin_kernels"] = rows["cpx_test_ops"].kernels if "cpx_test_ops" in rows else None

    # bad input: errors that name the op and what was wrong
    ints = oarlock.to_tensor(np.arange(6).reshape(2, 3))
    result["error_left_out"] = error_of(lambda: ops.test_vector_out(xs[0]))
    result["error_int_dtype"] = error_of(lambda: ops.test_softplus(ints, BETA))
    result["error_pd_check"] = error_of(lambda: ops.test_softplus(oarlock.to_tensor(x64), -1.0))
    result["error_attr_type"] = error_of(lambda: ops.test_combine(xs, None, 2.0, "sum", False, [3, 5]))
    result["error_attr_str"] = error_of(lambda: ops.test_combine(xs, None, [1.0, 0.0], "max", False, [3, 5]))
    # the same name with other flags is another library: refused in this process, naming the earlier one
    result["error_reload_other"] = error_of(lambda: load("cpx_test_ops", [str(SOURCE)], build_directory=build_dir))
    result["same_module_again"] = load("cpx_test_ops", [str(SOURCE)], build_directory=build_dir,
                                       extra_cxx_cflags=["-O0"], grad_rules={"test_cube": cube_rule}) is ops
    np.savez(report + ".npz", **arrays)
    Path(report + ".json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--cache-only" in sys.argv)
