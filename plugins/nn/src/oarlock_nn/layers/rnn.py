"""Recurrent layers with Paddle 3.2's constructors, parameter names and return structures: the cells
(RNNCellBase, SimpleRNNCell, LSTMCell with proj_size, GRUCell), the wrappers RNN and BiRNN that run a cell
over time, and the multi-layer SimpleRNN, LSTM and GRU.

Cells follow Paddle's equations: gates = x W_ih^T + b_ih + h W_hh^T + b_hh; LSTM's four chunks are
(input, forget, cell, output); GRU's three are (reset, update, candidate) with the reset gate applied after
the hidden matmul and h = (h_prev - c) * z + c. With sequence_length, a sequence's state stops changing
after its length (Paddle's masked copy), and the multi-layer layers (like Paddle's fused rnn kernel) give
zeros as outputs past each length.

The multi-layer layers are LayerLists of RNN / BiRNN (sublayer keys "0.cell.weight_ih", "0.cell_fw..."), and
also hold the same parameters under Paddle's flat names (weight_ih_l0, weight_hh_l0_reverse, ...), so
state_dict has both key sets as Paddle's does and named_parameters lists each parameter once.
Initial states are [num_layers * num_directions, batch, hidden]; LSTM takes and returns (h, c).
"""

from __future__ import annotations

import math
import numbers

import oarlock
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.containers import LayerList
from oarlock_nn.layers.initializer import Constant, Uniform


class RNNCellBase(Layer):
    """The base of the cells: zero initial states shaped [batch, *state_shape]."""

    def get_initial_states(self, batch_ref, shape=None, dtype=None, init_value=0.0, batch_dim_idx=0):
        batch = batch_ref.shape[batch_dim_idx]
        shape = self.state_shape if shape is None else shape
        dtype = dtype or batch_ref.dtype
        if isinstance(shape[0], (list, tuple)):
            return tuple(oarlock.full([batch, *s], init_value, dtype=dtype) for s in shape)
        return oarlock.full([batch, *shape], init_value, dtype=dtype)

    @property
    def state_shape(self):
        raise NotImplementedError(f"{type(self).__name__} must define state_shape")

    def _create_weights(self, gates, input_size, hidden_size, recurrent_size, attrs):
        """weight_ih [gates*hidden, input], weight_hh [gates*hidden, recurrent], bias_ih, bias_hh [gates*hidden],
        U(-1/sqrt(hidden), 1/sqrt(hidden)); an attribute of False makes a constant one (1 for weights, 0 for
        biases) that gets no gradient, as Paddle does."""
        std = 1.0 / math.sqrt(hidden_size)
        shapes = {"weight_ih": [gates * hidden_size, input_size], "weight_hh": [gates * hidden_size, recurrent_size],
                  "bias_ih": [gates * hidden_size], "bias_hh": [gates * hidden_size]}
        for name, shape in shapes.items():
            attr = attrs[name]
            is_bias = name.startswith("bias")
            if attr is False:
                parameter = self.create_parameter(shape, None, is_bias=is_bias,
                                                  default_initializer=Constant(0.0 if is_bias else 1.0))
                parameter.stop_gradient = True
            else:
                parameter = self.create_parameter(shape, attr, is_bias=is_bias, default_initializer=Uniform(-std, std))
            setattr(self, name, parameter)

    def _gates(self, inputs, hidden):
        gates = oarlock.matmul(inputs, self.weight_ih, transpose_y=True) + self.bias_ih
        return gates, oarlock.matmul(hidden, self.weight_hh, transpose_y=True) + self.bias_hh

    def _check_sizes(self, input_size, hidden_size):
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{type(self).__name__}: {name} must be a positive int, got {value!r}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


class SimpleRNNCell(RNNCellBase):
    """h = activation(x W_ih^T + b_ih + h W_hh^T + b_hh), activation 'tanh' or 'relu'; forward returns (h, h)."""

    def __init__(self, input_size, hidden_size, activation="tanh", weight_ih_attr=None, weight_hh_attr=None,
                 bias_ih_attr=None, bias_hh_attr=None, name=None):
        super().__init__()
        self._check_sizes(input_size, hidden_size)
        if activation not in ("tanh", "relu"):
            raise ValueError(f"SimpleRNNCell: activation must be 'tanh' or 'relu', got {activation!r}")
        self.activation = activation
        self._activation_fn = oarlock.tanh if activation == "tanh" else F.relu
        self._create_weights(1, input_size, hidden_size, hidden_size,
                             {"weight_ih": weight_ih_attr, "weight_hh": weight_hh_attr, "bias_ih": bias_ih_attr,
                              "bias_hh": bias_hh_attr})

    def forward(self, inputs, states=None):
        if states is None:
            states = self.get_initial_states(inputs, self.state_shape)
        x_part, h_part = self._gates(inputs, states)
        h = self._activation_fn(x_part + h_part)
        return h, h

    @property
    def state_shape(self):
        return (self.hidden_size,)


