"""oarlock-profiler: Paddle's paddle.profiler on the core's observer hook, plus oarlock.summary and
oarlock.flops.

enums.py       ProfilerState, ProfilerTarget, SortedKeys, SummaryView, TracerEventType
events.py      the Recorder the core reports op calls and autograd nodes to; RecordEvent
profiler.py    Profiler, make_scheduler, export_chrome_tracing
result.py      ProfilerResult (a Chrome trace on disk), load_profiler_result
statistics.py  the summary tables
timer.py       step time and throughput (timer_only, step_info)
model_summary.py, flops.py   oarlock.summary and oarlock.flops for nn.Layer models
"""

from oarlock_profiler import enums, events, profiler, result
from oarlock_profiler.flops import flops
from oarlock_profiler.model_summary import summary

PROFILER_EXPORTS = (
    enums.ProfilerState, enums.ProfilerTarget, enums.SortedKeys, enums.SummaryView, enums.TracerEventType,
    events.RecordEvent, profiler.Profiler, profiler.make_scheduler, profiler.export_chrome_tracing,
    result.load_profiler_result,
)


def register_api(api):
    api.namespace("oarlock.profiler", doc="Profiling (Paddle's paddle.profiler): Profiler, RecordEvent, "
                                          "make_scheduler, export_chrome_tracing, summary tables.")
    for obj in PROFILER_EXPORTS:
        api.export("oarlock.profiler", obj.__name__, obj)
    api.export("oarlock", "summary", summary)
    api.export("oarlock", "flops", flops)
