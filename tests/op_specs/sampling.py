"""Specs for the sampling family: multinomial, bernoulli, randperm. Their results are random, so each
spec is a custom check: shapes and dtypes, reproducibility under oarlock.seed, the support (only
categories of nonzero weight; no repeats without replacement; 0/1 values; a permutation), the
frequencies against the probabilities (tolerances of about five standard deviations), and the
errors for bad input.
"""

import numpy as np

from op_specs.base import OpSpec


def _raises(fn, *words):
    try:
        fn()
    except (TypeError, ValueError) as exc:
        for word in words:
            assert word in str(exc), f"error {exc!r} should mention {word!r}"
    else:
        raise AssertionError(f"expected an error mentioning {words}")


def _check_multinomial(ol):
    weights = ol.to_tensor([[1.0, 3.0, 0.0, 4.0], [0.0, 0.0, 2.0, 2.0]])
    ol.seed(3)
    first = ol.multinomial(weights, 2)
    ol.seed(3)
    again = weights.multinomial(2)
    assert first.dtype == "int64" and first.shape == [2, 2]
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    for row, picks in zip(weights.numpy(), first.numpy()):
        assert len(set(picks)) == len(picks) and all(row[p] > 0 for p in picks), (row, picks)
    # with replacement: frequencies follow the normalised weights
    draws = ol.multinomial(ol.to_tensor([1.0, 3.0, 0.0, 4.0], dtype="float64"), 40000, replacement=True).numpy()
    assert draws.shape == (40000,)
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq, [1 / 8, 3 / 8, 0, 4 / 8], atol=0.012)
    # without replacement: the first pick follows the weights too
    firsts = np.array([ol.multinomial(ol.to_tensor([[1.0, 3.0]] * 2000), 1).numpy()[:, 0] for _ in range(5)])
    assert abs(firsts.mean() - 0.75) < 0.025
    every = ol.multinomial(ol.to_tensor([5.0, 1.0, 2.0]), 3).numpy()
    assert sorted(every) == [0, 1, 2]
    _raises(lambda: ol.multinomial(ol.to_tensor([1.0, 0.0]), 2), "multinomial", "num_samples")
    _raises(lambda: ol.multinomial(ol.to_tensor([1.0, -1.0]), 1), "multinomial", "non-negative")
    _raises(lambda: ol.multinomial(ol.to_tensor([0.0, 0.0]), 1), "multinomial", "positive total")
    _raises(lambda: ol.multinomial(ol.ones([2, 2, 2]), 1), "multinomial", "2-D")
    _raises(lambda: ol.multinomial(ol.to_tensor([1, 2]), 1), "multinomial", "int64")


def _check_bernoulli(ol):
    p = ol.full([20000], 0.3, dtype="float64")
    ol.seed(5)
    out = ol.bernoulli(p)
    ol.seed(5)
    np.testing.assert_array_equal(out.numpy(), p.bernoulli().numpy())
    assert out.dtype == "float64" and out.shape == [20000]
    values = out.numpy()
    assert set(np.unique(values)) <= {0.0, 1.0}
    assert abs(values.mean() - 0.3) < 0.02
    probs = ol.to_tensor([[0.0, 1.0], [1.0, 0.0]], dtype="float32")
    np.testing.assert_array_equal(ol.bernoulli(probs).numpy(), probs.numpy())
    assert ol.bernoulli(probs, p=1.0).numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert ol.bernoulli(ol.rand([3], dtype="bfloat16")).dtype == "bfloat16"
    _raises(lambda: ol.bernoulli(ol.to_tensor([1.5])), "bernoulli", "[0, 1]")
    _raises(lambda: ol.bernoulli(probs, p=2.0), "bernoulli", "'p'")
    _raises(lambda: ol.bernoulli(ol.to_tensor([0, 1])), "bernoulli", "int64")


def _check_randperm(ol):
    ol.seed(11)
    first = ol.randperm(50)
    ol.seed(11)
    assert first.numpy().tolist() == ol.randperm(50).numpy().tolist()
    assert first.dtype == "int64" and sorted(first.numpy().tolist()) == list(range(50))
    assert first.numpy().tolist() != list(range(50))
    for dtype in ("int32", "float32", "float64"):
        out = ol.randperm(7, dtype=dtype)
        assert out.dtype == dtype and sorted(out.numpy().tolist()) == list(range(7))
    assert ol.randperm(0).shape == [0]
    _raises(lambda: ol.randperm(-1), "randperm", "non-negative")
    _raises(lambda: ol.randperm(3, dtype="bool"), "randperm", "bool")
    _raises(lambda: ol.randperm(3, dtype="float16"), "randperm", "float16")


SPECS = [
    OpSpec("multinomial", [], check=_check_multinomial),
    OpSpec("bernoulli", [], check=_check_bernoulli),
    OpSpec("randperm", [], check=_check_randperm),
]
