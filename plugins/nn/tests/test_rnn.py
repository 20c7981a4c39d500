"""SimpleRNN, LSTM (with proj_size), GRU, their cells and the RNN / BiRNN wrappers against real Paddle 3.2
with the same weights: state_dict keys (both of Paddle's key sets), outputs, final states, every parameter's
and the input's gradient; forward and bidirectional, several layers, time-major, given initial states and
sequence_length.

One case has another oracle: bidirectional with sequence_length AND given initial states, where Paddle's
fused CPU rnn kernel gives the reverse direction's weight_hh a gradient its own step-by-step BiRNN (and a
finite-difference check) disagree with; there the gradients are compared with paddle.nn.BiRNN over the same
cells."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn

RNG = np.random.default_rng(0)


def _copy(theirs, ours):
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in theirs.state_dict().items()})


def _flat(states):
    return list(states) if isinstance(states, (tuple, list)) else [states]


def _inputs(framework, x, states, seq):
    args = [framework.to_tensor(x, stop_gradient=False)]
    if states is not None:
        args.append(tuple(framework.to_tensor(s) for s in states) if len(states) == 2 else
                    framework.to_tensor(states[0]))
    elif seq is not None:
        args.append(None)
    if seq is not None:
        args.append(framework.to_tensor(np.array(seq)))
    return args


def _run_and_compare(paddle, theirs, ours, x, states=None, seq=None, grads=True):
    p_args, o_args = _inputs(paddle, x, states, seq), _inputs(oarlock, x, states, seq)
    p_out, p_states = theirs(*p_args)
    o_out, o_states = ours(*o_args)
    np.testing.assert_allclose(o_out.numpy(), p_out.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(_flat(o_states), _flat(p_states)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    weights = RNG.standard_normal(p_out.shape).astype(np.float32)
    ((p_out * paddle.to_tensor(weights)).sum() + sum(s.sum() for s in _flat(p_states))).backward()
    ((o_out * oarlock.to_tensor(weights)).sum() + sum(s.sum() for s in _flat(o_states))).backward()
    if grads:
        for (name, a), (_, b) in zip(theirs.named_parameters(), ours.named_parameters()):
            np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(o_args[0].grad.numpy(), p_args[0].grad.numpy(), rtol=1e-4, atol=1e-5)
    return ours


def _initial(kind, layers, batch, hidden, proj=0):
    states = [RNG.standard_normal((layers, batch, proj or hidden)).astype(np.float32)]
    if kind == "LSTM":
        states.append(RNG.standard_normal((layers, batch, hidden)).astype(np.float32))
    return states


CASES = [({}, False, None), ({"num_layers": 2, "direction": "bidirect"}, False, None), ({"num_layers": 2}, True, None),
         ({}, False, [5, 2, 3]), ({"direction": "bidirect"}, False, [5, 2, 3]), ({}, True, [5, 2, 3]),
         ({"time_major": True, "num_layers": 2, "direction": "bidirectional"}, True, None)]


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
@pytest.mark.parametrize("kwargs,initial,seq", CASES)
def test_recurrent_layers_match_paddle(paddle, kind, kwargs, initial, seq):
    theirs, ours = getattr(paddle.nn, kind)(4, 6, **kwargs), getattr(nn, kind)(4, 6, **kwargs)
    _copy(theirs, ours)
    x = RNG.standard_normal((5, 3, 4) if kwargs.get("time_major") else (3, 5, 4)).astype(np.float32)
    layers = kwargs.get("num_layers", 1) * (1 if kwargs.get("direction", "forward") == "forward" else 2)
    _run_and_compare(paddle, theirs, ours, x, _initial(kind, layers, 3, 6) if initial else None, seq)


@pytest.mark.parametrize("kind", ["SimpleRNN", "LSTM", "GRU"])
def test_bidirectional_with_lengths_and_initial_states(paddle, kind):
    theirs, ours = getattr(paddle.nn, kind)(4, 6, direction="bidirect"), getattr(nn, kind)(4, 6, direction="bidirect")
    _copy(theirs, ours)
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    states = _initial(kind, 2, 3, 6)
    _run_and_compare(paddle, theirs, ours, x, states, [5, 2, 3], grads=False)   # values against the fused kernel
    # gradients against Paddle's step-by-step BiRNN over the same two cells (its outputs are not zeroed past
    # the lengths, so the comparison uses the valid positions only)
    cell = {"SimpleRNN": "SimpleRNNCell", "LSTM": "LSTMCell", "GRU": "GRUCell"}[kind]
    p_bi = paddle.nn.BiRNN(getattr(paddle.nn, cell)(4, 6), getattr(paddle.nn, cell)(4, 6))
    o_bi = nn.BiRNN(getattr(nn, cell)(4, 6), getattr(nn, cell)(4, 6))
    _copy(p_bi, o_bi)
    per_direction = [tuple(paddle.to_tensor(s[d]) for s in states) for d in range(2)]
    if kind != "LSTM":
        per_direction = [p[0] for p in per_direction]
    valid = (np.arange(5)[None, :] < np.array([5, 2, 3])[:, None]).astype(np.float32)[..., None]
    weights = RNG.standard_normal((3, 5, 12)).astype(np.float32) * valid
    p_out, _ = p_bi(paddle.to_tensor(x), per_direction, paddle.to_tensor(np.array([5, 2, 3])))
    (p_out * paddle.to_tensor(weights)).sum().backward()
    o_states = [tuple(oarlock.to_tensor(s[d]) for s in states) for d in range(2)]
    if kind != "LSTM":
        o_states = [s[0] for s in o_states]
    o_out, _ = o_bi(oarlock.to_tensor(x), o_states, oarlock.to_tensor(np.array([5, 2, 3])))
    (o_out * oarlock.to_tensor(weights)).sum().backward()
    for (name, a), (_, b) in zip(p_bi.named_parameters(), o_bi.named_parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_lstm_projection_and_paddle_flat_names(paddle):
    """proj_size: Paddle's flat names shift onto the next parameters (weight_ih_l1 is layer 0's weight_ho);
    kept so Paddle's state_dict loads."""
    theirs, ours = paddle.nn.LSTM(4, 6, 2, proj_size=3), nn.LSTM(4, 6, 2, proj_size=3)
    _copy(theirs, ours)
    assert ours.weight_ih_l1 is ours[0].cell.weight_ho
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    _run_and_compare(paddle, theirs, ours, x, _initial("LSTM", 2, 3, 6, proj=3))


