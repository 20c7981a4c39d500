"""oarlock-cpu's BLAS thread policy (oarlock_cpu.blas): decisions from size, forced count and an injected load
reader; set calls only on change; the /proc/stat load reader on a fake file; matrix products unchanged
against numpy whatever the thread count."""

from __future__ import annotations

import numpy as np
import pytest

blas = pytest.importorskip("oarlock_cpu.blas")


class FakeLibrary:
    available = True

    def __init__(self, threads=4):
        self.threads, self.calls = threads, []

    def get_threads(self):
        return self.threads

    def set_threads(self, n):
        self.calls.append(n)
        self.threads = n


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def make(load=0.0, cores=4, forced=None, clock=None):
    loads = [load] if not isinstance(load, list) else load
    reads = []

    def reader():
        reads.append(1)
        return loads[min(len(reads), len(loads)) - 1]
    policy = blas.ThreadPolicy(library=FakeLibrary(), cores=cores, load_reader=reader, forced=forced,
                               clock=clock or FakeClock(), adaptive=True)
    return policy, reads


def test_size_thresholds():
    policy, _ = make(cores=4)
    assert policy.threads_for(512, 512, 512) == 4
    assert policy.threads_for(32, 32, 32) == 1                 # small: under SMALL_FLOPS
    assert policy.threads_for(4096, 512, 8) == 4               # skinny, but 33 MFLOP: threads still pay
    assert policy.threads_for(4, 256, 256) == 1                # skinny and small
    assert policy.threads_for(64, 64, 64, batch=64) == 4       # small matrices, but a big batch
    side = round((blas.SMALL_FLOPS / 2) ** (1 / 3))
    assert policy.threads_for(side - 2, side - 2, side - 2) == 1
    assert policy.threads_for(side + 2, side + 2, side + 2) == 4


def test_load_takes_cores_away():
    for load, expected in ((0.0, 4), (0.4, 4), (0.6, 3), (1.0, 3), (2.7, 1), (3.9, 1), (8.0, 1)):
        policy, _ = make(load=load, cores=4)
        assert policy.threads_for(512, 512, 512) == expected, load
    policy, _ = make(load=1.0, cores=2)
    assert policy.threads_for(512, 512, 512) == 1             # the 2-core case of the bench


def test_load_sampled_at_most_every_interval_and_smoothed():
    clock = FakeClock()
    policy, reads = make(load=[2.0, 0.0, 0.0, 0.0], cores=4, clock=clock)
    assert policy.threads_for(512, 512, 512) == 2 and len(reads) == 1
    clock.now += blas.SAMPLE_S / 2
    policy.threads_for(512, 512, 512)
    assert len(reads) == 1                                    # too soon: the old sample stands
    clock.now += 2 * blas.SAMPLE_S  # a margin: the clock is a float
    assert policy.threads_for(512, 512, 512) == 3 and len(reads) == 2   # smoothed: 0.5 * 2.0 + 0.5 * 0
    clock.now += 2 * blas.SAMPLE_S  # a margin: the clock is a float
    assert policy.threads_for(512, 512, 512) == 3             # 0.5 cores busy: at the threshold, taken
    clock.now += 2 * blas.SAMPLE_S  # a margin: the clock is a float
    assert policy.threads_for(512, 512, 512) == 4             # 0.25: free again
    clock.now += 2 * blas.SAMPLE_S  # a margin: the clock is a float
    assert policy.threads_for(8, 8, 8) == 1 and len(reads) == 4   # small products never read the load


def test_forced_count_and_environment(monkeypatch):
    policy, reads = make(cores=4, forced=3)
    assert policy.threads_for(8, 8, 8) == 3 and policy.threads_for(2048, 2048, 2048) == 3 and not reads
    monkeypatch.setenv("OARLOCK_BLAS_THREADS", "2")
    assert blas.ThreadPolicy(library=FakeLibrary(), cores=4, load_reader=lambda: 0.0).threads_for(4, 4, 4) == 2
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("OARLOCK_BLAS_THREADS", bad)
        with pytest.raises(ValueError, match="OARLOCK_BLAS_THREADS"):
            blas.ThreadPolicy(library=FakeLibrary(), cores=4, load_reader=lambda: 0.0)


