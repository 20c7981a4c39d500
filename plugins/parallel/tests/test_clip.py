"""HybridParallelClipGrad in one process: with no groups it is ClipGradByGlobalNorm (float64 numpy is the
oracle for the norm); non-global-norm clips pass through wrap_clip unchanged. Its multi-rank behaviour
(slices summed over the model-parallel group, pieces over sharding groups) is checked in the hybrid and
sharding MPI jobs."""

import numpy as np
import pytest

import oarlock
from oarlock.nn import ClipGradByGlobalNorm, ClipGradByValue
from oarlock_parallel import marks
from oarlock_parallel.clip import HybridParallelClipGrad, wrap_clip


def _pairs(rng):
    params = [oarlock.nn.Linear(4, 3).weight, oarlock.nn.Linear(2, 5).bias]
    grads = [oarlock.to_tensor(rng.standard_normal(p.shape).astype("float32")) for p in params]
    return params, grads


@pytest.mark.parametrize("clip_norm", [0.5, 100.0])
def test_one_process_equals_global_norm_clip(clip_norm):
    rng = np.random.default_rng(0)
    params, grads = _pairs(rng)
    want = [g.numpy().astype(np.float64) for g in grads]
    norm = np.sqrt(sum((w ** 2).sum() for w in want))
    want = [w * clip_norm / max(norm, clip_norm) for w in want]
    marks.mark(params[0], is_distributed=True)   # no split group: a slice counts locally
    clip = wrap_clip(ClipGradByGlobalNorm(clip_norm))
    assert isinstance(clip, HybridParallelClipGrad)
    np.testing.assert_allclose(float(clip.global_norm(grads, [True, False])), norm, rtol=1e-6)
    clip(list(zip(params, grads)))
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)


def test_wrap_clip_passes_other_clips_and_unwraps():
    by_value = ClipGradByValue(1.0)
    assert wrap_clip(by_value) is by_value and wrap_clip(None) is None
    inner = ClipGradByGlobalNorm(2.0, auto_skip_clip=True)
    twice = wrap_clip(wrap_clip(inner))
    assert twice._clip_inner is inner and twice.clip_norm == 2.0 and twice.auto_skip_clip
    with pytest.raises(TypeError, match="HybridParallelClipGrad\\(\\): clip must be a ClipGradByGlobalNorm, got"):
        HybridParallelClipGrad(by_value)
