"""Paddle's framework names on oarlock (base, framework, jit, static, finfo/iinfo, places, Tensor queries),
each checked against the installed Paddle 3.2 (the `paddle` fixture is the real one)."""

import hashlib
import textwrap

import numpy as np
import pytest

import oarlock
from oarlock.compat import paddle_alias


def test_modes_match_paddle(paddle):
    import oarlock.base.framework as bf
    import oarlock.framework as fw
    assert oarlock.in_dynamic_mode() is paddle.in_dynamic_mode() is True
    assert bf.in_dygraph_mode() is paddle.base.framework.in_dygraph_mode()
    assert fw.in_dynamic_or_pir_mode() is paddle.framework.in_dynamic_or_pir_mode()
    assert fw.in_pir_mode() is paddle.framework.in_pir_mode()
    assert fw.use_pir_api() is paddle.framework.use_pir_api()
    assert repr(fw._current_expected_place()) == repr(paddle.framework._current_expected_place()) == "Place(cpu)"
    assert bf._current_expected_place_() is oarlock.CPUPlace()
    with fw._no_check_dy2st_diff():
        assert float(oarlock.ones([2]).sum()) == 2.0
    with pytest.raises(RuntimeError, match="only in dynamic"):
        oarlock.enable_static()
    oarlock.disable_static()   # dynamic already: nothing to do
    assert oarlock.CUDAPinnedPlace() is oarlock.CPUPlace() and str(oarlock.XPUPlace(1)) == "xpu:1"
    with pytest.raises(ValueError, match="dev_id"):
        oarlock.XPUPlace(-1)


def test_base_core_names(paddle):
    from oarlock.base import core
    assert core.eager.Tensor is oarlock.Tensor and oarlock.framework.core.eager.Tensor is oarlock.Tensor
    for member in ("FLOAT32", "BFLOAT16", "INT64", "BOOL", "COMPLEX64", "FLOAT8_E4M3FN"):
        ours, theirs = getattr(core.DataType, member), getattr(paddle.base.core.DataType, member)
        assert theirs == getattr(paddle, member.lower()) and ours == getattr(oarlock, member.lower()), member
    assert core.is_compiled_with_rocm() is False
    assert isinstance(core.is_compiled_with_cuda(), bool) and isinstance(core.is_compiled_with_xpu(), bool)
    for dtype in ("bfloat16", "float16", "float32", "int64", "bool", "complex64"):   # bfloat16 is "uint16" there
        assert oarlock.base.data_feeder.convert_dtype(getattr(oarlock, dtype)) == \
            paddle.base.data_feeder.convert_dtype(getattr(paddle, dtype)), dtype
    assert oarlock.base.data_feeder.convert_dtype(np.float32) == paddle.base.data_feeder.convert_dtype(np.float32)
    p = oarlock.nn.Linear(2, 2).weight
    assert isinstance(p, oarlock.base.framework.EagerParamBase)
    assert not isinstance(oarlock.ones([1]), oarlock.base.framework.EagerParamBase)
    assert isinstance(p, oarlock.base.framework.Parameter) is isinstance(
        paddle.create_parameter([2], "float32"), paddle.base.framework.Parameter) is True
    for value in (1.0, np.ones(2)):
        assert isinstance(value, oarlock.static.Variable) is isinstance(value, paddle.static.Variable) is False
    assert isinstance(oarlock.ones([1]), oarlock.base.framework.Variable) is \
        isinstance(paddle.ones([1]), paddle.static.Variable) is True   # Paddle's dynamic-mode answer
    with pytest.raises(RuntimeError, match="no static graph"):
        oarlock.static.Variable()
    with oarlock.base.dygraph.guard("cpu"):
        assert oarlock.get_device() == "cpu"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"])
def test_finfo_matches_paddle(paddle, dtype):
    ours, theirs = oarlock.finfo(getattr(oarlock, dtype)), paddle.finfo(getattr(paddle, dtype))
    for field in ("min", "max", "eps", "resolution", "smallest_normal", "tiny", "bits", "dtype"):
        assert getattr(ours, field) == pytest.approx(getattr(theirs, field), rel=1e-6), field
        assert type(getattr(ours, field)) is type(getattr(theirs, field)), field
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_iinfo_matches_paddle(paddle, dtype):
    ours, theirs = oarlock.iinfo(dtype), paddle.iinfo(getattr(paddle, dtype))
    assert (ours.min, ours.max, ours.bits, ours.dtype) == (theirs.min, theirs.max, theirs.bits, theirs.dtype)
    assert repr(ours) == repr(theirs)


