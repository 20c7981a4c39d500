"""nn.BeamSearchDecoder and nn.dynamic_decode against real Paddle 3.2 with the same cell, embedding and
output layer: the backtraced ids, sequence lengths, final log probabilities and cell states (GRU's single
state and LSTM's (h, c)), batch- and time-major."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn

VOCAB, HIDDEN, BATCH, BEAM = 7, 6, 2, 3
SEED = 1   # weights under which some beams end early (with end_token) in both cases


def _pair(paddle, make):
    theirs, ours = make(paddle.nn), make(nn)
    values = {k: v.numpy() * 3 for k, v in theirs.state_dict().items()}   # sharper logits: beams end early
    theirs.set_state_dict({k: paddle.to_tensor(v) for k, v in values.items()})
    ours.set_state_dict({k: oarlock.to_tensor(v) for k, v in values.items()})
    return theirs, ours


@pytest.mark.parametrize("cell,time_major", [("GRUCell", False), ("LSTMCell", True)])
def test_beam_search_matches_paddle(paddle, cell, time_major):
    paddle.seed(SEED)
    p_cell, o_cell = _pair(paddle, lambda m: getattr(m, cell)(5, HIDDEN))
    p_emb, o_emb = _pair(paddle, lambda m: m.Embedding(VOCAB, 5))
    p_out, o_out = _pair(paddle, lambda m: m.Linear(HIDDEN, VOCAB))
    theirs = paddle.nn.BeamSearchDecoder(p_cell, 0, 1, BEAM, embedding_fn=p_emb, output_fn=p_out)
    ours = nn.BeamSearchDecoder(o_cell, 0, 1, BEAM, embedding_fn=o_emb, output_fn=o_out)
    h0 = np.random.default_rng(0).standard_normal((BATCH, HIDDEN)).astype(np.float32)
    p_init = paddle.to_tensor(h0) if cell == "GRUCell" else (paddle.to_tensor(h0), paddle.to_tensor(h0 * 0.5))
    o_init = oarlock.to_tensor(h0) if cell == "GRUCell" else (oarlock.to_tensor(h0), oarlock.to_tensor(h0 * 0.5))
    p_ids, p_states, p_lengths = paddle.nn.dynamic_decode(theirs, inits=p_init, max_step_num=6,
                                                          output_time_major=time_major, return_length=True)
    o_ids, o_states, o_lengths = nn.dynamic_decode(ours, inits=o_init, max_step_num=6,
                                                   output_time_major=time_major, return_length=True)
    assert o_ids.shape == p_ids.shape
    np.testing.assert_array_equal(o_ids.numpy(), p_ids.numpy())
    np.testing.assert_array_equal(o_lengths.numpy(), p_lengths.numpy())
    assert (o_lengths.numpy() < 7).any()   # some beam ended with end_token before max_step_num
    np.testing.assert_allclose(o_states.log_probs.numpy(), p_states.log_probs.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(o_states.finished.numpy(), p_states.finished.numpy())
    for a, b in zip(o_states.cell_states if cell == "LSTMCell" else [o_states.cell_states],
                    p_states.cell_states if cell == "LSTMCell" else [p_states.cell_states]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_tile_beam_merge_with_batch(paddle):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ours = nn.BeamSearchDecoder.tile_beam_merge_with_batch(oarlock.to_tensor(x), 2)
    theirs = paddle.nn.BeamSearchDecoder.tile_beam_merge_with_batch(paddle.to_tensor(x), 2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(TypeError, match="dynamic_decode: decoder must be a Decoder"):
        nn.dynamic_decode(nn.GRUCell(2, 2))
