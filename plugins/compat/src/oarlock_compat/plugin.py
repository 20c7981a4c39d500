"""Entry point of oarlock-compat ("paddle_compat"): the Paddle alias switches (oarlock.compat) and the names
of Paddle's framework that code written for Paddle calls: oarlock.base (core, framework, dygraph,
param_attr, data_feeder), oarlock.framework, oarlock.jit, oarlock.static, oarlock._C_ops, and top-level
names (in_dynamic_mode, finfo/iinfo, places, ...).

The entry point's name sorts after "nn": its api hook runs once oarlock.nn's names are registered, and it
re-exports `ParamAttr` and `Parameter` from there (the manager registers api hooks in entry-point order)."""

import oarlock
from oarlock import hookimpl
from oarlock_compat import (alias, base_core, c_ops, dtype_info, dygraph, framework_extras, input_spec, jit, places,
                            tensor_names)

ALIAS = ("enable_paddle_alias", "disable_paddle_alias", "paddle_alias", "paddle_alias_enabled")
MODES = {"in_dygraph_mode": dygraph.in_dygraph_mode, "in_dynamic_mode": dygraph.in_dynamic_mode,
         "in_pir_mode": dygraph.in_pir_mode, "in_dynamic_or_pir_mode": dygraph.in_dynamic_or_pir_mode,
         "use_pir_api": dygraph.use_pir_api}
PRIVATE = {"_current_expected_place": dygraph.current_expected_place,
           "_current_expected_place_": dygraph.current_expected_place,
           "_no_check_dy2st_diff": dygraph.no_check_dy2st_diff, "_dygraph_tracer": framework_extras.dygraph_tracer}


def _convert_dtype(dtype) -> str:
    """base.data_feeder.convert_dtype: the dtype's name ("float32"), for a dtype, a numpy dtype or a string;
    bfloat16 is "uint16", as Paddle still names it there."""
    name = oarlock.dtypes.convert_dtype(dtype).name
    return "uint16" if name == "bfloat16" else name


