"""nn.BeamSearchDecoder and nn.dynamic_decode as Paddle 3.2 has them (paddle/nn/decode.py, its dynamic-graph
path), over oarlock ops.

A decoder has initialize(inits) -> (inputs, states, finished), step(time, inputs, states) -> (outputs,
states, next inputs, finished), optionally finalize(outputs, states, lengths), and tracks_own_finished.
dynamic_decode steps it until every sequence is finished (or max_step_num), stacks the step outputs over
time, finalizes, and returns batch-major outputs unless output_time_major.

BeamSearchDecoder keeps beam_size hypotheses per batch entry: each step takes log-softmax of the cell's
logits (after output_fn), lets finished beams only extend with end_token at no cost, adds the running log
probabilities, keeps the top beam_size of beam_size * vocab candidates, and reorders the cell states,
finished flags and lengths by the chosen parent beams; finalize backtraces the ids with gather_tree.
Initial beams other than the first start at -1e9, so the first step expands beam 0 only.
"""

from __future__ import annotations

import typing

import numpy as np

import oarlock
from oarlock.nn import functional as F

KINF = 1e9


def _map(fn, *structures):
    """fn over matching leaves of nested tuples/lists (namedtuples kept) of Tensors."""
    first = structures[0]
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(_map(fn, *parts) for parts in zip(*structures)))
    if isinstance(first, (tuple, list)):
        return type(first)(_map(fn, *parts) for parts in zip(*structures))
    return fn(*structures)


def _leaves(structure):
    if isinstance(structure, (tuple, list)):
        return [leaf for part in structure for leaf in _leaves(part)]
    return [structure]


class Decoder:
    """The interface dynamic_decode drives (see the module docstring)."""

    def initialize(self, inits):
        raise NotImplementedError

    def step(self, time, inputs, states, **kwargs):
        raise NotImplementedError

    def finalize(self, outputs, final_states, sequence_lengths):
        raise NotImplementedError

    @property
    def tracks_own_finished(self):
        return False


class BeamSearchDecoder(Decoder):
    """BeamSearchDecoder(cell, start_token, end_token, beam_size, embedding_fn=None, output_fn=None)."""

    class OutputWrapper(typing.NamedTuple):
        scores: typing.Any
        predicted_ids: typing.Any
        parent_ids: typing.Any

    class StateWrapper(typing.NamedTuple):
        cell_states: typing.Any
        log_probs: typing.Any
        finished: typing.Any
        lengths: typing.Any

    def __init__(self, cell, start_token, end_token, beam_size, embedding_fn=None, output_fn=None):
        if not isinstance(beam_size, int) or beam_size <= 0:
            raise ValueError(f"BeamSearchDecoder: beam_size must be a positive int, got {beam_size!r}")
        self.cell, self.embedding_fn, self.output_fn = cell, embedding_fn, output_fn
        self.start_token, self.end_token, self.beam_size = start_token, end_token, beam_size

    @staticmethod
    def tile_beam_merge_with_batch(x, beam_size):
        """[batch, ...] -> [batch * beam_size, ...], each entry repeated beam_size times in a row."""
        return oarlock.repeat_interleave(x, beam_size, axis=0)

    def _split_batch_beams(self, x):
        return oarlock.reshape(x, [-1, self.beam_size, *x.shape[1:]])

    def _merge_batch_beams(self, x):
        return oarlock.reshape(x, [-1, *x.shape[2:]])

    def _expand_to_beam_size(self, x):
        return oarlock.tile(oarlock.unsqueeze(x, 1), [1, self.beam_size] + [1] * (x.ndim - 1))

    def _gather(self, x, indices):
        """x [batch, beam, ...] reordered along beam by indices [batch, beam]."""
        index = indices
        for _ in range(x.ndim - 2):
            index = oarlock.unsqueeze(index, -1)
        index = oarlock.expand(index, list(indices.shape) + list(x.shape[2:])) if x.ndim > 2 else index
        return oarlock.take_along_axis(x, index, 1)

    def initialize(self, initial_cell_states):
        state = _leaves(initial_cell_states)[0]
        batch = state.shape[0]
        cell_states = _map(self._expand_to_beam_size, initial_cell_states)
        inputs = oarlock.full([batch, self.beam_size], self.start_token, dtype="int64")
        start = np.tile([[0.0] + [-KINF] * (self.beam_size - 1)], (batch, 1))
        log_probs = oarlock.cast(oarlock.to_tensor(start), oarlock.get_default_dtype())
        finished = oarlock.full([batch, self.beam_size], False, dtype="bool")
        lengths = oarlock.zeros_like(inputs)
        if self.embedding_fn:
            inputs = self.embedding_fn(inputs)
        return inputs, self.StateWrapper(cell_states, log_probs, finished, lengths), finished

    def _beam_search_step(self, logits, next_cell_states, beam_state):
        vocab = logits.shape[-1]
        noend = np.full(vocab, -KINF)
        noend[self.end_token] = 0.0
        step_log_probs = oarlock.log(F.softmax(logits))
        done = oarlock.unsqueeze(oarlock.cast(beam_state.finished, step_log_probs.dtype), 2)
        noend = oarlock.cast(oarlock.to_tensor(noend), step_log_probs.dtype)
        step_log_probs = done * noend + (1 - done) * step_log_probs   # finished beams may only emit end_token
        log_probs = step_log_probs + oarlock.unsqueeze(beam_state.log_probs, 2)
        flat = oarlock.reshape(log_probs, [-1, self.beam_size * vocab])
        top_scores, top_indices = oarlock.topk(flat, self.beam_size)
        beam_indices = oarlock.floor_divide(top_indices, oarlock.full([1], vocab, dtype=top_indices.dtype))
        token_indices = oarlock.remainder(top_indices, oarlock.full([1], vocab, dtype=top_indices.dtype))
        next_log_probs = oarlock.take_along_axis(flat, top_indices, 1)
        next_cell_states = _map(lambda x: self._gather(x, beam_indices), next_cell_states)
        next_finished = self._gather(beam_state.finished, beam_indices)
        next_lengths = self._gather(beam_state.lengths, beam_indices)
        next_lengths = next_lengths + oarlock.cast(oarlock.logical_not(next_finished), next_lengths.dtype)
        next_finished = oarlock.logical_or(next_finished, token_indices == self.end_token)
        return (self.OutputWrapper(top_scores, token_indices, beam_indices),
                self.StateWrapper(next_cell_states, next_log_probs, next_finished, next_lengths))

    def step(self, time, inputs, states, **kwargs):
        inputs = _map(self._merge_batch_beams, inputs)
        cell_states = _map(self._merge_batch_beams, states.cell_states)
        cell_outputs, next_cell_states = self.cell(inputs, cell_states, **kwargs)
        cell_outputs = _map(self._split_batch_beams, cell_outputs)
        next_cell_states = _map(self._split_batch_beams, next_cell_states)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        output, state = self._beam_search_step(cell_outputs, next_cell_states, states)
        sample_ids = output.predicted_ids.detach()
        next_inputs = self.embedding_fn(sample_ids) if self.embedding_fn else sample_ids
        return output, state, next_inputs, state.finished

    def finalize(self, outputs, final_states, sequence_lengths):
        predicted = F.gather_tree(outputs.predicted_ids, outputs.parent_ids)
        return oarlock.cast(predicted, outputs.predicted_ids.dtype), final_states

    @property
    def tracks_own_finished(self):
        return True