class LSTMCell(RNNCellBase):
    """The LSTM step; forward(inputs, (h, c)) returns (h, (h, c)). proj_size > 0 projects h through
    weight_ho [hidden, proj_size] (h then has proj_size features)."""

    def __init__(self, input_size, hidden_size, weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None,
                 bias_hh_attr=None, proj_size=0, name=None):
        super().__init__()
        self._check_sizes(input_size, hidden_size)
        if not isinstance(proj_size, numbers.Integral) or proj_size < 0 or (proj_size and proj_size >= hidden_size):
            raise ValueError(f"LSTMCell: proj_size must be 0 or in [1, hidden_size={hidden_size}), got {proj_size!r}")
        self.proj_size = int(proj_size)
        self._create_weights(4, input_size, hidden_size, proj_size or hidden_size,
                             {"weight_ih": weight_ih_attr, "weight_hh": weight_hh_attr, "bias_ih": bias_ih_attr,
                              "bias_hh": bias_hh_attr})
        if proj_size:
            std = 1.0 / math.sqrt(hidden_size)
            self.weight_ho = self.create_parameter([hidden_size, proj_size], weight_hh_attr,
                                                   default_initializer=Uniform(-std, std))

    def forward(self, inputs, states=None):
        if states is None:
            states = self.get_initial_states(inputs, self.state_shape)
        pre_hidden, pre_cell = states
        x_part, h_part = self._gates(inputs, pre_hidden)
        i, f, g, o = oarlock.split(x_part + h_part, 4, axis=-1)
        c = oarlock.sigmoid(f) * pre_cell + oarlock.sigmoid(i) * oarlock.tanh(g)
        h = oarlock.sigmoid(o) * oarlock.tanh(c)
        if self.proj_size:
            h = oarlock.matmul(h, self.weight_ho)
        return h, (h, c)

    @property
    def state_shape(self):
        return ((self.proj_size or self.hidden_size,), (self.hidden_size,))


class GRUCell(RNNCellBase):
    """The GRU step (reset gate after the hidden matmul); forward returns (h, h)."""

    def __init__(self, input_size, hidden_size, weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None,
                 bias_hh_attr=None, name=None):
        super().__init__()
        self._check_sizes(input_size, hidden_size)
        self._create_weights(3, input_size, hidden_size, hidden_size,
                             {"weight_ih": weight_ih_attr, "weight_hh": weight_hh_attr, "bias_ih": bias_ih_attr,
                              "bias_hh": bias_hh_attr})

    def forward(self, inputs, states=None):
        if states is None:
            states = self.get_initial_states(inputs, self.state_shape)
        x_gates, h_gates = self._gates(inputs, states)
        x_r, x_z, x_c = oarlock.split(x_gates, 3, axis=-1)
        h_r, h_z, h_c = oarlock.split(h_gates, 3, axis=-1)
        r = oarlock.sigmoid(x_r + h_r)
        z = oarlock.sigmoid(x_z + h_z)
        c = oarlock.tanh(x_c + r * h_c)
        h = (states - c) * z + c
        return h, h

    @property
    def state_shape(self):
        return (self.hidden_size,)


def _map(fn, *structures):
    """fn over matching leaves of nested tuples/lists of Tensors."""
    first = structures[0]
    if isinstance(first, (tuple, list)):
        return type(first)(_map(fn, *parts) for parts in zip(*structures))
    return fn(*structures)


def _run(cell, inputs, initial_states, sequence_length, time_major, is_reverse, **kwargs):
    """Paddle's _rnn_dynamic_graph: step the cell over time; a masked step keeps the previous state."""
    time_axis = 0 if time_major else 1
    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs, batch_dim_idx=1 if time_major else 0)
    steps = inputs.shape[time_axis]
    masks = None
    if sequence_length is not None:
        masks = F.sequence_mask(sequence_length, maxlen=steps, dtype=inputs.dtype)   # [batch, time]
    order = range(steps - 1, -1, -1) if is_reverse else range(steps)
    states, outputs = initial_states, [None] * steps
    for t in order:
        step_input = inputs[t] if time_major else inputs[:, t]
        out, new_states = cell(step_input, states, **kwargs)
        if masks is not None:
            keep = oarlock.unsqueeze(masks[:, t], -1)
            new_states = _map(lambda old, new, keep=keep: new * keep + old * (1 - keep), states, new_states)
        states = new_states
        outputs[t] = out
    return oarlock.stack(outputs, axis=time_axis), states


