"""Profiler.summary's tables, in the layout of Paddle 3.2's profiler_statistic._build_table: Device,
Overview, Model, Operator, UserDefined and Memory summaries.

The Operator Summary lists the top-level op events (forward ops, autograd nodes as `<op>_grad`, optimizer
update ops: those inside no other op) with calls, total / avg / max / min time and ratio; with
op_detail the ops each one called (casts, the ops a backward rule runs) are listed under it. Beyond
Paddle's columns it shows the self time (the total less the nested ops) and, with profile_memory, the
net change in allocated bytes. There is no device timeline: GPU columns read 0, as Paddle's do on CPU.
"""

from __future__ import annotations

import collections

from oarlock_profiler.enums import SortedKeys, SummaryView

SPACING = 2


class Stat:
    """Calls and times (ns) of one name; `self_time` excludes nested ops; `memory` is the summed change
    in allocated bytes, `allocated` / `freed` the sums of its positive / negative per-call parts."""

    def __init__(self):
        self.call = 0
        self.cpu_time = self.self_time = 0
        self.max_cpu_time, self.min_cpu_time = 0, float("inf")
        self.memory = self.allocated = self.freed = 0
        self.children: dict[str, Stat] = {}

    def add(self, duration, self_time=0, memory=None):
        self.call += 1
        self.cpu_time += duration
        self.self_time += self_time
        self.max_cpu_time = max(self.max_cpu_time, duration)
        self.min_cpu_time = min(self.min_cpu_time, duration)
        if memory is not None:
            self.memory += memory
            if memory > 0:
                self.allocated += memory
            else:
                self.freed -= memory

    @property
    def avg_cpu_time(self):
        return self.cpu_time / self.call if self.call else 0


def merged_length(ranges) -> int:
    """Total length of a set of (start, end) ranges, overlaps counted once."""
    total, current_start, current_end = 0, None, None
    for start, end in sorted(ranges):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        elif end > current_end:
            current_end = end
    if current_end is not None:
        total += current_end - current_start
    return total


def nest(events):
    """For each event the nearest enclosing op event (or None), and each op's summed nested-op time.
    Events of one thread are properly nested; they are sorted by (tid, start, -end)."""
    parent_op, child_time = {}, collections.defaultdict(int)
    stacks = {}
    for e in sorted(events, key=lambda e: (e.tid, e.start, -e.end)):
        stack = stacks.setdefault(e.tid, [])
        while stack and stack[-1].end <= e.start and stack[-1] is not e:
            stack.pop()
        parent = next((s for s in reversed(stack) if s.type == "Operator" and s.end >= e.end), None)
        parent_op[id(e)] = parent
        if e.type == "Operator" and parent is not None:
            child_time[id(parent)] += e.end - e.start
        stack.append(e)
    return parent_op, child_time


def top_level_ops(events):
    """The op events inside no other op event: their durations sum to the time spent in ops."""
    parent_op, _ = nest(events)
    return [e for e in events if e.type == "Operator" and parent_op[id(e)] is None]


_SORT = {SortedKeys.CPUTotal: (lambda s: s.cpu_time, True), SortedKeys.CPUAvg: (lambda s: s.avg_cpu_time, True),
         SortedKeys.CPUMax: (lambda s: s.max_cpu_time, True), SortedKeys.CPUMin: (lambda s: s.min_cpu_time, False)}


def _sorted(items, sorted_by):
    key, reverse = _SORT.get(sorted_by, _SORT[SortedKeys.CPUTotal])   # no GPU times: GPU keys sort by CPU total
    return sorted(items.items(), key=lambda kv: key(kv[1]), reverse=reverse)


