"""Entry point of oarlock-incubate: exports oarlock.incubate.nn.functional and oarlock.incubate.nn names, and
paddle.nn.quant's quantization functions into oarlock.nn.quant.

Nothing heavy is imported here; the families load when the api and ops hooks run. The ops hook defines the
internal ops behind moe_gate_dispatch, moe_combine, fused_partial_rope and fused_bias_act, so that a device
plugin can register kernels for them."""

from oarlock import hookimpl

FUNCTIONAL = "oarlock.incubate.nn.functional"
LAYERS = "oarlock.incubate.nn"
QUANT = "oarlock.nn.quant"   # Paddle's paddle.nn.quant (weight-only / LLM.int8 quantization) lives here too
MANIPULATION = "oarlock.incubate.tensor.manipulation"
LAYER_MODULE = "oarlock.incubate.nn.layer.fused_linear"   # Paddle's module path, imported by PaddleFormers
FP8 = "oarlock.incubate.fp8"   # FP8 training (TransformerEngine's names: fp8_autocast, recipes, Fp8Linear)


@hookimpl
def oarlock_register_api(api):
    from oarlock_incubate import (fp8_autocast, fp8_fused, fp8_gemm, fp8_quant, fp8_recipe, fused_act, fused_linear,
                                  fused_norm, fused_rope_partial, moe_aux, moe_combine, moe_dispatch, offload, quant,
                                  quant_w4, rms_norm, rotary, swiglu)
    api.namespace("oarlock.incubate", doc="Paddle's paddle.incubate: fused operations and layers.")
    api.namespace(LAYERS, doc="Fused layers (paddle.incubate.nn).")
    api.namespace(FUNCTIONAL, doc="Fused functions (paddle.incubate.nn.functional).")
    for module in (rotary, swiglu, fused_linear, rms_norm, fused_norm, fused_rope_partial, fused_act, moe_dispatch,
                   moe_combine, moe_aux, fp8_quant, fp8_gemm, fp8_fused):
        for name in module.FUNCTIONS:
            api.export(FUNCTIONAL, name, getattr(module, name))
    api.namespace(FP8, doc=fp8_autocast.__doc__)
    for name in fp8_autocast.FUNCTIONS + fp8_autocast.CLASSES:
        api.export(FP8, name, getattr(fp8_autocast, name))
    for name in fp8_recipe.RECIPES + ("recipe_named",):
        api.export(FP8, name, getattr(fp8_recipe, name))
    api.export("oarlock.amp", "fp8_autocast", fp8_autocast.fp8_autocast)   # AMP's FP8 switch, beside auto_cast
    api.namespace(QUANT, doc=quant.__doc__)
    for module in (quant, quant_w4):
        for name in module.FUNCTIONS:
            api.export(QUANT, name, getattr(module, name))
    for name in offload.FUNCTIONS:
        api.export(MANIPULATION, name, getattr(offload, name))
    for name in fused_linear.LAYERS:
        api.export(LAYERS, name, getattr(fused_linear, name))
        api.export(LAYER_MODULE, name, getattr(fused_linear, name))


@hookimpl
def oarlock_register_ops(ops):
    from oarlock_incubate import fp8_ops, fused_act, fused_rope_partial, moe_combine, moe_dispatch
    fp8_ops.register(ops)
    moe_dispatch.register(ops)
    moe_combine.register(ops)
    fused_rope_partial.register(ops)
    fused_act.register(ops)