class RNN(Layer):
    """RNN(cell, is_reverse=False, time_major=False): forward(inputs, initial_states=None, sequence_length=None)
    returns (outputs [batch, time, ...] or time-major, final states)."""

    def __init__(self, cell, is_reverse=False, time_major=False):
        super().__init__()
        if not isinstance(cell, RNNCellBase):
            raise TypeError(f"RNN: cell must be an RNNCellBase, got {type(cell).__name__}")
        self.cell, self.is_reverse, self.time_major = cell, is_reverse, time_major

    def forward(self, inputs, initial_states=None, sequence_length=None, **kwargs):
        return _run(self.cell, inputs, initial_states, sequence_length, self.time_major, self.is_reverse, **kwargs)


class BiRNN(Layer):
    """BiRNN(cell_fw, cell_bw, time_major=False): both directions, outputs concatenated on the last axis;
    final states (forward's, backward's)."""

    def __init__(self, cell_fw, cell_bw, time_major=False):
        super().__init__()
        for name, cell in (("cell_fw", cell_fw), ("cell_bw", cell_bw)):
            if not isinstance(cell, RNNCellBase):
                raise TypeError(f"BiRNN: {name} must be an RNNCellBase, got {type(cell).__name__}")
        if cell_fw.input_size != cell_bw.input_size:
            raise ValueError(f"BiRNN: cell_fw and cell_bw must take the same input_size, got {cell_fw.input_size} "
                             f"and {cell_bw.input_size}")
        self.cell_fw, self.cell_bw, self.time_major = cell_fw, cell_bw, time_major

    def forward(self, inputs, initial_states=None, sequence_length=None, **kwargs):
        if initial_states is None:
            batch_dim = 1 if self.time_major else 0
            initial_states = (self.cell_fw.get_initial_states(batch_ref=inputs, batch_dim_idx=batch_dim),
                              self.cell_bw.get_initial_states(batch_ref=inputs, batch_dim_idx=batch_dim))
        states_fw, states_bw = initial_states
        out_fw, states_fw = _run(self.cell_fw, inputs, states_fw, sequence_length, self.time_major, False, **kwargs)
        out_bw, states_bw = _run(self.cell_bw, inputs, states_bw, sequence_length, self.time_major, True, **kwargs)
        return oarlock.concat([out_fw, out_bw], axis=-1), (states_fw, states_bw)


