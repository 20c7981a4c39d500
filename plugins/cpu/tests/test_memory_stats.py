"""Memory statistics of the "cpu" device, counted by oarlock_cpu._memstat's numpy allocator (NEP 49)."""

import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import oarlock
from oarlock.device import max_memory_allocated, memory_allocated, reset_max_memory_allocated
from oarlock_cpu import _memstat, backend
from oarlock_cpu.backend import CPUBackend

MiB = 1 << 20
# Unrelated small arrays may come and go between two readings; every test moves tens of MiB.
TOLERANCE = 256 * 1024

try:
    from numpy._core.multiarray import get_handler_name
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import get_handler_name


def settled() -> int:
    gc.collect()
    return memory_allocated("cpu")


def assert_near(actual: int, expected: int) -> None:
    assert abs(actual - expected) <= TOLERANCE, f"{actual} bytes, expected about {expected}"


def in_new_thread(fn):
    """Run fn() in a fresh thread (an empty contextvars context: numpy's default handler) and return its result."""
    result, errors = [], []

    def target():
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


@pytest.fixture(autouse=True)
def counting():
    """Load the cpu backend, whose construction installed the handler in the context that first loaded plugins.

    install() here is a no-op in the normal case; it only guards against that first load having happened
    inside some other context. test_loading_the_backend_installs_the_handler checks the wiring on its own.
    """
    memory_allocated("cpu")
    _memstat.install()
    yield
    gc.collect()
    assert _memstat.current() >= 0


