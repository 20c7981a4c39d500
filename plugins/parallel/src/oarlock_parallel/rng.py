"""Named random-generator states for tensor parallelism (Paddle's fleet/layers/mpu/random.py).

Dropout and weight initialisation inside a tensor-parallel region must differ between the ranks of
the model-parallel group (each rank holds a different slice), while everything outside it must stay
identical on every rank. `RNGStatesTracker` keeps named generator states beside the default one;
`rng_state(name)` swaps a named state in for the duration of a block and keeps what the block drew.
`model_parallel_random_seed(seed)` seeds 'model_parallel_rng' per mp/pp rank and the default
generator with the same seed everywhere, with Paddle's formula.

oarlock's generator states are per device (`oarlock.get_rng_state()` for the current device's type),
so a tracked state is that list of per-device states.
"""

from __future__ import annotations

import contextlib

import numpy as np

import oarlock
from oarlock.device import default_place
from oarlock_parallel.mp_ops import hybrid_group

__all__ = ["MODEL_PARALLEL_RNG", "RNGStatesTracker", "get_rng_state_tracker", "model_parallel_random_seed"]

MODEL_PARALLEL_RNG = "model_parallel_rng"


class RNGStatesTracker:
    """Named generator states: add(name, seed), rng_state(name) as a context manager,
    get_states_tracker() / set_states_tracker(states) to save and restore them, reset()."""

    def __init__(self):
        self.states_: dict = {}
        self.seeds_: set = set()

    def reset(self):
        self.states_ = {}
        self.seeds_ = set()

    def add(self, name, seed):
        """Register the state `name`, seeded with `seed`; a seed or name already used is an error."""
        if not isinstance(name, str):
            raise TypeError(f"RNGStatesTracker.add(): name must be a str, got {type(name).__name__} {name!r}")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"RNGStatesTracker.add(): seed must be an int, got {type(seed).__name__} {seed!r}")
        if seed in self.seeds_:
            raise ValueError(f"RNGStatesTracker.add(): seed {seed} already exists (each state needs its own seed)")
        if name in self.states_:
            raise ValueError(f"RNGStatesTracker.add(): state {name!r} already exists")
        self.seeds_.add(int(seed))
        original = oarlock.get_rng_state()
        # only the current device type's generators (oarlock.seed would reseed every backend's)
        default_place().backend.seed(int(seed))
        self.states_[name] = oarlock.get_rng_state()
        oarlock.set_rng_state(original)

    def get_states_tracker(self) -> dict:
        """{name: state} for every tracked state (the states themselves, for set_states_tracker)."""
        return dict(self.states_)

    def set_states_tracker(self, states):
        """Restore states saved by get_states_tracker; every name must already be tracked."""
        if not isinstance(states, dict):
            raise TypeError(f"RNGStatesTracker.set_states_tracker(): states must be a dict name -> state, "
                            f"got {type(states).__name__}")
        unknown = sorted(set(states) - set(self.states_))
        if unknown:
            raise ValueError(f"RNGStatesTracker.set_states_tracker(): state(s) {unknown} do not exist "
                             f"(tracked: {sorted(self.states_)})")
        self.states_.update(states)

    @contextlib.contextmanager
    def rng_state(self, name=MODEL_PARALLEL_RNG):
        """Draw random numbers from the state `name` inside the block; the default state is untouched."""
        if name not in self.states_:
            raise ValueError(f"RNGStatesTracker.rng_state(): state {name!r} does not exist "
                             f"(tracked: {sorted(self.states_)}; add it first, or call model_parallel_random_seed)")
        original = oarlock.get_rng_state()
        oarlock.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = oarlock.get_rng_state()
            oarlock.set_rng_state(original)


RNG_STATE_TRACKER = RNGStatesTracker()


def get_rng_state_tracker() -> RNGStatesTracker:
    """The process-wide tracker (the tensor-parallel layers create their weights in its
    'model_parallel_rng' state when it is tracked)."""
    return RNG_STATE_TRACKER


def model_parallel_random_seed(seed=None):
    """Seed 'model_parallel_rng' with seed + 1 + mp_rank * pp_size + pp_rank (different on every mp and
    pp rank, equal across dp/sharding) and the default generator with `seed` (equal everywhere).
    seed=None (or 0, as in Paddle) draws a random seed in [0, 10000)."""
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
        raise TypeError(f"model_parallel_random_seed(): seed must be an int or None, "
                        f"got {type(seed).__name__} {seed!r}")
    hcg = hybrid_group("model_parallel_random_seed()")
    mp_rank = hcg.get_model_parallel_rank()
    pp_rank, pp_size = hcg.get_stage_id(), hcg.get_pipe_parallel_world_size()
    global_seed = int(seed) if seed else int(np.random.randint(0, 10000))
    local_seed = global_seed + 1 + mp_rank * pp_size + pp_rank
    RNG_STATE_TRACKER.reset()
    RNG_STATE_TRACKER.add(MODEL_PARALLEL_RNG, local_seed)
    oarlock.seed(global_seed)