@pytest.mark.parametrize("cell", ["SimpleRNNCell", "LSTMCell", "GRUCell"])
def test_cells_and_rnn_wrapper(paddle, cell):
    theirs, ours = getattr(paddle.nn, cell)(4, 6), getattr(nn, cell)(4, 6)
    _copy(theirs, ours)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    p_h, p_state = theirs(paddle.to_tensor(x))
    o_h, o_state = ours(oarlock.to_tensor(x))
    np.testing.assert_allclose(o_h.numpy(), p_h.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(_flat(o_state), _flat(p_state)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    p_rnn, o_rnn = paddle.nn.RNN(theirs, is_reverse=True), nn.RNN(ours, is_reverse=True)
    seq = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    _run_and_compare(paddle, p_rnn, o_rnn, seq, seq=[5, 2, 3])


def test_errors():
    with pytest.raises(ValueError, match="LSTM: direction must be 'forward', 'bidirect' or 'bidirectional'"):
        nn.LSTM(4, 6, direction="both")
    with pytest.raises(ValueError, match=r"LSTMCell: proj_size must be 0 or in \[1, hidden_size=6\), got 6"):
        nn.LSTMCell(4, 6, proj_size=6)
    with pytest.raises(TypeError, match="RNN: cell must be an RNNCellBase, got Linear"):
        nn.RNN(nn.Linear(2, 2))
