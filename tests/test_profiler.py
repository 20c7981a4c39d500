"""oarlock.profiler: the core's observer hook, the Profiler's recording, its Chrome trace (read back as
JSON), the summary tables, the scheduler (against Paddle's make_scheduler), RecordEvent and step timing."""

import json
import os
import time

import numpy as np
import pytest

import oarlock
import oarlock.profiler as profiler
from oarlock.plugin_api import set_observer


class Log:
    """An observer that keeps (kind, name, depth) of each event."""

    def __init__(self):
        self.events, self.depth = [], 0

    def begin(self, event, inputs):
        self.depth += 1
        kind = "node" if isinstance(event, oarlock.plugin_api.Node) else "op"
        return kind, event.name, self.depth

    def end(self, token):
        self.depth -= 1
        self.events.append(token)


@pytest.fixture
def log():
    observer = Log()
    assert set_observer(observer) is None
    yield observer
    assert set_observer(None) is observer


def test_observer_sees_fast_path_slow_path_inplace_and_backward(log):
    a = oarlock.to_tensor(np.ones((2, 3), np.float32))
    b = oarlock.to_tensor(np.ones((2, 3), np.float32))
    for _ in range(2):          # the second call takes the generated fast path
        a + b
    a.stop_gradient = False
    c = a * b                   # fast path, recording a node
    c.add_(oarlock.ones([2, 3]))   # in-place
    loss = oarlock.concat([c, b], axis=0).sum()   # a TensorList op: the slow path
    loss.backward()
    ops = [name for kind, name, depth in log.events if kind == "op" and depth == 1]
    assert ops[2:4] == ["add", "add"] and "multiply" in ops and "add_" in ops and "concat" in ops
    nodes = [name for kind, name, _ in log.events if kind == "node"]
    assert set(nodes) >= {"sum", "concat", "add_", "multiply"}


def test_observer_removed_sees_nothing_and_bad_observer_is_refused():
    observer = Log()
    set_observer(observer)
    set_observer(None)
    oarlock.ones([2]) + 1
    assert observer.events == []
    with pytest.raises(TypeError, match="set_observer\\(\\): observer must have begin"):
        set_observer(object())


def test_nested_ops_are_reported_inside_their_caller(log):
    x = oarlock.to_tensor(np.arange(4, dtype=np.int64))
    oarlock.exp(x)   # an int input: exp casts it (the cast op) before its kernel runs
    assert ("op", "cast", 2) in log.events and log.events[-1] == ("op", "exp", 1)


def _mlp():
    oarlock.seed(0)
    net = oarlock.nn.Sequential(oarlock.nn.Linear(8, 16), oarlock.nn.ReLU(), oarlock.nn.Linear(16, 2))
    return net, oarlock.optimizer.AdamW(parameters=net.parameters()), oarlock.randn([4, 8])


def _train(prof, net, opt, x, steps):
    for _ in range(steps):
        with profiler.RecordEvent("forward_pass"):
            loss = net(x).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        prof.step()


def _trace(directory):
    (name,) = os.listdir(directory)
    assert name.endswith(".paddle_trace.json") and name.startswith("worker0_time_")
    with open(os.path.join(directory, name)) as f:
        return json.load(f)


