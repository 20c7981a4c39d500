"""local_map (Paddle 3.2's paddle.distributed.local_map): run a function written for plain tensors on the local
pieces of distributed tensors, and wrap its results as distributed tensors with the given placements."""

from __future__ import annotations

import functools

from oarlock import Tensor

from oarlock_autoparallel.dtensor import DistTensor


def local_map(func, out_placements, in_placements=None, process_mesh=None, reshard_inputs=False):
    """A function: func on the local pieces. in_placements (one list per argument, None for a non-tensor):
    the placements the distributed arguments must have (resharded when reshard_inputs, else a mismatch is an
    error); out_placements: one placements list per output (None: the output is returned as is)."""
    what = "local_map()"
    if not callable(func):
        raise TypeError(f"{what}: argument 'func' must be callable, got {type(func).__name__}")
    if not isinstance(out_placements, (list, tuple)):
        raise TypeError(f"{what}: argument 'out_placements' must be a list with one placements list per output, "
                        f"got {out_placements!r}")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        from oarlock_autoparallel.dtensor_api import dtensor_from_local
        from oarlock_autoparallel.reshard import reshard
        mesh = process_mesh
        if in_placements is not None and len(in_placements) != len(args):
            raise ValueError(f"{what}: in_placements has {len(in_placements)} entries for {len(args)} arguments")
        local_args = []
        for i, a in enumerate(args):
            if isinstance(a, DistTensor):
                mesh = mesh or a.process_mesh
                want = None if in_placements is None else in_placements[i]
                if want is not None and list(want) != list(a.placements):
                    if not reshard_inputs:
                        raise ValueError(f"{what}: argument {i} has placements {a.placements} but in_placements "
                                         f"says {list(want)}; pass reshard_inputs=True to reshard it")
                    a = reshard(a, mesh, list(want))
                a = a._local_value()
            local_args.append(a)
        out = func(*local_args, **kwargs)
        if mesh is None:
            return out      # no distributed input and no mesh: plain in, plain out (Paddle's behaviour)
        many = isinstance(out, (list, tuple))
        outs = list(out) if many else [out]
        if len(outs) != len(out_placements):
            raise ValueError(f"{what}: func returned {len(outs)} outputs but out_placements has "
                             f"{len(out_placements)} entries")
        wrapped_outs = [dtensor_from_local(o, mesh, p) if isinstance(o, Tensor) and p is not None else o
                        for o, p in zip(outs, out_placements)]
        return type(out)(wrapped_outs) if many else wrapped_outs[0]
    return wrapped
