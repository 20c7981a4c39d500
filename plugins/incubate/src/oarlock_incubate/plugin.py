"""Entry point of oarlock-incubate: exports oarlock.incubate.nn.functional and oarlock.incubate.nn names.

Nothing heavy is imported here; the families load when the api hook runs."""

from oarlock import hookimpl

FUNCTIONAL = "oarlock.incubate.nn.functional"
LAYERS = "oarlock.incubate.nn"
MANIPULATION = "oarlock.incubate.tensor.manipulation"
LAYER_MODULE = "oarlock.incubate.nn.layer.fused_linear"   # Paddle's module path, imported by PaddleFormers


@hookimpl
def oarlock_register_api(api):
    from oarlock_incubate import fused_linear, offload, rms_norm, rotary, swiglu
    api.namespace("oarlock.incubate", doc="Paddle's paddle.incubate: fused operations and layers.")
    api.namespace(LAYERS, doc="Fused layers (paddle.incubate.nn).")
    api.namespace(FUNCTIONAL, doc="Fused functions (paddle.incubate.nn.functional).")
    for module in (rotary, swiglu, fused_linear, rms_norm):
        for name in module.FUNCTIONS:
            api.export(FUNCTIONAL, name, getattr(module, name))
    for name in offload.FUNCTIONS:
        api.export(MANIPULATION, name, getattr(offload, name))
    for name in fused_linear.LAYERS:
        api.export(LAYERS, name, getattr(fused_linear, name))
        api.export(LAYER_MODULE, name, getattr(fused_linear, name))
