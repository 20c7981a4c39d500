"""Profiler (Paddle's paddle.profiler.Profiler), make_scheduler and export_chrome_tracing.

Recording installs a Recorder as the core's observer (oarlock.plugin_api.set_observer) for the steps the
scheduler puts in RECORD; outside them nothing is installed and ops run at full speed. Each step is a
"ProfileStep#N" event; the result of a recording period goes to on_trace_ready.
"""

from __future__ import annotations

import datetime
import math
import os
import socket
import time
from warnings import warn

import oarlock.device
from oarlock.plugin_api import set_observer

from oarlock_profiler import statistics
from oarlock_profiler.enums import ProfilerState, ProfilerTarget, SortedKeys, SummaryView
from oarlock_profiler.events import ACTIVE, Recorder
from oarlock_profiler.result import ProfilerResult, thread_names
from oarlock_profiler.timer import StepTimer

_clock = time.perf_counter_ns


def _check_count(fn, name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{fn}(): {name} must be an int >= {minimum}, got {value!r}")


def make_scheduler(*, closed: int, ready: int, record: int, repeat: int = 0, skip_first: int = 0):
    """A scheduler: step number -> ProfilerState. After skip_first CLOSED steps, periods of `closed` CLOSED,
    `ready` READY and `record` RECORD steps (the last one RECORD_AND_RETURN), `repeat` times (0: forever)."""
    for name, value, minimum in (("closed", closed, 0), ("ready", ready, 0), ("record", record, 1),
                                 ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
        _check_count("make_scheduler", name, value, minimum)
    if ready == 0:
        warn("Profiler will record data after enabling profiler immediately, some data collected at the "
             "beginning of profiling may be 'noisy' because of overhead.", stacklevel=2)
    period = closed + ready + record

    def scheduler(step: int) -> ProfilerState:
        if step < skip_first:
            return ProfilerState.CLOSED
        step -= skip_first
        if repeat > 0 and step // period >= repeat:
            return ProfilerState.CLOSED
        position = step % period
        if position < closed:
            return ProfilerState.CLOSED
        if position < closed + ready:
            return ProfilerState.READY
        return ProfilerState.RECORD if position < period - 1 else ProfilerState.RECORD_AND_RETURN
    return scheduler


def _record_everything(step: int) -> ProfilerState:
    return ProfilerState.RECORD


def export_chrome_tracing(dir_name: str, worker_name: str | None = None):
    """An on_trace_ready callback writing each result to `dir_name` as a Chrome trace
    `<worker_name>_time_<timestamp>.paddle_trace.json` (worker_name defaults to host_<host>pid_<pid>)."""
    if not isinstance(dir_name, (str, os.PathLike)):
        raise TypeError(f"export_chrome_tracing(): dir_name must be a path, got {type(dir_name).__name__}")
    try:
        os.makedirs(dir_name, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"export_chrome_tracing(): cannot create directory {dir_name!r} for saving "
                           f"profiling results: {exc}") from exc

    def handle_fn(prof):
        name = worker_name or f"host_{socket.gethostname()}pid_{os.getpid()}"
        stamp = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S_%f")
        prof.export(os.path.join(dir_name, f"{name}_time_{stamp}.paddle_trace.json"), "json")
    return handle_fn


def _system_cpu():
    """(busy, total) jiffies of all CPUs from /proc/stat, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _gpu_available():
    try:
        return oarlock.device.cuda.device_count() > 0
    except Exception:
        return False


class Profiler:
    """Records op calls, autograd nodes and RecordEvent ranges for the steps `scheduler` selects.

    scheduler: a callable step -> ProfilerState (make_scheduler), a (start, end) pair of step numbers
    (record [start, end)), or None (record every step). on_trace_ready(prof) gets each finished result
    (default: export_chrome_tracing('./profiler_log/')). record_shapes: keep op input shapes;
    profile_memory: the change in allocated bytes per op; timer_only: step time and throughput only;
    with_flops: the FLOPs of matmul-family ops in the Operator Summary.
    """

    def __init__(self, *, targets=None, scheduler=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, timer_only=False, emit_nvtx=False, custom_device_types=[],  # noqa: B006 (Paddle's; only read)
                 with_flops=False):
        supported = [ProfilerTarget.CPU, ProfilerTarget.CUSTOM_DEVICE] + ([ProfilerTarget.GPU]
                                                                         if _gpu_available() else [])
        if targets:
            targets = list(targets)
            for target in targets:
                if not isinstance(target, ProfilerTarget):
                    raise TypeError(f"Profiler(): targets must hold ProfilerTarget values, got "
                                    f"{type(target).__name__} {target!r}")
            self.targets = {t for t in targets if t in supported}
            for target in targets:
                if target not in supported:
                    warn(f"Profiling {target} is not supported in current context.", stacklevel=2)
        else:
            self.targets = set(supported)
        if callable(scheduler):
            self.scheduler = scheduler
        elif isinstance(scheduler, (tuple, list)):
            if len(scheduler) != 2 or not all(isinstance(s, int) for s in scheduler) or scheduler[1] <= scheduler[0]:
                raise ValueError(f"Profiler(): scheduler as a pair must be (start_batch, end_batch) with "
                                 f"end_batch > start_batch, got {scheduler!r}")
            start, end = max(scheduler[0], 0), scheduler[1]
            self.scheduler = (make_scheduler(closed=max(start - 1, 0), ready=1, record=end - start, repeat=1)
                              if start >= 1 else self._no_ready_scheduler(end - start))
        elif scheduler is None:
            self.scheduler = _record_everything
        else:
            raise TypeError(f"Profiler(): scheduler must be a callable, a (start, end) pair or None, got "
                            f"{type(scheduler).__name__} {scheduler!r}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"Profiler(): on_trace_ready must be callable, got {type(on_trace_ready).__name__}")
        self.on_trace_ready = export_chrome_tracing("./profiler_log/") if on_trace_ready is None else on_trace_ready
        self.record_shapes, self.profile_memory = bool(record_shapes), bool(profile_memory)
        self.timer_only, self.emit_nvtx, self.with_flops = bool(timer_only), bool(emit_nvtx), bool(with_flops)
        self.custom_device_types = list(custom_device_types)
        self.step_num = 0
        self.previous_state = ProfilerState.CLOSED
        self.current_state = self.scheduler(self.step_num)
        self.profiler_result = None
        self._recorder = None
        self._timer = None
        self._step_start = None

    @staticmethod
    def _no_ready_scheduler(record):
        import warnings
        with warnings.catch_warnings():   # Paddle's (0, n) pair records from step 0 without the warning
            warnings.simplefilter("ignore")
            return make_scheduler(closed=0, ready=0, record=record, repeat=1)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- recording --------------------------------------------------------------------------------
    @staticmethod
    def _recording(state):
        return state in (ProfilerState.RECORD, ProfilerState.RECORD_AND_RETURN)

    def _begin_recording(self):
        memory = None
        if self.profile_memory:
            place = oarlock.device.get_device()
            memory = lambda: oarlock.device.memory_allocated(place)  # noqa: E731
        recorder = Recorder(self.record_shapes or self.with_flops, memory)
        previous = set_observer(recorder)
        if previous is not None:
            set_observer(previous)
            raise RuntimeError("Profiler.start(): another observer (a Profiler) is recording already; stop it "
                               "before starting this one")
        self._recorder = ACTIVE.recorder = recorder
        self._wall0, self._cpu0, self._sys0 = time.perf_counter(), time.process_time(), _system_cpu()

    def _end_recording(self, keep=True):
        recorder = self._recorder
        set_observer(None)
        ACTIVE.recorder = self._recorder = None
        if not keep:
            return
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        sys1 = _system_cpu()
        system = 0.0
        if self._sys0 is not None and sys1 is not None and sys1[1] > self._sys0[1]:
            system = (sys1[0] - self._sys0[0]) / (sys1[1] - self._sys0[1])
        info = {"pid": os.getpid(), "threads": thread_names(),
                "Process Cpu Utilization": (time.process_time() - self._cpu0) / wall,
                "System Cpu Utilization": system}
        if self.profile_memory:
            info["place"] = f"Place({oarlock.device.get_device()})"
            info["peak_allocated"] = recorder.peak_memory
        self.profiler_result = ProfilerResult(recorder.events, info)

    def _close_step(self):
        if self._recorder is not None and self._step_start is not None:
            self._recorder.add(f"ProfileStep#{self.step_num}", "ProfileStep", self._step_start, _clock())
        self._step_start = None

    def _open_step(self):
        if self._recorder is not None:
            self._step_start = _clock()

    # -- the public interface ---------------------------------------------------------------------
    def start(self) -> None:
        """Start profiling at step 0 (the scheduler's state for it)."""
        self._timer = StepTimer()
        if self.timer_only:
            return
        if self._recording(self.current_state):
            self._begin_recording()
        self._open_step()

    def stop(self) -> None:
        """Stop profiling; a recording period in progress ends and its result goes to on_trace_ready."""
        if self._timer is not None:
            text = self._timer.summary()
            if text:
                print(text)
        if self.timer_only:
            return
        self._close_step()
        if self.current_state == ProfilerState.READY:
            warn("Improper Profiler state transform: READY->CLOSED, profiler will start and stop without saving "
                 "data", stacklevel=2)
        if self._recorder is not None:
            self._end_recording()
            if self.on_trace_ready:
                self.on_trace_ready(self)

    def step(self, num_samples: int | None = None) -> None:
        """Mark the end of a step (num_samples: its batch size, for step_info's throughput)."""
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int)
                                        or num_samples <= 0):
            raise ValueError(f"Profiler.step(): num_samples must be a positive int or None, got {num_samples!r}")
        if self._timer is not None:
            self._timer.step(num_samples)
        if self.timer_only:
            return
        self._close_step()
        self.previous_state = self.current_state
        self.step_num += 1
        self.current_state = self.scheduler(self.step_num)
        self._trigger_action()
        self._open_step()

    def _trigger_action(self):
        previous, current = self.previous_state, self.current_state
        if previous == ProfilerState.RECORD_AND_RETURN:
            self._end_recording()
            if self._recording(current):
                self._begin_recording()
            if self.on_trace_ready:
                self.on_trace_ready(self)
        elif previous == ProfilerState.RECORD:
            if not self._recording(current):
                warn(f"Improper schedule: RECORD->{current.name}, profiler will not save the data", stacklevel=2)
                self._end_recording(keep=False)
        else:
            if previous == ProfilerState.READY and current == ProfilerState.CLOSED:
                warn("Improper schedule: READY->CLOSED, profiler will start and stop without saving data", stacklevel=2)
            if self._recording(current):
                self._begin_recording()

    def step_info(self, unit: str | None = None) -> str:
        """Average batch cost and throughput since the last call: ' batch_cost: 0.01234 s ips: 81.0 samples/s'."""
        if self._timer is None:
            raise RuntimeError("Profiler.step_info(): the profiler has not been started; call start() first")
        return self._timer.step_info("samples" if unit is None else unit)

    def export(self, path: str = "", format: str = "json") -> None:
        """Write the last result to `path` (format "json": a Chrome trace)."""
        if self.profiler_result:
            self.profiler_result.save(path, format)

    def summary(self, sorted_by=SortedKeys.CPUTotal, op_detail=True, thread_sep=False, time_unit="ms",
                views=None) -> None:
        """Print the summary tables of the last result (views: a SummaryView or a list of them; None: all)."""
        if not isinstance(sorted_by, SortedKeys):
            raise TypeError(f"Profiler.summary(): sorted_by must be a SortedKeys, got {sorted_by!r}")
        if time_unit not in ("s", "ms", "us", "ns"):
            raise ValueError(f"Profiler.summary(): time_unit must be one of 's', 'ms', 'us', 'ns', got {time_unit!r}")
        if isinstance(views, SummaryView):
            views = [views]
        if views is not None and not all(isinstance(v, SummaryView) for v in views):
            raise TypeError(f"Profiler.summary(): views must be a SummaryView or a list of them, got {views!r}")
        if self.profiler_result:
            print(statistics.build_table(self.profiler_result, sorted_by=sorted_by, op_detail=op_detail,
                                         thread_sep=thread_sep, time_unit=time_unit, views=views,
                                         flops=op_flops if self.with_flops else None))


_MATMULS = ("matmul", "linear", "bmm", "mm")


def op_flops(event):
    """FLOPs of a matmul-family op event from its input shapes (2 * batch * M * N * K), else 0."""
    if event.name not in _MATMULS or not event.shapes or len(event.shapes) < 2:
        return 0
    x, y = event.shapes[0], event.shapes[1]
    if not x or not y or not isinstance(x[0], int) or not isinstance(y[0], int):
        return 0
    k = x[-1]
    n = (y[-1] if len(y) < 2 or y[-2] == k else y[-2]) if len(y) > 1 else 1
    return 2 * math.prod(x) * n
