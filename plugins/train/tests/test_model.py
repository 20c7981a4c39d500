"""The GPT: parameter count, Paddle layouts, causality and the rotary embedding's relative-position property."""

import numpy as np
import pytest

import oarlock
from oarlock_train.model import GPT, GPTConfig, apply_rotary, document_mask_of, rotary_tables, segment_ids


def test_parameter_count_and_layouts():
    oarlock.seed(0)
    model = GPT()
    # embedding 256x128 + 4 blocks x (qkv 128x384+384, proj 128x128+128, fc 128x512+512, proj 512x128+128,
    # two RMSNorm weights of 128) + final RMSNorm 128 + untied head 128x256 without bias
    assert model.num_parameters() == 857_728
    state = model.state_dict()
    assert list(state["blocks.0.attn.qkv.weight"].shape) == [128, 384]  # Paddle layout: [in, out]
    assert list(state["head.weight"].shape) == [128, 256]
    assert not any(k.startswith("rope_") for k in state)  # the rotary tables are derived, not saved


def test_forward_is_causal():
    oarlock.seed(0)
    model = GPT(GPTConfig(max_seq_len=16))
    model.eval()
    tokens = np.random.default_rng(0).integers(0, 256, (2, 16))
    changed = tokens.copy()
    changed[:, 10:] = (changed[:, 10:] + 1) % 256
    with oarlock.no_grad():
        a = model(oarlock.to_tensor(tokens)).numpy()
        b = model(oarlock.to_tensor(changed)).numpy()
    assert a.shape == (2, 16, 256)
    np.testing.assert_allclose(a[:, :10], b[:, :10], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[:, 10:], b[:, 10:])


def test_segment_ids_start_a_document_at_each_separator():
    tokens = np.array([[5, 6, 0, 7, 0, 0, 8, 9], [0, 1, 2, 3, 4, 5, 6, 7]])
    np.testing.assert_array_equal(segment_ids(tokens), [[0, 0, 1, 1, 2, 3, 3, 3], [1, 1, 1, 1, 1, 1, 1, 1]])
    sri = document_mask_of(oarlock.to_tensor(tokens))
    assert list(sri.shape) == [2, 1, 8, 1] and str(sri.dtype).endswith("int32")
    # LTS[j] = end of j's document (REFERENCE.md's causal-document encoding)
    np.testing.assert_array_equal(sri.numpy()[:, 0, :, 0], [[2, 2, 4, 4, 5, 8, 8, 8], [8] * 8])


def test_document_mask_keeps_attention_inside_each_document():
    oarlock.seed(0)
    model = GPT(GPTConfig(max_seq_len=16))
    model.eval()
    tokens = np.random.default_rng(0).integers(1, 256, (2, 16))
    tokens[:, 6] = 0  # a separator: positions 6.. are the second document
    changed = tokens.copy()
    changed[:, :6] = (changed[:, :6] + 1) % 255 + 1  # another first document, no separator added
    with oarlock.no_grad():
        masked = [model(oarlock.to_tensor(t), document_mask_of(t)).numpy() for t in (tokens, changed)]
        plain = [model(oarlock.to_tensor(t)).numpy() for t in (tokens, changed)]
    np.testing.assert_allclose(masked[0][:, 6:], masked[1][:, 6:], rtol=1e-5, atol=1e-5)
    assert not np.allclose(plain[0][:, 6:], plain[1][:, 6:])  # without the mask the first document leaks
    # inside the first document the mask changes nothing: causal attention is already in-document there
    np.testing.assert_allclose(masked[0][:, :6], plain[0][:, :6], rtol=1e-4, atol=1e-5)


def test_rotary_depends_only_on_relative_position():
    cos, sin = rotary_tables(12, 8, 10000.0)
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def at_all_positions(v):  # [1, T, 1, D] with v at every position
        return oarlock.to_tensor(np.tile(v, (1, 12, 1, 1)))
    rq = apply_rotary(at_all_positions(q), cos, sin).numpy()[0, :, 0]
    rk = apply_rotary(at_all_positions(k), cos, sin).numpy()[0, :, 0]
    np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q), rtol=1e-5)  # a rotation
    dots = rq @ rk.T  # dots[m, n] = <R_m q, R_n k> depends on m - n only
    np.testing.assert_allclose(dots[5, 2], dots[9, 6], rtol=1e-4)
    np.testing.assert_allclose(dots[0, 0], q @ k, rtol=1e-5)


def test_config_errors_and_too_long_input():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(width=130, heads=4)
    oarlock.seed(0)
    model = GPT(GPTConfig(max_seq_len=8))
    with pytest.raises(ValueError, match="max_seq_len 8"):
        model(oarlock.to_tensor(np.zeros((1, 9), np.int64)))
