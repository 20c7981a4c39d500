"""Automatic mixed precision (Paddle's paddle.amp): oarlock.amp.auto_cast, decorate, GradScaler.

- autocast: auto_cast (and amp_guard, torch's autocast), the autocast queries, the op lists
- decorate: O2 preparation of models (low-precision parameters) and optimizers (float32 master weights)
- grad_scaler: GradScaler / AmpScaler, dynamic loss scaling

The casting itself happens in the dispatcher (oarlock.dispatch.set_autocast and each op's `amp` policy).
"""

from oarlock_nn.amp import autocast, decorate, grad_scaler

_QUERIES = (autocast.is_autocast_enabled, autocast.get_autocast_dtype, autocast.get_autocast_cpu_dtype,
            autocast.get_autocast_gpu_dtype)
EXPORTS = {
    "oarlock.amp": [autocast.auto_cast, autocast.amp_guard, autocast.autocast, autocast.is_float16_supported,
                    autocast.is_bfloat16_supported, autocast.white_list, autocast.black_list, *_QUERIES,
                    decorate.decorate, decorate.amp_decorate, grad_scaler.GradScaler, grad_scaler.AmpScaler,
                    grad_scaler.OptimizerState],
    # Paddle exports the queries at the top level too; torch's oarlock.autocast spelling joins them
    "oarlock": [*_QUERIES, autocast.autocast],
}


def register_api(api):
    for namespace, objects in EXPORTS.items():
        for obj in objects:
            api.export(namespace, obj.__name__, obj)