def test_finfo_iinfo_refuse_what_paddle_refuses(paddle):
    for fn, bad in ((oarlock.finfo, "int32"), (oarlock.finfo, "float8_e4m3fn"), (oarlock.iinfo, "float32"),
                    (oarlock.iinfo, "bool")):
        with pytest.raises(ValueError, match=f"oarlock.{fn.__name__}\\(\\): dtype must be one of"):
            fn(bad)
        with pytest.raises(ValueError):
            getattr(paddle, fn.__name__)(getattr(paddle, bad))
    with pytest.raises(TypeError, match="oarlock.finfo"):
        oarlock.finfo("no_such_dtype")


def test_input_spec_matches_paddle(paddle):
    from oarlock.static import InputSpec
    for args in (([None, 3], "float32", "x"), ([2, -1, 4], "int64", None), ((5,), "bfloat16", "y", True)):
        ours, theirs = InputSpec(*args), paddle.static.InputSpec(*args)
        assert ours.shape == theirs.shape and ours.name == theirs.name
        assert ours.stop_gradient == theirs.stop_gradient and str(ours.dtype) == str(theirs.dtype)
        assert repr(ours) == repr(theirs)
        assert ours.batch(8).shape == theirs.batch(8).shape
        assert ours.unbatch().shape == theirs.unbatch().shape
    array = np.ones((2, 3), np.int32)
    assert repr(InputSpec.from_numpy(array, "a")) == repr(paddle.static.InputSpec.from_numpy(array, "a"))
    spec = InputSpec.from_tensor(oarlock.ones([4, 5], dtype="float16"), name="t")
    assert repr(spec) == repr(paddle.static.InputSpec.from_tensor(paddle.ones([4, 5], dtype="float16"), name="t"))
    assert InputSpec([2], "float32", "x") == InputSpec([2], "float32", "x") != InputSpec([3], "float32", "x")
    with pytest.raises(ValueError, match="InputSpec\\(\\): every size"):
        InputSpec([2, -3])
    with pytest.raises(ValueError, match="unbatch"):
        InputSpec([]).unbatch()


def test_to_static_keeps_eager_results(paddle):
    def f(x):
        return (x * x).sum() if x.mean() > 0 else -x.sum()   # data-dependent control flow stays eager

    data = np.linspace(-1, 2, 6, dtype=np.float32)
    g = oarlock.jit.to_static(f)
    assert g is f
    assert float(g(oarlock.to_tensor(data))) == pytest.approx(float(f(paddle.to_tensor(data))), rel=1e-6)
    assert float(g(oarlock.to_tensor(-data))) == pytest.approx(float(f(paddle.to_tensor(-data))), rel=1e-6)
    layer = oarlock.nn.Linear(3, 2)
    assert oarlock.jit.to_static(layer, input_spec=[oarlock.static.InputSpec([None, 3])]) is layer
    decorated = oarlock.jit.to_static(input_spec=[oarlock.static.InputSpec([None, 3])], full_graph=True)(f)
    assert decorated is f
    assert oarlock.jit.not_to_static(f) is f and oarlock.jit.not_to_static()(f) is f
    oarlock.jit.ignore_module([np])
    oarlock.jit.enable_to_static(False)
    with pytest.raises(TypeError, match="input_spec"):
        oarlock.jit.to_static(f, input_spec=3)
    with pytest.raises(TypeError, match="enable_to_static_bool"):
        oarlock.jit.enable_to_static("yes")