class Table:
    """Paddle's table helpers: left-aligned columns two spaces apart, titles centred in dashes."""

    def __init__(self, widths):
        self.row_format = "".join("{: <" + str(w) + "}" + " " * SPACING for w in widths)
        self.sep = "".join("-" * w + " " * SPACING for w in widths)
        self.width = sum(widths) + SPACING * (len(widths) - 1)

    def title(self, text):
        left = self.width - len(text)
        return "-" * (left // 2) + text + "-" * (left - left // 2)

    def row(self, values):
        return self.row_format.format(*values)


def format_time(ns, unit="ms", indent=0):
    if ns == float("inf"):
        return "-"
    value = float(ns) / {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}[unit]
    return f"{' ' * indent}{value:.2f}"


def format_ratio(ratio, indent=0):
    return f"{' ' * indent}{ratio * 100:.2f}"


def _times(stat, unit, ratio):
    return (f"{format_time(stat.cpu_time, unit)} / {format_time(stat.avg_cpu_time, unit)} / "
            f"{format_time(stat.max_cpu_time, unit)} / {format_time(stat.min_cpu_time, unit)} / {format_ratio(ratio)}")


_NO_GPU = "0.00 / 0.00 / 0.00 / 0.00 / 0.00"


def build_table(result, sorted_by=SortedKeys.CPUTotal, op_detail=True, thread_sep=False, time_unit="ms",
                views=None, flops=None):
    """The summary text of a ProfilerResult. `flops(event)` gives an op event's FLOPs (with_flops) or None."""
    events, info = result.events, result.extra_info
    out = []
    steps = [e for e in events if e.type == "ProfileStep"]
    total_time = merged_length([(e.start, e.end) for e in steps])
    want = (lambda view: True) if views is None else (lambda view: view in views)
    if want(SummaryView.DeviceView):
        t = Table([30, 20])
        out += [t.title("Device Summary"), t.sep, t.row(["Device", "Utilization (%)"]), t.sep,
                t.row(["CPU(Process)", format_ratio(info.get("Process Cpu Utilization", 0.0))]),
                t.row(["CPU(System)", format_ratio(info.get("System Cpu Utilization", 0.0))]), t.sep,
                "Note:\nCPU(Process) Utilization = Current process CPU time over all cpu cores / elapsed time, so "
                "max utilization can be reached 100% * number of cpu cores.\nCPU(System) Utilization = All "
                "processes CPU time over all cpu cores(busy time) / (busy time + idle time).",
                "-" * t.width, "", ""]
    if total_time == 0:
        return "\n".join(out) + "\n"
    parent_op, child_time = nest(events)
    if want(SummaryView.OverView):
        ranges, calls = collections.defaultdict(list), collections.Counter()
        for e in events:
            kind = "Backward" if e.backward and parent_op[id(e)] is None else e.type
            ranges[kind].append((e.start, e.end))
            calls[kind] += 1
        if "Backward" in ranges:   # the autograd nodes are ops too
            ranges["Operator"] += ranges["Backward"]
            calls["Operator"] += calls["Backward"]
        times = sorted(((k, merged_length(r)) for k, r in ranges.items()), key=lambda kv: kv[1], reverse=True)
        t = Table([25] * 4)
        out += [t.title("Overview Summary"), f"Time unit: {time_unit}", t.sep,
                t.row(["Event Type", "Calls", "CPU Time", "Ratio (%)"]), t.sep]
        for i, (kind, ns) in enumerate(times):
            out.append(t.row([("" if i == 0 else "  ") + kind, calls[kind], format_time(ns, time_unit),
                              format_ratio(ns / total_time)]))
        out += [t.sep, t.row(["", "Calls", "GPU Time", "Ratio (%)"]), t.sep, t.sep,
                "Note:\nIn this table, We sum up all collected events in terms of event type.\n"
                "The time of events collected on host are presented as CPU Time, and as GPU Time if on device.\n"
                "Events with different types may overlap or inclusion, e.g. Operator includes Backward (the "
                "autograd nodes), so the sum of ratios is not 100%.\n"
                "The time of events in the same type with overlap will not calculate twice, and all time is "
                "summed after merged.", "-" * t.width, "", ""]
    if want(SummaryView.ModelView):
        out += _model_view(events, total_time, time_unit)
    if want(SummaryView.OperatorView):
        out += _operator_view(events, parent_op, child_time, sorted_by, op_detail, thread_sep, time_unit,
                              info, flops)
    if want(SummaryView.UDFView):
        out += _udf_view(events, total_time, sorted_by, thread_sep, time_unit, info)
    if want(SummaryView.MemoryView) and any(e.memory is not None for e in events):
        out += _memory_view(events, info)
    return "\n".join(out) + "\n"


def _model_view(events, total_time, unit):
    stats = collections.defaultdict(Stat)
    for e in events:
        if e.type in ("ProfileStep", "Dataloader", "Forward", "Backward", "Optimization"):
            stats[e.type].add(e.end - e.start)
    if len(stats) <= 1:
        return []
    rows, covered = [], 0
    for name in ("ProfileStep", "Dataloader", "Forward", "Backward", "Optimization"):
        if name in stats:
            rows.append([name if name == "ProfileStep" else f"  {name}", stats[name].call,
                         _times(stats[name], unit, stats[name].cpu_time / total_time), _NO_GPU])
            covered += 0 if name == "ProfileStep" else stats[name].cpu_time
    other = total_time - covered
    rows.append(["  Others", "-", f"{format_time(other, unit)} / - / - / - / {format_ratio(other / total_time)}",
                 "0.00 / - / - / - / 0.00"])
    t = Table([15, 6, max(40, *(len(r[2]) for r in rows)), 40])
    headers = ["Name", "Calls", "CPU Total / Avg / Max / Min / Ratio(%)", "GPU Total / Avg / Max / Min / Ratio(%)"]
    return [t.title("Model Summary"), f"Time unit: {unit}", t.sep, t.row(headers), t.sep,
            *(t.row(r) for r in rows), t.sep, "", ""]


def _by_thread(events, thread_sep, info, keep):
    names = info.get("threads", {})
    groups = collections.defaultdict(list)
    for e in events:
        if keep(e):
            groups[f"{e.tid} ({names.get(str(e.tid), 'thread')})" if thread_sep else "All threads merged"].append(e)
    return groups


def _operator_view(events, parent_op, child_time, sorted_by, op_detail, thread_sep, unit, info, flops):
    memory = any(e.memory is not None for e in events)
    rows = []
    groups = _by_thread(events, thread_sep, info, lambda e: e.type == "Operator")
    for thread, group in groups.items():
        items = collections.defaultdict(Stat)
        flop_counts = collections.Counter()
        for e in group:
            duration = e.end - e.start
            parent = parent_op[id(e)]
            if parent is None:
                items[e.name].add(duration, duration - child_time[id(e)], e.memory)
                if flops is not None:
                    flop_counts[e.name] += flops(e) or 0
            else:
                top = parent
                while parent_op[id(top)] is not None:
                    top = parent_op[id(top)]
                if parent is top:  # ops called directly by a top-level op (deeper ones are inside these)
                    items[top.name].children.setdefault(e.name, Stat()).add(duration, duration - child_time[id(e)],
                                                                            e.memory)
        rows.append(f"Thread: {thread}")
        total = sum(s.cpu_time for s in items.values()) or 1
        for name, stat in _sorted(items, sorted_by):
            row = [name, stat.call, _times(stat, unit, stat.cpu_time / total), _NO_GPU, flop_counts[name],
                   format_time(stat.self_time, unit)]
            rows.append(row + ([stat.memory] if memory else []))
            if op_detail:
                for child_name, child in _sorted(stat.children, sorted_by):
                    label = child_name if len(child_name) + 2 <= 52 else child_name[:47] + "..."
                    row = [f"  {label}", child.call, _times(child, unit, child.cpu_time / (stat.cpu_time or 1)),
                           _NO_GPU, "-", format_time(child.self_time, unit)]
                    rows.append(row + ([child.memory] if memory else []))
    real = [r for r in rows if not isinstance(r, str)]
    widths = [52, max(6, *(len(str(r[1])) for r in real)), max(40, *(len(r[2]) for r in real)), 40,
              max(10, *(len(str(r[4])) for r in real)), 10] + ([22] if memory else [])
    t = Table(widths)
    headers = ["Name", "Calls", "CPU Total / Avg / Max / Min / Ratio(%)", "GPU Total / Avg / Max / Min / Ratio(%)",
               "FLOPs", "CPU Self"] + (["Memory Increase (B)"] if memory else [])
    out = [t.title("Operator Summary"), f"Time unit: {unit}", t.sep, t.row(headers), t.sep]
    out += [t.title(r) if isinstance(r, str) else t.row(r) for r in rows]
    return out + [t.sep, "", ""]


def _udf_view(events, total_time, sorted_by, thread_sep, unit, info):
    groups = _by_thread(events, thread_sep, info, lambda e: e.type in ("PythonUserDefined", "UserDefined"))
    if not groups:
        return []
    rows = []
    for thread, group in groups.items():
        items = collections.defaultdict(Stat)
        for e in group:
            items[e.name].add(e.end - e.start)
        rows.append(f"Thread: {thread}")
        for name, stat in _sorted(items, sorted_by):
            rows.append([name, stat.call, _times(stat, unit, stat.cpu_time / total_time), _NO_GPU])
    real = [r for r in rows if not isinstance(r, str)]
    t = Table([max(len(r[0]) for r in real), max(6, *(len(str(r[1])) for r in real)),
               max(40, *(len(r[2]) for r in real)), 40])
    out = [t.title("UserDefined Summary"), f"Time unit: {unit}", t.sep,
           t.row(["Name", "Calls", "CPU Total / Avg / Max / Min / Ratio(%)", "GPU Total / Avg / Max / Min / Ratio(%)"]),
           t.sep]
    return out + [t.title(r) if isinstance(r, str) else t.row(r) for r in rows] + ["", ""]


def _memory_view(events, info):
    items = collections.defaultdict(Stat)
    for e in events:
        if e.memory is not None:
            items[e.name].add(e.end - e.start, memory=e.memory)
    t = Table([50, 12, 15, 15, 15, 15])
    out = [t.title(f"Memory Summary - {info.get('place', 'Place(cpu)')}"),
           f"Peak Allocated Memory: {info.get('peak_allocated', 0)}", t.sep,
           t.row(["Name", "Type", "Calls", "Allocation Size", "Free Size", "Increased Size"]), t.sep]
    for name, stat in sorted(items.items(), key=lambda kv: kv[1].memory, reverse=True):
        out.append(t.row([name, "Allocated", stat.call, stat.allocated, stat.freed, stat.memory]))
    return out + ["Note:\nSizes are net changes of the allocated bytes over each call (allocations less frees "
                  "within it), summed over the calls; nested ops are included in their callers.", "", ""]
