"""torch.nn.RNN / LSTM / GRU: torch's parameter names and layouts (weight_ih_l0 [gates * H, in], ..._reverse for
the backward direction), gate orders (LSTM i, f, g, o; GRU r, z, n with r applied to the hidden projection), init
U(-1/sqrt(H), 1/sqrt(H)), batch_first, stacked layers with dropout between them, bidirectional; a Python loop
over time steps of façade ops, so autograd follows."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.facade.nn import functional as F
from oarlock_torch_proxy.facade.nn import init
from oarlock_torch_proxy.facade.nn.module import Module, Parameter
from oarlock_torch_proxy.missing import not_implemented


def _lstm_cell(x, state, w_ih, w_hh, b_ih, b_hh):
    h, c = state
    gates = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = oarlock.chunk(gates, 4, axis=-1)
    c = oarlock.sigmoid(f) * c + oarlock.sigmoid(i) * oarlock.tanh(g)
    return oarlock.sigmoid(o) * oarlock.tanh(c), c


def _gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    xr, xz, xn = oarlock.chunk(F.linear(x, w_ih, b_ih), 3, axis=-1)
    hr, hz, hn = oarlock.chunk(F.linear(h, w_hh, b_hh), 3, axis=-1)
    r, z = oarlock.sigmoid(xr + hr), oarlock.sigmoid(xz + hz)
    n = oarlock.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def _rnn_cell(activation):
    def cell(x, h, w_ih, w_hh, b_ih, b_hh):
        pre = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
        return oarlock.tanh(pre) if activation == "tanh" else F.relu(pre)
    return cell


class _RNNBase(Module):
    _gates = 1
    _has_cell_state = False

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None, nonlinearity="tanh"):
        super().__init__()
        if proj_size:
            not_implemented(f"torch.nn.{type(self).__name__}", "with proj_size")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        self.nonlinearity = nonlinearity
        directions = 2 if bidirectional else 1
        bound = 1 / math.sqrt(hidden_size)
        dt = dtype or oarlock.get_default_dtype()
        for layer in range(num_layers):
            for suffix in ([""] if directions == 1 else ["", "_reverse"]):
                width = input_size if layer == 0 else hidden_size * directions
                shapes = {"weight_ih": [self._gates * hidden_size, width],
                          "weight_hh": [self._gates * hidden_size, hidden_size]}
                if bias:
                    shapes.update(bias_ih=[self._gates * hidden_size], bias_hh=[self._gates * hidden_size])
                for name, shape in shapes.items():
                    p = Parameter(oarlock.zeros(shape, dtype=dt))
                    init.uniform_(p, -bound, bound)
                    setattr(self, f"{name}_l{layer}{suffix}", p)

    def _cell(self):
        raise NotImplementedError

    def _weights(self, layer, suffix):
        get = lambda n: getattr(self, f"{n}_l{layer}{suffix}") if self.bias or n.startswith("weight") else None  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def forward(self, input, hx=None):
        batched = input.ndim == 3
        if not batched:
            input = input.unsqueeze(1 if not self.batch_first else 0)
        if self.batch_first:
            input = input.transpose([1, 0, 2])   # [T, N, C]
        steps, n = input.shape[0], input.shape[1]
        directions = 2 if self.bidirectional else 1
        zeros = oarlock.zeros([self.num_layers * directions, n, self.hidden_size], dtype=input.dtype)
        if hx is None:
            hx = (zeros, zeros) if self._has_cell_state else zeros
        elif not batched:
            hx = tuple(h.unsqueeze(1) for h in hx) if self._has_cell_state else hx.unsqueeze(1)
        cell = self._cell()
        finals_h, finals_c = [], []
        layer_input = input
        for layer in range(self.num_layers):
            outputs = []
            for d, suffix in enumerate([""] if directions == 1 else ["", "_reverse"]):
                index = layer * directions + d
                state = (hx[0][index], hx[1][index]) if self._has_cell_state else hx[index]
                weights = self._weights(layer, suffix)
                order = range(steps) if d == 0 else range(steps - 1, -1, -1)
                seq = [None] * steps
                for t in order:
                    state = cell(layer_input[t], state, *weights)
                    seq[t] = state[0] if self._has_cell_state else state
                outputs.append(oarlock.stack(seq, axis=0))
                finals_h.append(state[0] if self._has_cell_state else state)
                if self._has_cell_state:
                    finals_c.append(state[1])
            layer_input = outputs[0] if directions == 1 else oarlock.concat(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        output = layer_input.transpose([1, 0, 2]) if self.batch_first else layer_input
        h_n = oarlock.stack(finals_h, axis=0)
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n = h_n.squeeze(1)
        if self._has_cell_state:
            c_n = oarlock.stack(finals_c, axis=0)
            return output, (h_n, c_n.squeeze(1) if not batched else c_n)
        return output, h_n


class LSTM(_RNNBase):
    _gates = 4
    _has_cell_state = True

    def _cell(self):
        return _lstm_cell


class GRU(_RNNBase):
    _gates = 3

    def _cell(self):
        return _gru_cell


class RNN(_RNNBase):
    def _cell(self):
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN(): nonlinearity must be 'tanh' or 'relu', got {self.nonlinearity!r}")
        return _rnn_cell(self.nonlinearity)