@hookimpl
def oarlock_register_api(api):
    api.namespace("oarlock.compat", doc="Run code written for other frameworks (PaddlePaddle) on oarlock unchanged.")
    for name in ALIAS:
        api.export("oarlock.compat", name, getattr(alias, name))

    nn = oarlock.nn   # registered before this hook (see the module docstring)
    top = {"in_dynamic_mode": dygraph.in_dynamic_mode, "enable_static": dygraph.enable_static,
           "disable_static": dygraph.disable_static, "finfo": dtype_info.finfo, "iinfo": dtype_info.iinfo,
           "CUDAPinnedPlace": places.CUDAPinnedPlace, "XPUPlace": places.XPUPlace, "ParamAttr": nn.ParamAttr}
    for name, obj in {**top, **tensor_names.TOP}.items():
        api.export("oarlock", name, obj)
    for name, obj in tensor_names.METHODS.items():
        api.export("Tensor", name, obj)

    api.namespace("oarlock.base", doc="Paddle's paddle.base (formerly fluid) names that dygraph code calls.")
    for ns in ("oarlock.base.core", "oarlock.framework.core", "oarlock.core"):
        api.namespace(ns, doc="Paddle's core module names: eager.Tensor, DataType, VarDesc, AmpLevel, places, "
                              "is_compiled_with_*.")
        for name, obj in {**base_core.NAMES, "VarDesc": framework_extras.VarDesc,
                          "AmpLevel": framework_extras.AmpLevel}.items():
            api.export(ns, name, obj)
        api.export(ns + ".eager", "Tensor", oarlock.Tensor)
    for ns in ("oarlock.base", "oarlock.base.framework", "oarlock.framework"):
        for name, obj in {**MODES, "ParamAttr": nn.ParamAttr, "CPUPlace": oarlock.CPUPlace,
                          "CUDAPlace": oarlock.CUDAPlace, "CUDAPinnedPlace": places.CUDAPinnedPlace,
                          "XPUPlace": places.XPUPlace, "CustomPlace": oarlock.CustomPlace}.items():
            api.export(ns, name, obj)
    for name, obj in PRIVATE.items():
        api.export("oarlock.framework", name, obj)
        if name != "_no_check_dy2st_diff":   # Paddle has that one in paddle.framework only
            api.export("oarlock.base.framework", name, obj)
    for name in ("is_compiled_with_cuda", "is_compiled_with_xpu", "is_compiled_with_rocm"):
        api.export("oarlock.base", name, base_core.NAMES[name])
    api.export("oarlock.base", "enable_dygraph", dygraph.enable_dygraph)
    api.export("oarlock.base.framework", "Variable", dygraph.Variable)
    api.export("oarlock.base.framework", "EagerParamBase", nn.Parameter)
    api.export("oarlock.base.framework", "Parameter", nn.Parameter)   # in dynamic mode Paddle's isinstance agrees
    for name, obj in {"get_default_dtype": oarlock.get_default_dtype, "set_default_dtype": oarlock.set_default_dtype,
                      "no_grad": oarlock.no_grad, "seed": oarlock.seed, "dtype": oarlock.dtype,
                      "enable_static": dygraph.enable_static, "disable_static": dygraph.disable_static}.items():
        api.export("oarlock.framework", name, obj)
    api.export("oarlock.base.dygraph", "guard", dygraph.guard)
    api.export("oarlock.base.dygraph", "no_grad", oarlock.no_grad)
    api.export("oarlock.base.dygraph", "enabled", dygraph.in_dynamic_mode)
    api.export("oarlock.base.param_attr", "ParamAttr", nn.ParamAttr)
    api.export("oarlock.base.data_feeder", "convert_dtype", _convert_dtype)

    fx = framework_extras
    for name, obj in {"LazyGuard": fx.LazyGuard, "disable_signal_handler": fx.disable_signal_handler,
                      "get_flags": fx.get_flags, "set_flags": fx.set_flags,
                      "is_compiled_with_xpu": base_core.is_compiled_with_xpu,
                      "is_compiled_with_rocm": base_core.is_compiled_with_rocm}.items():
        api.export("oarlock", name, obj)
    api.export("oarlock.framework.io", "EagerParamBase", nn.Parameter)
    for name in ("LOSS_NAN_ERROR", "LOSS_INF_ERROR", "AADIFF_ERROR", "SHARDING_PAD_NON_ZERO_ERROR"):
        api.export("oarlock.framework.recall_error", name, getattr(fx, name))
    for ns in ("oarlock.common_ops_import", "oarlock.framework"):
        api.export(ns, "convert_np_dtype_to_dtype_", fx.convert_np_dtype_to_dtype_)
    api.export("oarlock.common_ops_import", "convert_dtype", fx.convert_dtype)
    api.export("oarlock.utils", "map_structure", fx.map_structure)
    api.namespace("oarlock.version", doc="The Paddle version whose API oarlock follows (3.2.0); no CUDA build.")
    for name, obj in fx.VERSION.items():
        api.export("oarlock.version", name, obj)

    api.namespace("oarlock.jit", doc="paddle.jit for eager execution: to_static keeps functions and Layers eager.")
    for name in ("to_static", "not_to_static", "ignore_module", "enable_to_static"):
        api.export("oarlock.jit", name, getattr(jit, name))

    api.namespace("oarlock.static", doc="paddle.static's names that dynamic-mode code uses (InputSpec, Variable).")
    api.export("oarlock.static", "InputSpec", input_spec.InputSpec)
    api.export("oarlock.static", "Variable", dygraph.Variable)

    api.namespace("oarlock._C_ops", doc="Paddle's raw op entry points (positional attributes) on oarlock's ops.")
    for name, fn in c_ops.entry_points().items():
        api.export("oarlock._C_ops", name, fn)