class RNNBase(LayerList):
    """The multi-layer recurrent layer (see the module docstring); `mode` is 'RNN_TANH', 'RNN_RELU', 'LSTM' or
    'GRU'."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, direction="forward", time_major=False,
                 dropout=0.0, weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None,
                 proj_size=0, activation="tanh"):
        super().__init__()
        owner = {"LSTM": "LSTM", "GRU": "GRU"}.get(mode, "SimpleRNN")
        if direction not in ("forward", "bidirect", "bidirectional"):
            raise ValueError(f"{owner}: direction must be 'forward', 'bidirect' or 'bidirectional', got {direction!r}")
        if not isinstance(num_layers, numbers.Integral) or num_layers <= 0:
            raise ValueError(f"{owner}: num_layers must be a positive int, got {num_layers!r}")
        if not 0 <= dropout <= 1:
            raise ValueError(f"{owner}: dropout must be in [0, 1], got {dropout!r}")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.num_directions = 1 if direction == "forward" else 2
        self.time_major, self.dropout, self.proj_size = time_major, dropout, proj_size
        self.state_components = 2 if mode == "LSTM" else 1
        attrs = {"weight_ih_attr": weight_ih_attr, "weight_hh_attr": weight_hh_attr, "bias_ih_attr": bias_ih_attr,
                 "bias_hh_attr": bias_hh_attr}
        out_size = proj_size or hidden_size

        def make_cell(size):
            if mode == "LSTM":
                return LSTMCell(size, hidden_size, proj_size=proj_size, **attrs)
            if mode == "GRU":
                return GRUCell(size, hidden_size, **attrs)
            return SimpleRNNCell(size, hidden_size, activation, **attrs)

        for layer in range(num_layers):
            size = input_size if layer == 0 else out_size * self.num_directions
            if self.num_directions == 1:
                self.append(RNN(make_cell(size), is_reverse=False, time_major=time_major))
            else:
                self.append(BiRNN(make_cell(size), make_cell(size), time_major=time_major))
        # Paddle's flat names for the same parameters: the names run over every cell's parameters in order,
        # four to a cell and direction; with proj_size each cell also has weight_ho, and Paddle's names then
        # shift onto the following parameters (weight_ih_l1 is layer 0's weight_ho): kept, so checkpoints load
        names = [f"{name}_l{layer}{suffix}" for layer in range(num_layers)
                 for suffix in ("", "_reverse")[:self.num_directions]
                 for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        cells = [cell for rnn in self
                 for cell in ([rnn.cell] if self.num_directions == 1 else [rnn.cell_fw, rnn.cell_bw])]
        parameters = [p for cell in cells for p in cell.parameters()]
        for name, parameter in zip(names, parameters):
            self.add_parameter(name, parameter)

    def _split_states(self, states):
        """[L*D, B, H] tensors (one, or (h, c)) -> per layer: a state, or (forward's, backward's)."""
        components = [states] if self.state_components == 1 else list(states)
        out = []
        for layer in range(self.num_layers):
            per_direction = []
            for d in range(self.num_directions):
                index = layer * self.num_directions + d
                parts = [c[index] for c in components]
                per_direction.append(parts[0] if self.state_components == 1 else tuple(parts))
            out.append(per_direction[0] if self.num_directions == 1 else tuple(per_direction))
        return out

    def _concat_states(self, finals):
        flat = [s for layer in finals for s in ([layer] if self.num_directions == 1 else layer)]
        if self.state_components == 1:
            return oarlock.stack(flat)
        return tuple(oarlock.stack([s[i] for s in flat]) for i in range(self.state_components))

    def forward(self, inputs, initial_states=None, sequence_length=None):
        batch_index = 1 if self.time_major else 0
        if initial_states is None:
            sizes = [self.proj_size or self.hidden_size, self.hidden_size]
            shape = [self.num_layers * self.num_directions, inputs.shape[batch_index]]
            initial_states = tuple(oarlock.zeros(shape + [sizes[i]], dtype=inputs.dtype)
                                   for i in range(self.state_components))
            if self.state_components == 1:
                initial_states = initial_states[0]
        states = self._split_states(initial_states)
        finals = []
        for i, rnn in enumerate(self):
            if i > 0:
                inputs = F.dropout(inputs, self.dropout, training=self.training, mode="upscale_in_train")
            inputs, final = rnn(inputs, states[i], sequence_length)
            finals.append(final)
        if sequence_length is not None:   # the fused kernel's outputs are zero past each sequence's length
            mask = F.sequence_mask(sequence_length, maxlen=inputs.shape[1 - batch_index], dtype=inputs.dtype)
            if self.time_major:
                mask = oarlock.transpose(mask, [1, 0])
            inputs = inputs * oarlock.unsqueeze(mask, -1)
        return inputs, self._concat_states(finals)

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.time_major:
            text += f", time_major={self.time_major}"
        if self.dropout:
            text += f", dropout={self.dropout}"
        return text


class SimpleRNN(RNNBase):
    """SimpleRNN(input_size, hidden_size, num_layers=1, direction='forward', time_major=False, dropout=0.0,
    activation='tanh', weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None)."""

    def __init__(self, input_size, hidden_size, num_layers=1, direction="forward", time_major=False, dropout=0.0,
                 activation="tanh", weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None,
                 name=None):
        mode = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}.get(activation)
        if mode is None:
            raise ValueError(f"SimpleRNN: activation must be 'tanh' or 'relu', got {activation!r}")
        super().__init__(mode, input_size, hidden_size, num_layers, direction, time_major, dropout, weight_ih_attr,
                         weight_hh_attr, bias_ih_attr, bias_hh_attr, activation=activation)
        self.activation = activation


class LSTM(RNNBase):
    """LSTM(input_size, hidden_size, num_layers=1, direction='forward', time_major=False, dropout=0.0,
    weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None, proj_size=0)."""

    def __init__(self, input_size, hidden_size, num_layers=1, direction="forward", time_major=False, dropout=0.0,
                 weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None, proj_size=0,
                 name=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, direction, time_major, dropout, weight_ih_attr,
                         weight_hh_attr, bias_ih_attr, bias_hh_attr, proj_size=proj_size)


class GRU(RNNBase):
    """GRU(input_size, hidden_size, num_layers=1, direction='forward', time_major=False, dropout=0.0,
    weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None)."""

    def __init__(self, input_size, hidden_size, num_layers=1, direction="forward", time_major=False, dropout=0.0,
                 weight_ih_attr=None, weight_hh_attr=None, bias_ih_attr=None, bias_hh_attr=None, name=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, direction, time_major, dropout, weight_ih_attr,
                         weight_hh_attr, bias_ih_attr, bias_hh_attr)


EXPORTS = {"oarlock.nn": [RNNCellBase, SimpleRNNCell, LSTMCell, GRUCell, RNN, BiRNN, SimpleRNN, LSTM, GRU]}