def test_sets_only_when_the_choice_changes():
    policy, _ = make(cores=4)
    library = policy.library
    for sides in [(512, 512, 512)] * 3 + [(8, 8, 8)] * 3 + [(512, 512, 512)]:
        policy.apply(*sides)
    assert library.calls == [1, 4]                            # it started at the library's 4
    assert policy.sets == 2


def test_proc_stat_reader(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    hz = 100
    reader = blas.ProcStatLoad(str(stat))
    reader.hz = hz
    times = iter([(10.0, 1.0), (11.0, 1.25)])  # (monotonic, process_time): 1 s wall, 0.25 s of our own CPU
    now = {}

    def monotonic():
        now["t"], now["cpu"] = next(times)
        return now["t"]
    monkeypatch.setattr(blas.time, "monotonic", monotonic)
    monkeypatch.setattr(blas.time, "process_time", lambda: now["cpu"])
    # user nice system idle iowait irq softirq: busy = all but idle and iowait
    stat.write_text("cpu  1000 0 500 9000 100 0 0 0 0 0\ncpu0 ...\n")
    assert reader() == 0.0                                    # the first sample has no interval
    stat.write_text(f"cpu  {1000 + 100} 0 {500 + 25} {9000 + 75} 100 0 0 0 0 0\n")  # 1.25 s busy in all
    assert reader() == pytest.approx(1.0)                     # 1.25 - our 0.25
    assert blas.ProcStatLoad(str(tmp_path / "missing"))() == 0.0


def test_registered_and_results_unchanged():
    oarlock = pytest.importorskip("oarlock")
    from oarlock.plugin_api import default_registry
    registry = default_registry()
    for op in ("matmul", "bmm", "linear"):
        assert registry.find_kernel(op, "cpu", oarlock.float32) is blas.KERNELS[op]
    rng = np.random.default_rng(0)
    cases = [((512, 300), (300, 200)), ((3, 70, 130), (130, 90)), ((4096, 64), (64, 8)), ((5,), (5, 7)),
             ((2, 1, 40, 50), (3, 50, 60))]
    previous = blas.set_policy(None)
    try:
        for forced in (1, 2, None):
            blas.set_policy(blas.ThreadPolicy(forced=forced))
            for dtype in ("float32", "float64"):
                for sa, sb in cases:
                    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
                    out = oarlock.matmul(oarlock.to_tensor(a), oarlock.to_tensor(b)).numpy()
                    tol = 1e-4 if dtype == "float32" else 1e-12
                    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=tol, atol=tol)
                x = rng.standard_normal((6, 40, 30)).astype(dtype)
                y = rng.standard_normal((6, 30, 20)).astype(dtype)
                np.testing.assert_allclose(oarlock.bmm(oarlock.to_tensor(x), oarlock.to_tensor(y)).numpy(), x @ y,
                                           rtol=1e-5, atol=1e-5)
                w, bias = rng.standard_normal((30, 20)).astype(dtype), rng.standard_normal(20).astype(dtype)
                got = oarlock.nn.functional.linear(oarlock.to_tensor(x), oarlock.to_tensor(w), oarlock.to_tensor(bias))
                np.testing.assert_allclose(got.numpy(), x @ w + bias, rtol=1e-5, atol=1e-5)
            x = oarlock.to_tensor(rng.standard_normal((20, 30)).astype("float32"))
            y = oarlock.to_tensor(rng.standard_normal((40, 30)).astype("float32"))
            np.testing.assert_allclose(oarlock.matmul(x, y, transpose_y=True).numpy(), x.numpy() @ y.numpy().T,
                                       rtol=1e-5, atol=1e-5)
    finally:
        blas.set_policy(previous)


def test_load_is_ignored_unless_adaptive(monkeypatch):
    """By default the count follows the product's size only (the same in every run: reproducible results);
    OARLOCK_BLAS_THREADS=auto makes it follow the load."""
    monkeypatch.delenv("OARLOCK_BLAS_THREADS", raising=False)
    fixed = blas.ThreadPolicy(library=FakeLibrary(), cores=4, load_reader=lambda: 3.0)
    assert not fixed.adaptive and fixed.threads_for(2048, 2048, 2048) == 4 and fixed.threads_for(8, 8, 8) == 1
    monkeypatch.setenv("OARLOCK_BLAS_THREADS", "auto")
    auto = blas.ThreadPolicy(library=FakeLibrary(), cores=4, load_reader=lambda: 3.0)
    assert auto.adaptive and auto.threads_for(2048, 2048, 2048) == 1