def test_chrome_trace_of_a_few_steps(tmp_path):
    net, opt, x = _mlp()
    with profiler.Profiler(scheduler=(1, 3), record_shapes=True,
                           on_trace_ready=profiler.export_chrome_tracing(str(tmp_path), "worker0")) as prof:
        _train(prof, net, opt, x, 4)
    trace = _trace(tmp_path)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    steps = sorted((e for e in events if e["cat"] == "ProfileStep"), key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["ProfileStep#1", "ProfileStep#2"]   # steps 0 and 3 are not recorded
    for e in events:
        assert e["dur"] > 0 and isinstance(e["ts"], float) and e["pid"] == os.getpid()
        if e["cat"] != "ProfileStep":   # everything lies inside a step
            assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] for s in steps), e
    ops = [e for e in events if e["cat"] == "Operator"]
    count = lambda name: sum(e["name"] == name for e in ops)  # noqa: E731
    assert count("linear") == 4 and count("relu") == 2 and count("mean") == 2   # 2 steps
    nodes = lambda name: sum(e["name"] == name and bool(e["args"].get("backward")) for e in ops)  # noqa: E731
    assert nodes("linear_grad") == 4 and nodes("relu_grad") == 2 and nodes("mean_grad") == 2
    # the other *_grad events are the fused internal ops that the nodes call (nested in them): relu's relu_grad,
    # linear's _linear_grad (dx, dw, db in one op)
    fused = [e for e in ops if e["name"].endswith("_grad") and not e["args"].get("backward")]
    assert {e["name"] for e in fused} == {"relu_grad", "_linear_grad"} and len(fused) == 2 + 4
    first_linear = next(e for e in ops if e["name"] == "linear")
    assert first_linear["args"]["input_shapes"] == [[4, 8], [8, 16], [16]]
    # nesting: the fused op of linear's backward rule lies inside the linear_grad events
    grads = [e for e in ops if e["name"] == "linear_grad"]
    inner = [e for e in ops if e["name"] == "_linear_grad"]
    assert inner and all(any(g["ts"] <= m["ts"] and m["ts"] + m["dur"] <= g["ts"] + g["dur"] for g in grads)
                         for m in inner)
    user = [e for e in events if e["cat"] == "PythonUserDefined"]
    assert [e["name"] for e in user] == ["forward_pass"] * 2
    # the forward ops of a step lie inside its RecordEvent
    for u in user:
        assert sum(u["ts"] <= e["ts"] <= u["ts"] + u["dur"] for e in ops if e["name"] == "linear") == 2
    meta = {e["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert meta == {"process_name", "thread_name"}


def test_no_profiler_no_events_and_profiler_removes_its_observer(tmp_path):
    net, opt, x = _mlp()
    prof = profiler.Profiler(scheduler=(0, 1), on_trace_ready=lambda p: None)
    prof.start()
    _train(prof, net, opt, x, 2)
    prof.stop()
    assert set_observer(None) is None   # nothing left installed
    steps = [e.name for e in prof.profiler_result.events if e.type == "ProfileStep"]
    assert steps == ["ProfileStep#0"]


def _summary(prof, capsys, **kw):
    capsys.readouterr()
    prof.summary(**kw)
    return capsys.readouterr().out


def _rows(text, title):
    """{name: columns} of the rows of one table."""
    block = text.split(title, 1)[1].split("\n\n\n", 1)[0]
    rows = {}
    for line in block.splitlines():
        name, rest = line[:50].rstrip(), line[50:]
        cells = [c.strip() for c in rest.split("  ") if c.strip()]
        if name.strip() and cells and cells[0].isdigit():
            rows.setdefault(name, [name, *cells])
        elif cells and len(cells) > 1 and cells[1].isdigit():   # the Memory Summary's Type column
            rows.setdefault(name, [name, *cells])
    return rows


def test_summary_tables(tmp_path, capsys):
    net, opt, x = _mlp()
    with profiler.Profiler(scheduler=(1, 3), profile_memory=True, on_trace_ready=lambda p: None) as prof:
        _train(prof, net, opt, x, 4)
    text = _summary(prof, capsys, time_unit="us")
    for title in ("Device Summary", "Overview Summary", "Operator Summary", "UserDefined Summary",
                  "Memory Summary - Place(cpu)"):
        assert title in text
    assert "Time unit: us" in text
    ops = _rows(text, "Operator Summary")
    assert ops["linear"][1] == "4" and ops["relu_grad"][1] == "2" and ops["mean"][1] == "2"
    assert ops["  _linear_grad"][1] == "4"   # linear_grad's fused op: one call per node (2 linears, 2 steps)
    ratios = [float(r[2].split(" / ")[4]) for name, r in ops.items() if not name.startswith("  ")]
    assert abs(sum(ratios) - 100) < 0.1
    for _name, r in ops.items():
        total, avg, mx, mn, _ = (float(v) for v in r[2].split(" / "))
        assert mn <= avg <= mx <= total + 1e-9 and abs(total / int(r[1]) - avg) < 0.01 + 1e-3 * avg
    # relu on a 4x16 float32 input allocates its 256-byte output: the memory column holds that per call
    assert ops["relu"][-1] == str(2 * 4 * 16 * 4)
    memory = _rows(text, "Memory Summary")
    assert memory["relu"][2:] == ["2", "512", "0", "512"]
    # sorting by max, op_detail off, views
    text = _summary(prof, capsys, sorted_by=profiler.SortedKeys.CPUMax, op_detail=False,
                    views=profiler.SummaryView.OperatorView)
    assert "Overview Summary" not in text and "Operator Summary" in text and "  _linear_grad" not in text
    rows = _rows(text, "Operator Summary")
    maxes = [float(r[2].split(" / ")[2]) for r in rows.values()]
    assert maxes == sorted(maxes, reverse=True)
    with pytest.raises(ValueError, match="time_unit must be one of"):
        prof.summary(time_unit="min")


def test_load_profiler_result_round_trip(tmp_path, capsys):
    net, opt, x = _mlp()
    path = str(tmp_path / "trace.json")
    with profiler.Profiler(scheduler=(0, 1), record_shapes=True, on_trace_ready=lambda p: p.export(path)) as prof:
        _train(prof, net, opt, x, 1)
    loaded = profiler.load_profiler_result(path)
    ours = [(e.name, e.type, e.start, e.end, e.shapes) for e in prof.profiler_result.get_data()]
    assert [(e.name, e.type, e.start, e.end, e.shapes) for e in loaded.get_data()] == ours
    with pytest.raises(ValueError, match="load_profiler_result\\(\\)"):
        profiler.load_profiler_result(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("kw", [dict(closed=1, ready=1, record=4, repeat=1), dict(closed=1, ready=1, record=4,
                                                                                  skip_first=1),
                                dict(closed=0, ready=2, record=1, repeat=3), dict(closed=2, ready=0, record=3)])
def test_make_scheduler_matches_paddle(paddle, kw):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = profiler.make_scheduler(**kw), paddle.profiler.make_scheduler(**kw)
    assert [ours(i).name for i in range(30)] == [theirs(i).name for i in range(30)]
    assert [s.value for s in profiler.ProfilerState] == [s.value for s in paddle.profiler.ProfilerState]
    assert {s.name: s.value for s in profiler.SortedKeys} == {s.name: s.value for s in paddle.profiler.SortedKeys}
    assert {s.name: s.value for s in profiler.SummaryView} == {s.name: s.value for s in paddle.profiler.SummaryView}


def test_scheduler_periods_call_on_trace_ready_each_time():
    results = []
    net, opt, x = _mlp()
    sched = profiler.make_scheduler(closed=1, ready=1, record=2, repeat=2)
    with profiler.Profiler(scheduler=sched, on_trace_ready=lambda p: results.append(p.profiler_result)) as prof:
        _train(prof, net, opt, x, 9)
    assert [[e.name for e in r.events if e.type == "ProfileStep"] for r in results] == [
        ["ProfileStep#2", "ProfileStep#3"], ["ProfileStep#6", "ProfileStep#7"]]


def test_record_event_forms():
    calls = []

    @profiler.RecordEvent("decorated")
    def work():
        calls.append(1)
        return oarlock.ones([2]) * 2

    work()   # no profiler: just runs
    with profiler.Profiler(scheduler=(0, 1), on_trace_ready=lambda p: None) as prof:
        work()
        event = profiler.RecordEvent("manual")
        event.begin()
        time.sleep(0.001)
        event.end()
        prof.step()
    names = [(e.name, e.type) for e in prof.profiler_result.events if e.type == "PythonUserDefined"]
    assert sorted(names) == [("decorated", "PythonUserDefined"), ("manual", "PythonUserDefined")]
    manual = next(e for e in prof.profiler_result.events if e.name == "manual")
    assert manual.end - manual.start >= 1_000_000
    assert len(calls) == 2
    with pytest.raises(TypeError, match="RecordEvent\\(\\): name must be a str"):
        profiler.RecordEvent(3)


def test_timer_only_and_step_info(capsys):
    prof = profiler.Profiler(timer_only=True)
    prof.start()
    for _ in range(12):
        time.sleep(0.002)
        prof.step(num_samples=8)
    info = prof.step_info(unit="images")
    assert set_observer(None) is None   # timer_only installs no observer
    prof.stop()
    parts = info.split()
    assert parts[0] == "batch_cost:" and parts[2] == "s" and parts[3] == "ips:" and parts[5] == "images/s"
    assert 0.002 <= float(parts[1]) < 0.5 and abs(float(parts[4]) - 8 / float(parts[1])) < 0.01 * float(parts[4])
    out = capsys.readouterr().out
    assert "Perf Summary" in out and "Time Unit: s, IPS Unit: images/s" in out and "batch_cost" in out


def test_bad_arguments():
    with pytest.raises(ValueError, match="scheduler as a pair"):
        profiler.Profiler(scheduler=(3, 1), on_trace_ready=lambda p: None)
    with pytest.raises(TypeError, match="targets must hold ProfilerTarget"):
        profiler.Profiler(targets=["cpu"], on_trace_ready=lambda p: None)
    with pytest.raises(ValueError, match="make_scheduler\\(\\): record must be an int >= 1"):
        profiler.make_scheduler(closed=0, ready=1, record=0)
    with pytest.raises(ValueError, match="num_samples must be a positive int"):
        profiler.Profiler(on_trace_ready=lambda p: None).step(num_samples=-1)