def _arr(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(dtype)


def test_tensor_queries_match_paddle(paddle):
    data = _arr(2, 3, 4)
    ours, theirs = oarlock.to_tensor(data), paddle.to_tensor(data)
    assert int(ours.numel()) == int(theirs.numel()) and ours.numel().dtype == oarlock.int64
    for name in ("numel", "rank", "shape", "is_empty"):
        a, b = getattr(oarlock, name)(ours), getattr(paddle, name)(theirs)
        assert a.numpy().tolist() == b.numpy().tolist() and str(a.dtype) == str(b.dtype), name
    assert ours.mT.shape == theirs.mT.shape and np.array_equal(ours.mT.numpy(), theirs.mT.numpy())
    assert ours.strides == theirs.strides and ours.get_strides() == theirs.get_strides()
    t_ours, t_theirs = ours.transpose([2, 0, 1]), theirs.transpose([2, 0, 1])
    assert t_ours.is_contiguous() == t_theirs.is_contiguous() is False
    assert t_ours.strides == t_theirs.strides
    assert t_ours.contiguous().is_contiguous() and np.array_equal(t_ours.contiguous().numpy(), t_theirs.numpy())
    assert ours.contiguous() is ours
    for dtype in ("float32", "bfloat16", "int64", "bool"):
        assert oarlock.ones([1], dtype=dtype).element_size() == paddle.ones([1], dtype=dtype).element_size()
    assert ours.ndimension() == theirs.ndimension() == 3 and ours.value() is ours
    assert ours._numel() == theirs._numel() and ours._is_initialized() is theirs._is_initialized() is True
    assert ours._place_str == theirs._place_str
    assert ours._md5sum() == theirs._md5sum() == hashlib.md5(data.tobytes()).hexdigest()
    assert ours.data_ptr() == ours.reshape([-1]).data_ptr() != 0   # a view shares the storage
    assert oarlock.broadcast_shape([2, 1, 3], [4, 1]) == paddle.broadcast_shape([2, 1, 3], [4, 1])
    for dtype in ("float32", "int32", "bool", "bfloat16"):
        a, b = oarlock.ones([1], dtype=dtype), paddle.ones([1], dtype=dtype)
        assert oarlock.is_floating_point(a) == paddle.is_floating_point(b), dtype
        assert oarlock.is_integer(a) == paddle.is_integer(b) and a.is_integer() == b.is_integer(), dtype
    assert oarlock.is_tensor(ours) and not oarlock.is_tensor(data) and oarlock.tolist(ours) == paddle.tolist(theirs)
    copy = ours._copy_to(oarlock.CPUPlace(), True)
    assert copy is not ours and np.array_equal(copy.numpy(), data)
    matrix, p_matrix = oarlock.to_tensor(data[0]), paddle.to_tensor(data[0])
    assert matrix.t_() is matrix and p_matrix.t_() is p_matrix and matrix.shape == p_matrix.shape == [4, 3]
    np.testing.assert_array_equal(matrix.numpy(), p_matrix.numpy())
    with pytest.raises(ValueError, match="Tensor.mT"):
        oarlock.ones([3]).mT  # noqa: B018
    with pytest.raises(TypeError, match="oarlock.numel\\(\\): x must be"):
        oarlock.numel(data)


def test_create_parameter_matches_paddle(paddle):
    w = oarlock.create_parameter([3, 4], "float32")
    pw = paddle.create_parameter([3, 4], "float32")
    assert w.shape == pw.shape and str(w.dtype) == str(pw.dtype) and w.stop_gradient is pw.stop_gradient is False
    bound = np.sqrt(6.0 / (3 + 4))   # Xavier-uniform, Paddle's default for a weight
    assert np.abs(w.numpy()).max() <= bound and w.numpy().std() > 0.1
    b = oarlock.create_parameter([4], "float64", is_bias=True)
    assert np.array_equal(b.numpy(), paddle.create_parameter([4], "float64", is_bias=True).numpy())
    c = oarlock.create_parameter([2], "float32", default_initializer=oarlock.nn.initializer.Constant(0.5))
    pc = paddle.create_parameter([2], "float32", default_initializer=paddle.nn.initializer.Constant(0.5))
    assert np.array_equal(c.numpy(), pc.numpy()) and isinstance(c, oarlock.nn.Parameter)
    with pytest.raises(TypeError, match="create_parameter"):
        oarlock.create_parameter(3, "float32")


@pytest.mark.parametrize("name, args", [
    ("reshape_", ([3, 4],)), ("transpose_", ([1, 0],)), ("unsqueeze_", (1,)), ("flatten_", ()),
])
def test_view_inplace_variants_match_paddle(paddle, name, args):
    data = _arr(4, 3)
    results = []
    for lib in (oarlock, paddle):
        x = lib.to_tensor(data, stop_gradient=False)
        h = x * 2.0
        out = getattr(h, name)(*args)
        assert out is h
        weight = lib.to_tensor(np.arange(np.prod(h.shape), dtype=np.float32).reshape(h.shape))
        (h * h * weight).sum().backward()
        results.append((h.shape, h.numpy(), x.grad.numpy(), h.inplace_version))
    (s1, v1, g1, n1), (s2, v2, g2, n2) = results
    assert s1 == s2 and n1 == n2
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_allclose(g1, g2, rtol=1e-6)


def test_view_inplace_on_a_saved_tensor_is_caught():
    x = oarlock.to_tensor(_arr(2, 3), stop_gradient=False)
    h = x * 1.0
    y = h.exp()            # exp saves its output: y itself is not touched
    z = h * h              # multiply saves h
    h.reshape_([3, 2])
    y.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_view_inplace_through_a_view_rebases_the_base():
    base = oarlock.to_tensor(_arr(2, 6), stop_gradient=False) * 1.0
    v = base[0]                       # a view of row 0
    v.reshape_([2, 3])
    v.mul_(3.0)                       # written through the reshaped view: row 0 of base is tripled
    np.testing.assert_allclose(base.numpy()[0], _arr(2, 6)[0] * 3.0, rtol=1e-6)


def test_paddle_style_code_runs_on_the_alias(tmp_path, monkeypatch):
    (tmp_path / "framework_user.py").write_text(textwrap.dedent("""
        import paddle
        from paddle.base import core
        from paddle.framework import _current_expected_place
        from paddle.static import InputSpec

        @paddle.jit.to_static(input_spec=[InputSpec([None, 4], "float32", "x")])
        def run(x):
            assert isinstance(x, core.eager.Tensor) and paddle.in_dynamic_mode()
            w = paddle.create_parameter([4, 2], "float32")
            y = paddle._C_ops.matmul(x, w, False, False)
            eps = paddle.finfo(x.dtype).eps
            return paddle._C_ops.softmax(y, -1), eps, str(_current_expected_place())
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with paddle_alias():
        import framework_user
        out, eps, place = framework_user.run(oarlock.ones([3, 4]))
    assert out.shape == [3, 2] and np.allclose(out.numpy().sum(-1), 1.0)
    assert eps == float(np.finfo(np.float32).eps) and place == "cpu"


def test_framework_modules_library_code_imports(paddle):
    from oarlock.base import core, framework
    for name in ("DENSE_TENSOR", "LOD_TENSOR", "FP32", "BF16", "INT64", "SELECTED_ROWS"):
        assert int(getattr(core.VarDesc.VarType, name)) == int(getattr(paddle.base.core.VarDesc.VarType, name)), name
    assert [int(getattr(core.AmpLevel, n)) for n in ("O0", "O1", "O2")] == \
        [int(getattr(paddle.base.core.AmpLevel, n)) for n in ("O0", "O1", "O2")]
    ours, theirs = framework._dygraph_tracer(), paddle.base.framework._dygraph_tracer()
    assert (ours._has_grad, ours._amp_level.name, ours._amp_dtype) == \
        (theirs._has_grad, theirs._amp_level.name, theirs._amp_dtype)
    # Paddle's Layer.eval() flips its global tracer's _train_mode, so an earlier test's model leaves it False:
    # compare with Paddle's default, not with whatever state the process is in
    assert ours._train_mode is True
    with oarlock.no_grad():
        assert ours._has_grad is False
    with oarlock.amp.auto_cast(level="O1", dtype="bfloat16"):   # (Paddle's CPU build turns auto_cast off)
        assert (ours._amp_level.name, ours._amp_dtype) == ("O1", "bfloat16")
    ours._has_grad = False
    try:
        assert not oarlock.is_grad_enabled()
    finally:
        ours._has_grad = True
    for name in ("LOSS_NAN_ERROR", "LOSS_INF_ERROR"):
        assert getattr(oarlock.framework.recall_error, name) == getattr(paddle.framework.recall_error, name)
    assert oarlock.framework.io.EagerParamBase is oarlock.nn.Parameter
    for dtype in ("float32", "bfloat16", "int64"):
        assert oarlock.common_ops_import.convert_dtype(getattr(oarlock, dtype)) == \
            paddle.common_ops_import.convert_dtype(getattr(paddle, dtype))
        assert str(oarlock.common_ops_import.convert_np_dtype_to_dtype_(dtype)) == \
            str(paddle.common_ops_import.convert_np_dtype_to_dtype_(dtype))
    nested = {"a": [1, (2, 3)], "b": 4}
    assert oarlock.utils.map_structure(lambda v: v * 2, nested) == paddle.utils.map_structure(lambda v: v * 2, nested)
    assert oarlock.version.full_version == paddle.version.full_version
    assert (oarlock.version.major, oarlock.version.minor) == (paddle.version.major, paddle.version.minor)
    with oarlock.LazyGuard():
        layer = oarlock.nn.Linear(2, 3)
    assert layer.weight.shape == [2, 3]
    assert oarlock.disable_signal_handler() is None
    oarlock.set_flags({"FLAGS_embedding_deterministic": 1})
    assert oarlock.get_flags(["FLAGS_embedding_deterministic"]) == {"FLAGS_embedding_deterministic": 1}
    with pytest.raises(ValueError, match="never set"):
        oarlock.get_flags("FLAGS_not_set_here")


def test_tensors_take_attributes_and_plugin_properties_are_set_before_read():
    import subprocess
    import sys
    code = textwrap.dedent("""
        import oarlock
        x = oarlock.ones([2])
        assert "mT" in type(x).__dict__          # a plugin's property is on the class before any read
        try:
            x.strides = [1]                      # the property (no setter) takes the assignment, not __dict__
        except AttributeError as exc:
            print("refused", "strides" in str(exc) or "setter" in str(exc))
        p = oarlock.create_parameter([2, 2], "float32")
        p.split_axis, p.is_firstly_shared = 1, True   # Paddle model code's own marks
        print(p.split_axis, p.is_firstly_shared, hasattr(oarlock.ones([1]), "split_axis"))
        from oarlock.autograd.py_layer import PyLayer
        print(PyLayer is oarlock.autograd.PyLayer)
    """)
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "True", "1", "True", "False", "True"]


def test_dtype_conversion_methods_and_tensor_module_match_paddle(paddle):
    from oarlock_compat.tensor_names import CONVERSIONS
    data = _arr(2, 3)
    ours, theirs = oarlock.to_tensor(data), paddle.to_tensor(data)
    for method in CONVERSIONS:
        a, b = getattr(ours, method)(), getattr(theirs, method)()
        assert str(a.dtype) == str(b.dtype), method
        as_float = "complex128" if a.dtype.is_complex else "float64"   # Paddle's bfloat16 numpy() gives raw bits
        np.testing.assert_array_equal(a.astype(as_float).numpy(), b.astype(as_float).numpy(), err_msg=method)
    for query in ("is_dense", "is_dist", "is_sparse", "is_sparse_coo", "is_sparse_csr", "is_selected_rows"):
        assert getattr(ours, query)() is getattr(theirs, query)(), query
    assert ours.is_same_shape(ours) and not ours.is_same_shape(ours.T)
    assert str(ours.type) == str(theirs.type) == "VarType.DENSE_TENSOR"
    assert ours.data is not ours and np.array_equal(ours.data.numpy(), theirs.data.numpy())
    ours.data, theirs.data = oarlock.to_tensor(data * 2), paddle.to_tensor(data * 2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(ours.apply(lambda t: t + 1).numpy(), theirs.apply(lambda t: t + 1).numpy())
    assert ours.apply_(lambda t: t * 3) is ours and theirs.apply_(lambda t: t * 3) is theirs
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(RuntimeError, match="requires gradient"):
        oarlock.to_tensor([1.0], stop_gradient=False).apply(lambda t: t)
    # paddle.tensor: the creation function and the module of tensor functions at once
    assert oarlock.tensor([1, 2]).tolist() == paddle.tensor([1, 2]).tolist()
    assert str(oarlock.tensor([1.5]).dtype) == str(paddle.tensor([1.5]).dtype)
    oarlock.seed(1)
    assert oarlock.tensor.normal(0.0, 1.0, [3, 2]).shape == paddle.tensor.normal(0.0, 1.0, [3, 2]).shape
    assert oarlock.tensor.math.add is oarlock.add and oarlock.tensor.creation.to_tensor is oarlock.to_tensor
    with pytest.raises(AttributeError, match="oarlock.tensor has no attribute 'no_such_fn'"):
        oarlock.tensor.no_such_fn  # noqa: B018


def test_device_build_queries_match_paddle(paddle):
    # the CPU Paddle wheel and oarlock's installed plugins give the same answers to these
    for name in ("is_compiled_with_xpu", "is_compiled_with_rocm", "is_compiled_with_ipu", "is_compiled_with_cinn",
                 "is_compiled_with_distribute", "get_cudnn_version"):
        assert getattr(oarlock.device, name)() == getattr(paddle.device, name)(), name
    assert oarlock.is_compiled_with_xpu() is oarlock.base.core.is_compiled_with_xpu() is False
