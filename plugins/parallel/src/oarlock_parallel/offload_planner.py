"""The adaptive memory planner: per layer keep / recompute / offload (and optimizer states on host) under a
device-memory budget per rank, chosen from measured costs (oarlock.distributed.fleet.utils.offload).

    planner = MemoryPlanner(layers, budget="200MB", optimizer=opt)
    planner.fit(step)        # step(): one forward + backward of a training batch (no optimizer step)
    ... train as usual; planner.report() says what was chosen and why; planner.remove() undoes it

Policies. Each layer (an nn.Layer called once or several times per step, e.g. the blocks of a GPT or the
layers of a pipeline stage) runs its forward in one of three ways:
- keep: as written; the activations its ops save stay in device memory until its backward.
- recompute: through fleet.utils.recompute (only the layer's inputs are kept; backward runs it again under
  the same random state, so values and gradients are those of keep).
- offload: inside offload.ActivationOffload: the saved activations go to the device's host pool and come
  back when backward reads them (exact copies).
and, when activations alone cannot meet the budget, the optimizer's states (Adam moments, ...) live in the
host pool: on the cpu the optimizer updates them there (the CPU optimizer step of ZeRO-Offload: host and
device share the processor); on another device they come back to the device only for optimizer.step().
States the optimizer creates at its first step move to the host pool when the plan is applied after it.

Measurements (fit(): three profiling steps, with every layer keep, then recompute, then offload; the random
state and the parameters' gradients are restored after each, so training is unchanged):
- r_i(p): device bytes layer i's forward leaves allocated (memory_allocated after minus before, summed over
  its calls in a step) under policy p;
- f_i: seconds of layer i's forward under keep (summed over its calls): the time recompute adds;
- c_i: seconds ActivationOffload spent copying layer i's activations to host and back: the time offload
  adds (its bandwidth, bytes / second, is reported);
- P(p): the step's peak device memory (max_memory_allocated) with every layer under p.

Cost model. Changing layer i from keep to p saves s_i(p) = r_i(keep) - r_i(p) bytes per call. Several calls
may be live at the peak (micro-batches in flight in a pipeline), so the peak falls by k_p * s_i(p), where
k_p = (P(keep) - P(p)) / sum_i s_i(p) is measured from the profiles (1 for one sequential forward). The
predicted peak of a plan is P(keep) - sum_i k_{p_i} s_i(p_i) - (optimizer state bytes, if on host). Added
time: recompute f_i, offload c_i, optimizer states 2 * state bytes / measured bandwidth.
The plan minimises the added time subject to predicted peak <= budget, a multiple-choice knapsack solved
exactly by dynamic programming over the required saving in 1/512 steps (savings rounded down, so a plan
never claims more than it saves). fit() then measures a step under the plan; if its peak exceeds the budget
(the model is linear, memory is not quite), it asks for that much more saving and plans again (at most
`rounds` times), and raises if the budget cannot be met.
"""

from __future__ import annotations

import contextlib
import re
import time

import oarlock
from oarlock.autograd import has_deferred_zero_grad, zero_grads
from oarlock.plugin_api import array_of, rebind
from oarlock_parallel.offload import ActivationOffload, to_host
from oarlock_parallel.recompute import recompute
from oarlock_parallel.rng import get_rng_state_tracker

__all__ = ["MemoryPlanner", "parse_bytes", "POLICIES"]

POLICIES = ("keep", "recompute", "offload")
_DEFERRED = object()   # a saved gradient that was zeros not made yet
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_STEPS = 512


