"""torch.backends: the switches libraries set or read (cuda.matmul.allow_tf32, cudnn.benchmark, mps); they change
nothing on the CPU façade, and the availability probes answer False."""

from __future__ import annotations

import types

from oarlock_torch_proxy.missing import missing_getattr

cuda = types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                                                          allow_bf16_reduced_precision_reduction=True),
                             is_built=lambda: False, flash_sdp_enabled=lambda: False,
                             mem_efficient_sdp_enabled=lambda: False, math_sdp_enabled=lambda: True)
cudnn = types.SimpleNamespace(benchmark=False, deterministic=False, allow_tf32=True, enabled=True,
                              is_available=lambda: False)
mps = types.SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
mkldnn = types.SimpleNamespace(is_available=lambda: False)
openmp = types.SimpleNamespace(is_available=lambda: False)

__getattr__ = missing_getattr("torch.backends")
