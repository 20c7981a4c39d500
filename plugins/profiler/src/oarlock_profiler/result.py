"""A profiling result: the recorded events and facts about the run, saved as a Chrome trace (JSON in the
Trace Event Format: "X" complete events with ts/dur in microseconds, which Perfetto and chrome://tracing
open) and loaded back by load_profiler_result."""

from __future__ import annotations

import json
import os
import threading

from oarlock_profiler.events import Event

_SCHEMA = "oarlock-1"


class ProfilerResult:
    """The events of one recording period (`events`, Event objects) and `extra_info` (process id, thread
    names, CPU utilisation, peak memory)."""

    def __init__(self, events, extra_info):
        self.events = sorted(events, key=lambda e: (e.tid, e.start, -e.end))
        self.extra_info = dict(extra_info)

    def get_data(self) -> list:
        return self.events

    def get_extra_info(self) -> dict:
        return self.extra_info

    def save(self, path: str, format: str = "json") -> None:
        """Write the result to `path`: format "json" (a Chrome trace)."""
        if format != "json":
            raise ValueError(f"ProfilerResult.save(): format must be 'json' (a Chrome trace), got {format!r}; "
                             f"the protobuf format ('pb') of Paddle's C++ profiler is not supported")
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def chrome_trace(self) -> dict:
        pid = self.extra_info.get("pid", os.getpid())
        names = self.extra_info.get("threads", {})
        trace = []
        for tid in sorted({e.tid for e in self.events}):
            trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                          "args": {"name": names.get(str(tid), f"thread {tid}")}})
        trace.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"Process {pid}"}})
        for e in self.events:
            args = {}
            if e.shapes is not None:
                args["input_shapes"] = e.shapes
            if e.memory is not None:
                args["memory_increase_bytes"] = e.memory
            if e.backward:
                args["backward"] = True
            trace.append({"name": e.name, "cat": e.type, "ph": "X", "pid": pid, "tid": e.tid,
                          "ts": e.start / 1e3, "dur": (e.end - e.start) / 1e3, "args": args})
        return {"displayTimeUnit": "ms", "schemaVersion": _SCHEMA, "traceEvents": trace,
                "ExtraInfo": self.extra_info}


def load_profiler_result(filename: str) -> ProfilerResult:
    """Load a result saved by Profiler.export(path, "json") (or an export_chrome_tracing file)."""
    try:
        with open(filename) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"load_profiler_result(): cannot read {filename!r} as a profiler JSON trace: {exc}") from exc
    if not isinstance(data, dict) or data.get("schemaVersion") != _SCHEMA:
        raise ValueError(f"load_profiler_result(): {filename!r} is not a trace written by oarlock's profiler "
                         f"(schemaVersion {_SCHEMA!r})")
    events = []
    for e in data["traceEvents"]:
        if e.get("ph") != "X":
            continue
        start = round(e["ts"] * 1e3)
        args = e.get("args", {})
        events.append(Event(e["name"], e["cat"], start, start + round(e["dur"] * 1e3), e["tid"],
                            args.get("input_shapes"), args.get("memory_increase_bytes"), args.get("backward", False)))
    return ProfilerResult(events, data.get("ExtraInfo", {}))


def thread_names() -> dict:
    return {str(t.ident): t.name for t in threading.enumerate()}