def dynamic_decode(decoder, inits=None, max_step_num=None, output_time_major=False, impute_finished=False,
                   is_test=False, return_length=False, **kwargs):
    """Run `decoder` until all sequences finish or max_step_num steps; returns (outputs, final states) and
    the sequence lengths with return_length=True."""
    if not isinstance(decoder, Decoder):
        raise TypeError(f"dynamic_decode: decoder must be a Decoder (e.g. BeamSearchDecoder), got "
                        f"{type(decoder).__name__}")
    inputs, states, finished = decoder.initialize(inits)
    lengths = oarlock.cast(oarlock.zeros_like(finished), "int64")
    collected, step = [], 0
    while not bool(oarlock.all(finished)):
        time = oarlock.full([1], step, dtype="int64")
        outputs, next_states, next_inputs, next_finished = decoder.step(time, inputs, states, **kwargs)
        if not decoder.tracks_own_finished:
            next_finished = oarlock.logical_or(next_finished, finished)
            next_lengths = lengths + oarlock.cast(oarlock.logical_not(finished), lengths.dtype)
            if impute_finished:   # finished sequences keep their states
                keep = finished

                def copy(old, new, keep=keep):
                    mask = oarlock.cast(keep, old.dtype if old.dtype != oarlock.bool else "float32")
                    mask = oarlock.reshape(mask, list(mask.shape) + [1] * (old.ndim - mask.ndim))
                    if old.dtype == oarlock.bool:
                        return oarlock.cast(oarlock.cast(old, "float32") * mask +
                                            oarlock.cast(new, "float32") * (1 - mask), "bool")
                    return old * mask + new * (1 - mask)
                next_states = _map(copy, states, next_states)
        else:
            next_lengths = getattr(next_states, "lengths", lengths)
        collected.append(outputs)
        inputs, states, finished, lengths = next_inputs, next_states, next_finished, next_lengths
        step += 1
        if max_step_num is not None and step > max_step_num:
            break
    final_outputs = _map(lambda *steps: oarlock.stack(list(steps), axis=0), *collected)
    final_states = states
    try:
        final_outputs, final_states = decoder.finalize(final_outputs, final_states, lengths)
    except NotImplementedError:
        pass
    if not output_time_major:
        final_outputs = _map(lambda x: oarlock.transpose(x, [1, 0, *range(2, x.ndim)]), final_outputs)
    return (final_outputs, final_states, lengths) if return_length else (final_outputs, final_states)


EXPORTS = {"oarlock.nn": [BeamSearchDecoder, ("dynamic_decode", dynamic_decode)]}