def test_loading_the_backend_installs_the_handler():
    # A fresh interpreter, so that nothing but the plugin's own loading can have installed it.
    code = textwrap.dedent("""
        import gc
        import oarlock
        from oarlock_cpu import _memstat
        assert not _memstat.installed()
        base = oarlock.device.memory_allocated()
        assert _memstat.installed()
        t = oarlock.zeros([16, 1024, 1024])
        assert oarlock.device.memory_allocated("cpu") - base >= 64 * 2**20
        del t
        gc.collect()
        assert oarlock.device.memory_allocated("cpu") - base < 64 * 2**20
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_tensor_allocation_raises_and_freeing_lowers():
    base = settled()
    t = oarlock.zeros([16, 1024, 1024])
    assert t.dtype == oarlock.float32
    assert memory_allocated("cpu") >= base + 64 * MiB
    assert memory_allocated() >= base + 64 * MiB  # device=None: the default device, cpu here
    del t
    assert_near(settled(), base)


def test_peak_holds_the_high_water_mark_until_reset():
    reset_max_memory_allocated("cpu")
    base = settled()
    assert max_memory_allocated("cpu") >= base
    t = oarlock.zeros([16, 1024, 1024])
    del t
    gc.collect()
    high = max_memory_allocated("cpu")
    assert high >= base + 64 * MiB
    small = np.ones(1024)
    assert max_memory_allocated("cpu") == high
    del small
    assert_near(settled(), base)
    assert max_memory_allocated("cpu") == high
    reset_max_memory_allocated("cpu")
    assert max_memory_allocated("cpu") == memory_allocated("cpu")
    assert max_memory_allocated("cpu") < base + 64 * MiB


def test_resize_reallocates_through_the_handler():
    base = settled()
    a = np.zeros(1024)  # 8 KiB
    assert get_handler_name(a) == "oarlock_cpu_memstat"
    a.resize(8 * MiB, refcheck=False)  # 64 MiB: a realloc of the same block
    assert_near(memory_allocated("cpu"), base + 64 * MiB)
    assert max_memory_allocated("cpu") >= base + 64 * MiB - TOLERANCE
    a.resize(16, refcheck=False)
    assert_near(memory_allocated("cpu"), base)
    del a
    assert_near(settled(), base)


def test_fromiter_growth_keeps_counters_consistent():
    base = settled()
    n = 4 * MiB
    # No count given: numpy grows the buffer by realloc as items arrive, then trims it.
    a = np.fromiter((float(i) for i in range(n)), dtype=np.float64)
    assert a.nbytes == 32 * MiB
    assert_near(memory_allocated("cpu"), base + a.nbytes)
    assert max_memory_allocated("cpu") >= base + a.nbytes - TOLERANCE
    del a
    assert_near(settled(), base)


def test_arrays_from_before_install_do_not_touch_the_counters():
    base = settled()
    # Allocated by numpy's default handler (the new thread's context has none installed) ...
    a = in_new_thread(lambda: np.ones(8 * MiB))
    assert get_handler_name(a) == "default_allocator"
    assert_near(memory_allocated("cpu"), base)
    # ... so numpy resizes and frees it with that handler, here where ours is installed.
    a.resize(16 * MiB, refcheck=False)
    assert_near(memory_allocated("cpu"), base)
    del a
    assert_near(settled(), base)
    assert memory_allocated("cpu") >= 0


def test_arrays_freed_in_an_uninstalled_thread_are_still_subtracted():
    base = settled()
    box = [np.ones(8 * MiB)]
    assert_near(memory_allocated("cpu"), base + 64 * MiB)

    def drop():
        assert not _memstat.installed()
        box.clear()  # freed by the handler that allocated it, ours, though not installed here
        gc.collect()

    in_new_thread(drop)
    assert_near(settled(), base)


def test_new_threads_need_their_own_install():
    base = settled()

    def uninstalled_thread():
        before = _memstat.installed()
        a = np.ones(8 * MiB)
        return before, memory_allocated("cpu") - base, a

    before, delta, a = in_new_thread(uninstalled_thread)
    assert not before
    assert_near(delta, 0)
    del a

    def thread_with_backend():
        CPUBackend()  # constructing a backend installs the handler in the current context
        assert _memstat.installed()
        assert _memstat.install() is False  # idempotent
        a = np.ones(8 * MiB)
        return memory_allocated("cpu") - base, a

    delta, a = in_new_thread(thread_with_backend)
    assert_near(delta, 64 * MiB)
    del a
    assert_near(settled(), base)


def test_install_is_idempotent():
    assert _memstat.installed()
    assert _memstat.install() is False

    def first_install():
        return _memstat.install(), _memstat.install()

    assert in_new_thread(first_install) == (True, False)


def test_concurrent_threads_return_to_the_baseline():
    base = settled()
    errors = []

    def work(seed):
        try:
            _memstat.install()
            rng = np.random.default_rng(seed)
            for _ in range(200):
                a = np.empty(int(rng.integers(1, 256 * 1024)), dtype=np.uint8)
                b = np.zeros(int(rng.integers(1, 4096)))
                b.resize(int(rng.integers(1, 64 * 1024)), refcheck=False)
                assert _memstat.current() >= 0
                del a, b
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert_near(settled(), base)


def test_peak_is_never_below_current():
    reset_max_memory_allocated("cpu")
    assert max_memory_allocated("cpu") == memory_allocated("cpu")
    a = np.ones(4 * MiB)
    assert max_memory_allocated("cpu") >= memory_allocated("cpu")
    del a


def test_backend_without_the_extension_fails_loudly(monkeypatch):
    monkeypatch.setattr(backend, "_memstat", None)
    monkeypatch.setattr(backend, "_memstat_error", ImportError("no module named oarlock_cpu._memstat"), raising=False)
    with pytest.warns(RuntimeWarning, match="not built"):
        cpu = CPUBackend()
    with pytest.raises(RuntimeError, match="pip install -e plugins/cpu"):
        cpu.memory_allocated()
    with pytest.raises(RuntimeError):
        cpu.max_memory_allocated()
    with pytest.raises(RuntimeError):
        cpu.reset_max_memory_allocated()


def test_malloc_is_tuned_to_reuse_heap_memory_on_glibc():
    import platform

    from oarlock_cpu import _memstat
    from oarlock_cpu.backend import MMAP_THRESHOLD, TRIM_THRESHOLD
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt thresholds exist only in glibc")
    assert _memstat.tune_malloc(MMAP_THRESHOLD, TRIM_THRESHOLD) is True
    with pytest.raises(ValueError, match="tune_malloc"):
        _memstat.tune_malloc(-1, 0)
