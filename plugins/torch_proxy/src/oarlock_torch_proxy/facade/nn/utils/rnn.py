"""torch.nn.utils.rnn.pad_sequence: stack variable-length tensors, padded to the longest (no packed sequences)."""

from __future__ import annotations

import oarlock

from oarlock_torch_proxy.missing import missing_getattr


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence(): padding_side must be 'right' or 'left', got {padding_side!r}")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            filler = oarlock.full([missing, *s.shape[1:]], padding_value, dtype=s.dtype)
            s = oarlock.concat([s, filler] if padding_side == "right" else [filler, s], axis=0)
        padded.append(s)
    return oarlock.stack(padded, axis=0 if batch_first else 1)


__getattr__ = missing_getattr("torch.nn.utils.rnn")