def parse_bytes(value, what="parse_bytes(): value") -> int:
    """A byte count from an int or a string such as "200MB", "1.5GiB", "4096" (KB/MB/GB are powers of 10,
    KiB/MiB/GiB powers of 2)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]I?B|B)?\s*", value.upper())
        if m and float(m.group(1)) > 0:
            return int(float(m.group(1)) * _UNITS[m.group(2) or ""])
    raise ValueError(f"{what}: expected a positive number of bytes (an int, or a string such as '200MB' or "
                     f"'1.5GiB'); got {value!r}")


class _Probe:
    """Per-layer counters of one profiling step, filled by forward pre/post hooks."""

    def __init__(self, n):
        self.retained = [0] * n
        self.seconds = [0.0] * n
        self._open = {}

    def hooks(self, i):
        def pre(layer, inputs):
            self._open[i] = (oarlock.device.memory_allocated(), time.perf_counter())

        def post(layer, inputs, output):
            before, start = self._open.pop(i)
            self.seconds[i] += time.perf_counter() - start
            self.retained[i] += oarlock.device.memory_allocated() - before
        return pre, post


class MemoryPlanner:
    """Chooses keep / recompute / offload per layer (and optimizer states on host) to keep a training step's
    peak device memory under `budget` at the least added time (module docstring).

    layers: the nn.Layers to plan (called during the step; each may be called several times);
    budget: bytes per rank (an int or a string like "200MB"); optimizer: its states may go to the host pool
    when activations alone do not meet the budget; parameters: every parameter whose gradient the step
    computes (restored after each profiling step; default: the layers' own, so pass the whole model's when
    the step reaches others); rounds: plan-measure-tighten rounds in fit(); distributed: every rank of the job
    runs fit() together (a step with collectives, a pipeline's stages): the ranks then agree on each round's
    outcome (over budget, or no plan) so that they run the same profiling steps and all fail together."""

    def __init__(self, layers, budget, optimizer=None, parameters=None, rounds: int = 3, distributed=False):
        layers = list(layers)
        if not layers or not all(isinstance(layer, oarlock.nn.Layer) for layer in layers):
            raise TypeError(f"MemoryPlanner(): layers must be a non-empty list of nn.Layer; got "
                            f"{[type(x).__name__ for x in layers]}")
        self.layers = layers
        self.budget = parse_bytes(budget, "MemoryPlanner(): budget")
        self.optimizer = optimizer
        self.parameters = list(parameters) if parameters is not None else \
            [p for layer in layers for p in layer.parameters()]
        self.rounds = rounds
        self.distributed = distributed
        self.policies = ["keep"] * len(layers)
        self.states_on_host = False
        self.profile = None
        self.measured_peak = None
        self.fitted = False        # fit() succeeded
        self._originals = {}      # id(layer) -> the forward this planner replaced
        self._offloads = [ActivationOffload() for _ in layers]
        self._host_states = None
        self._original_step = None

    # -- policies ---------------------------------------------------------------------------------------------
    def apply(self, policies, states_on_host=False) -> None:
        """Run layer i under policies[i] from now on (one of POLICIES), and put the optimizer's states in the
        host pool between steps when states_on_host."""
        policies = list(policies)
        bad = [p for p in policies if p not in POLICIES]
        if len(policies) != len(self.layers) or bad:
            raise ValueError(f"MemoryPlanner.apply(): policies must be {len(self.layers)} of {POLICIES}; got "
                             f"{policies!r}")
        for layer, policy, offload in zip(self.layers, policies, self._offloads):
            self._set(layer, policy, offload)
        self.policies = policies
        self._set_states_on_host(states_on_host)

    def _set(self, layer, policy, offload):
        original = self._originals.get(id(layer))
        if original is None:
            original = self._originals[id(layer)] = layer.forward
        if policy == "keep":
            layer.forward = original
        elif policy == "recompute":
            def recomputed(*args, **kwargs):
                if not oarlock.is_grad_enabled():
                    return original(*args, **kwargs)
                # a tuple argument (a pipeline stage's (hidden, mask)) may mix tensors that take gradients
                # and others: its members go to recompute one by one, and the call is rebuilt inside
                flat, lengths = [], []
                for a in args:
                    lengths.append(len(a) if type(a) is tuple else None)
                    flat.extend(a if type(a) is tuple else (a,))

                def run(*values):
                    it = iter(values)
                    return original(*[next(it) if n is None else tuple(next(it) for _ in range(n))
                                      for n in lengths], **kwargs)
                return recompute(run, *flat)
            layer.forward = recomputed
        else:
            def offloaded(*args, **kwargs):
                with offload if oarlock.is_grad_enabled() else contextlib.nullcontext():
                    return original(*args, **kwargs)
            layer.forward = offloaded

    def remove(self) -> None:
        """Give every layer its own forward back and the optimizer states to the device."""
        self.apply(["keep"] * len(self.layers), states_on_host=False)
        for layer in self.layers:
            layer.forward = self._originals.pop(id(layer))

    # -- optimizer states in the host pool ----------------------------------------------------------------------
    def _state_tensors(self):
        if self.optimizer is None:
            return []
        inner = getattr(self.optimizer, "_inner_opt", self.optimizer)   # a HybridParallelOptimizer's optimizer
        return [v for k, v in inner.state_dict().items() if isinstance(v, oarlock.Tensor) and k != "LR_Scheduler"]

    def _set_states_on_host(self, on_host: bool) -> None:
        """Move the optimizer's states to the host pool (or back). On the cpu the optimizer then updates them
        where they are (host and device share the processor: ZeRO-Offload's CPU optimizer step, without copies);
        on another device step() brings them to the device for the update and sends them back after it."""
        if on_host == self.states_on_host:
            return
        self.states_on_host = on_host
        if not on_host:
            self._states_to_device()
            if self._original_step is not None:
                self.optimizer.step = self._original_step
                self._original_step = None
            return
        self._states_to_host()
        if all(place.type == "cpu" for _, _, place in self._host_states):
            return
        self._original_step = self.optimizer.step
        planner = self

        def step(*args, **kwargs):
            planner._states_to_device()
            try:
                return planner._original_step(*args, **kwargs)
            finally:
                planner._states_to_host()
        self.optimizer.step = step

    def _states_to_host(self) -> None:
        self._host_states = []
        for t in self._state_tensors():
            copy = to_host(t)
            self._host_states.append((t, copy, t.place))
            rebind(t, copy.host, oarlock.CPUPlace())

    def _states_to_device(self) -> None:
        for t, copy, place in self._host_states or ():
            rebind(t, array_of(copy.to_device()), place)
        self._host_states = None

    # -- measuring -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _isolated(self):
        """Run a profiling step without changing training: the random states and the gradients come back."""
        states = (oarlock.get_rng_state(), get_rng_state_tracker().get_states_tracker())
        # a gradient clear_grad left as zeros not made yet stays so (reading it would make them, and the profiling
        # step would then hold memory the training step does not)
        grads = [(p, _DEFERRED if has_deferred_zero_grad(p) else None if p.grad is None else to_host(p.grad))
                 for p in self.parameters]
        try:
            yield
        finally:
            oarlock.set_rng_state(states[0])
            get_rng_state_tracker().set_states_tracker(states[1])
            for p, g in grads:
                if g is _DEFERRED:
                    if not has_deferred_zero_grad(p) and p.grad is not None:
                        with oarlock.no_grad():
                            for held in zero_grads([p]):   # deferred again; one someone holds is zeroed in place
                                held.zero_()
                    continue
                p.clear_gradient(set_to_zero=False)
                if g is not None:
                    p.grad = g.to_device()

    def _measure(self, step, policy) -> dict:
        probe = _Probe(len(self.layers))
        handles = []
        for i, layer in enumerate(self.layers):
            pre, post = probe.hooks(i)
            handles += [layer.register_forward_pre_hook(pre), layer.register_forward_post_hook(post)]
        for offload in self._offloads:
            offload.seconds_to_host = offload.seconds_to_device = 0.0
            offload.bytes_offloaded = 0
        try:
            with self._isolated():
                oarlock.device.reset_max_memory_allocated()
                start = time.perf_counter()
                step()
                seconds = time.perf_counter() - start
                peak = oarlock.device.max_memory_allocated()
        finally:
            for handle in handles:
                handle.remove()
        copies = [o.seconds_to_host + o.seconds_to_device for o in self._offloads]
        return {"policy": policy, "peak": peak, "seconds": seconds, "retained": probe.retained,
                "forward_seconds": probe.seconds, "copy_seconds": copies,
                "copied_bytes": sum(o.bytes_offloaded for o in self._offloads)}

    def measure_profiles(self, step) -> dict:
        """The three profiling steps of fit() (every layer keep, recompute, offload); the current policies are
        restored afterwards."""
        current, on_host = self.policies, self.states_on_host
        self._set_states_on_host(False)
        profile = {}
        for policy in POLICIES:
            self.apply([policy] * len(self.layers))
            profile[policy] = self._measure(step, policy)
        self.apply(current, on_host)
        copied = profile["offload"]["copied_bytes"]
        seconds = sum(profile["offload"]["copy_seconds"])
        profile["bandwidth"] = 2 * copied / seconds if seconds > 0 else float("inf")   # bytes moved / second
        profile["state_bytes"] = sum(int(array_of(t).nbytes) for t in self._state_tensors())
        self.profile = profile
        return profile

    # -- planning ------------------------------------------------------------------------------------------------
    def options(self, profile=None):
        """Per layer, the (policy, predicted peak saving in bytes, added seconds) of each policy (module
        docstring), and the optimizer-states option (saving, added seconds) or None."""
        profile = profile or self.profile
        keep = profile["keep"]
        out = []
        factors = {}
        for policy in ("recompute", "offload"):
            savings = sum(k - r for k, r in zip(keep["retained"], profile[policy]["retained"]))
            factors[policy] = max(0.0, (keep["peak"] - profile[policy]["peak"]) / savings) if savings > 0 else 0.0
        for i in range(len(self.layers)):
            choices = [("keep", 0.0, 0.0)]
            for policy, added in (("recompute", keep["forward_seconds"][i]),
                                  ("offload", profile["offload"]["copy_seconds"][i])):
                saving = factors[policy] * (keep["retained"][i] - profile[policy]["retained"][i])
                if saving > 0:
                    choices.append((policy, saving, added))
            out.append(choices)
        states = None
        if profile["state_bytes"] and self.optimizer is not None:
            states = (float(profile["state_bytes"]), 2 * profile["state_bytes"] / profile["bandwidth"])
        return out, states

    def plan(self, required: float, profile=None):
        """(policies, states_on_host, added seconds, predicted saving) of least added time whose predicted
        saving is at least `required` bytes; raises ValueError when no plan saves that much."""
        options, states = self.options(profile)
        best = None
        for with_states in ((False, True) if states else (False,)):
            need = required - (states[0] if with_states else 0.0)
            result = _knapsack(options, need)
            if result is None:
                continue
            policies, added, saved = result
            if with_states:
                added, saved = added + states[1], saved + states[0]
            if best is None or added < best[2]:
                best = (policies, with_states, added, saved)
        if best is None:
            most = sum(max(s for _, s, _ in choices) for choices in options) + (states[0] if states else 0.0)
            raise ValueError(f"MemoryPlanner: the budget of {self.budget} bytes cannot be met: the step's peak "
                             f"without a plan is {(profile or self.profile)['keep']['peak']} bytes and the most every "
                             f"layer's recompute/offload{' and optimizer states on host' if states else ''} can "
                             f"save is about {int(most)} bytes; raise the budget")
        return best

    def fit(self, step) -> list:
        """Profile (measure_profiles), plan for the budget, apply, measure a step under the plan and tighten
        until its peak is under the budget (module docstring). Returns the policies."""
        profile = self.measure_profiles(step)
        required = profile["keep"]["peak"] - self.budget
        for _ in range(self.rounds):
            error = None
            try:
                if required <= 0:
                    self.apply(["keep"] * len(self.layers), False)
                else:
                    policies, on_host, _, _ = self.plan(required)
                    self.apply(policies, on_host)
            except ValueError as exc:
                error = exc
            if self._anywhere(error is not None):
                raise error or ValueError("MemoryPlanner: another rank cannot meet its budget (see its error)")
            self.measured_peak = self._measure(step, "plan")["peak"]
            if not self._anywhere(self.measured_peak > self.budget):
                self.fitted = True
                return self.policies
            required = max(required, 0) + max(self.measured_peak - self.budget, 0) * 1.05 + 1
        raise ValueError(f"MemoryPlanner: after {self.rounds} rounds the measured peak is {self.measured_peak} "
                         f"bytes, over the budget of {self.budget}; raise the budget or allow more rounds")

    def _anywhere(self, flag: bool) -> bool:
        """flag on this rank, or (distributed) on any rank of the job."""
        if not self.distributed:
            return flag
        import oarlock.distributed as dist
        value = oarlock.to_tensor([1.0 if flag else 0.0])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def report(self) -> dict:
        """What fit() measured and chose: per-layer policies, peaks, predicted added seconds, bandwidth."""
        profile = self.profile or {}
        return {"budget": self.budget, "policies": list(self.policies), "optimizer_states_on_host": self.states_on_host,
                "measured_peak": self.measured_peak,
                "unconstrained_peak": profile.get("keep", {}).get("peak"),
                "host_bandwidth_bytes_per_s": profile.get("bandwidth")}


def _knapsack(options, need):
    """Least added time with saving >= need: per layer one (policy, saving, seconds) choice. Exact over
    savings rounded down to need/_STEPS units. Returns (policies, seconds, saving) or None."""
    if need <= 0:
        return ["keep"] * len(options), 0.0, 0.0
    unit = need / _STEPS
    inf = float("inf")
    best = [0.0] + [inf] * _STEPS          # best[j]: least seconds for a saving of >= j units so far
    picks = []
    for choices in options:
        new = [inf] * (_STEPS + 1)
        pick = [0] * (_STEPS + 1)
        for j, cost in enumerate(best):
            if cost == inf:
                continue
            for c, (_, saving, seconds) in enumerate(choices):
                k = min(_STEPS, j + int(saving // unit))
                if cost + seconds < new[k]:
                    new[k], pick[k] = cost + seconds, (c, j)
        best = new
        picks.append(pick)
    if best[_STEPS] == inf:
        return None
    policies, j, saving = [], _STEPS, 0.0
    for choices, pick in zip(reversed(options), reversed(picks)):
        c, j = pick[j]
        policies.append(choices[c][0])
        saving += choices[c][1]
    return policies[::-1], best[_STEPS], saving
