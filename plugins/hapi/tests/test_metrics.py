"""oarlock.metric against Paddle 3.2's own metric classes and accuracy function on the same inputs: compute,
update's per-batch value, accumulate over several batches, reset and name."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import oarlock


def _batches(seed, n_batches=3, rows=17, classes=7):
    rng = np.random.RandomState(seed)
    return [(rng.rand(rows, classes).astype("float32"), rng.randint(0, classes, size=(rows, 1)).astype("int64"))
            for _ in range(n_batches)]


def _run_accuracy(framework, batches, label_form, **kwargs):
    metric = framework.metric.Accuracy(**kwargs)
    per_batch = []
    for scores, labels in batches:
        if label_form == "flat":
            labels = labels.reshape(-1)
        elif label_form == "onehot":
            labels = np.eye(scores.shape[1], dtype="float32")[labels.reshape(-1)]
        correct = metric.compute(framework.to_tensor(scores), framework.to_tensor(labels))
        per_batch.append(metric.update(correct.numpy()))
    return metric.name(), per_batch, metric.accumulate(), correct.numpy()


@pytest.mark.parametrize("label_form", ["column", "flat", "onehot"])
@pytest.mark.parametrize("kwargs", [{}, {"topk": (1, 3, 5)}, {"topk": (2,), "name": "hit"}])
def test_accuracy_matches_paddle(label_form, kwargs):
    batches = _batches(0)
    ours = _run_accuracy(oarlock, batches, label_form, **kwargs)
    ref = _run_accuracy(paddle, batches, label_form, **kwargs)
    assert ours[0] == ref[0]
    assert ours[1] == ref[1]
    assert ours[2] == ref[2]
    np.testing.assert_array_equal(ours[3], ref[3])
    assert ours[3].dtype == ref[3].dtype


def test_accuracy_reset_and_update_from_tensor():
    metric = oarlock.metric.Accuracy(topk=(1, 2))
    reference = paddle.metric.Accuracy(topk=(1, 2))
    scores, labels = _batches(1, n_batches=1)[0]
    for m, fw in ((metric, oarlock), (reference, paddle)):
        m.update(m.compute(fw.to_tensor(scores), fw.to_tensor(labels)))   # a Tensor straight into update
    assert metric.accumulate() == reference.accumulate()
    metric.reset()
    assert metric.accumulate() == [0.0, 0.0] and metric.total == [0.0, 0.0] and metric.count == [0, 0]


def _binary_inputs(seed, rows=40):
    rng = np.random.RandomState(seed)
    preds = rng.rand(rows, 1).astype("float32")
    preds[:6, 0] = [0.5, 0.49999, 0.5, 0.0, 1.0, 0.5]   # rounding edges: Precision floors x+0.5, Recall uses rint
    labels = rng.randint(0, 2, size=(rows, 1)).astype("int64")
    return preds, labels


@pytest.mark.parametrize("cls", ["Precision", "Recall"])
def test_precision_recall_match_paddle(cls):
    ours, ref = getattr(oarlock.metric, cls)(), getattr(paddle.metric, cls)()
    for seed in range(3):
        preds, labels = _binary_inputs(seed)
        ours.update(preds, labels)
        ref.update(paddle.to_tensor(preds), paddle.to_tensor(labels))
        assert ours.accumulate() == ref.accumulate()
    assert ours.name() == ref.name() == cls.lower()
    assert getattr(oarlock.metric, cls)(name="p2").name() == "p2"
    ours.reset()
    assert ours.accumulate() == 0.0


@pytest.mark.parametrize("num_thresholds", [4095, 200, 7])
def test_auc_matches_paddle(num_thresholds):
    ours = oarlock.metric.Auc(num_thresholds=num_thresholds)
    ref = paddle.metric.Auc(num_thresholds=num_thresholds)
    rng = np.random.RandomState(num_thresholds)
    for _ in range(3):
        labels = rng.randint(0, 2, size=(50, 1)).astype("int64")
        positive = np.clip(0.35 * labels[:, 0] + 0.65 * rng.rand(50), 0, 1)
        preds = np.stack([1 - positive, positive], axis=1).astype("float32")
        ours.update(oarlock.to_tensor(preds), labels)
        ref.update(preds, labels)
        assert ours.accumulate() == pytest.approx(ref.accumulate(), rel=1e-12, abs=0)
    assert 0.5 < ours.accumulate() < 1.0
    ours.reset()
    assert ours.accumulate() == 0.0 and ours.name() == "auc"


@pytest.mark.parametrize("k", [1, 2, 5])
def test_accuracy_function_matches_paddle(k):
    rng = np.random.RandomState(k)
    scores = rng.rand(23, 6).astype("float32")
    labels = rng.randint(0, 6, size=(23, 1)).astype("int64")
    ref = paddle.metric.accuracy(paddle.to_tensor(scores), paddle.to_tensor(labels), k=k)
    correct, total = oarlock.zeros([1], dtype="int32"), oarlock.zeros([1], dtype="int32")
    ours = oarlock.metric.accuracy(oarlock.to_tensor(scores), oarlock.to_tensor(labels.astype("int32")), k=k,
                                   correct=correct, total=total)
    assert ours.dtype == oarlock.float32 and ours.shape == list(ref.shape) == []
    assert float(ours) == float(ref)
    assert int(correct.numpy().item()) == round(float(ref) * 23) and int(total.numpy().item()) == 23


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"Precision\.update\(\): argument 'preds' must be a numpy ndarray or "
                                         r"Tensor, got list"):
        oarlock.metric.Precision().update([0.3], np.array([1]))
    with pytest.raises(ValueError, match=r"Auc\.update\(\): argument 'preds' must be \[N, 2\]"):
        oarlock.metric.Auc().update(np.zeros((3,), "float32"), np.zeros((3,), "int64"))
    with pytest.raises(ValueError, match=r"accuracy\(\): argument 'label' must be a \[N, 1\] int Tensor"):
        oarlock.metric.accuracy(oarlock.ones([4, 3]), oarlock.zeros([4], dtype="int64"))
    with pytest.raises(ValueError, match=r"Accuracy\(\): argument 'topk' must be a non-empty sequence"):
        oarlock.metric.Accuracy(topk=(0,))
    with pytest.raises(TypeError):
        oarlock.metric.Metric()   # abstract, as Paddle's
