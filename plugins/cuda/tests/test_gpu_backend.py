"""The "gpu" backend over CuPy.

Without a GPU (or without cupy) these check: the plugin loads and registers "gpu" without importing
cupy; availability is reported with the reason (cupy missing, cupy failing to import, CUDA failing
to reach a GPU), cached; a gpu place then fails with that reason; the random generator (against the
SplitMix64 reference vector and numpy statistics) and the counting allocator run on the host.

With a GPU (skipped elsewhere, with the reason) they compare against numpy: tensor round trips,
ops on gpu against the same ops on cpu, gradients, the per-device generator against its host
reference, memory statistics growing and shrinking, stream and event ordering, pinned memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import oarlock
from oarlock.registry import default_registry
from oarlock_cuda.backend import GPUBackend, probe_cupy
from oarlock_cuda.memory import CountingAllocator
from oarlock_cuda.rng import ALGORITHM, CounterGenerator, NumpyEngine, key_of

GPU = default_registry().backends["gpu"]
AVAILABLE, REASON = GPU.available()
needs_gpu = pytest.mark.skipif(not AVAILABLE, reason=f"no usable GPU: {REASON}")
MiB = 1 << 20


def _cupy_installed() -> bool:
    return "cupy" in sys.modules or __import__("importlib.util").util.find_spec("cupy") is not None


# -- registration and the lazy import ---------------------------------------------------------------------------

def test_the_plugin_registers_the_gpu_device():
    registry = default_registry()
    assert isinstance(registry.backends["gpu"], GPUBackend) and registry.owner[("backend", "gpu")] == "cuda"
    assert "gpu" in oarlock.device.get_all_device_type() and oarlock.device.is_compiled_with_cuda()
    assert GPU.dlpack_device_type == 2 and GPU.type == "gpu" and GPU.parent is None
    assert oarlock.device.device_count("gpu") == oarlock.device.device_count("cuda") == GPU.device_count()


def test_loading_plugins_and_cpu_work_do_not_import_cupy():
    code = textwrap.dedent("""
        import sys
        import oarlock
        from oarlock.registry import default_registry
        registry = default_registry()
        assert "gpu" in registry.backends, sorted(registry.backends)
        x = oarlock.randn([4, 4])
        y = (x @ x).sum()
        oarlock.seed(3)
        oarlock.get_rng_state()
        oarlock.device.synchronize()
        oarlock.device.empty_cache()
        oarlock.device.cuda.empty_cache()
        with oarlock.device.Stream():
            z = x + 1
        print(sorted(name for name in sys.modules if name == "cupy" or name.startswith(("cupy.", "cupyx"))))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_seeding_needs_no_cupy():
    backend = GPUBackend()
    backend.seed(11)
    assert backend._cupy is None and backend._status is None  # neither imported nor probed


# -- availability -------------------------------------------------------------------------------------------------

@pytest.mark.skipif(_cupy_installed(), reason="cupy is installed here")
def test_without_cupy_the_gpu_is_unavailable_with_the_reason():
    usable, reason = GPU.available()
    assert not usable and reason.startswith("cupy is not installed (pip install 'oarlock-cuda[cuda12]'")
    assert GPU.device_count() == 0 and oarlock.device.cuda.device_count() == 0
    with pytest.raises(ValueError, match="is not available: cupy is not installed") as info:
        oarlock.to_tensor([1.0], place="gpu")
    assert "to_tensor" in str(info.value) and "Usable device types: cpu" in str(info.value)
    with pytest.raises(RuntimeError, match="the gpu device cannot be used: cupy is not installed"):
        _ = GPU.xp
    with pytest.raises(RuntimeError, match="cupy is not installed"):
        _ = GPU.array_types
    assert "cupy" not in sys.modules


def _fake_cupy(count=None, error=None):
    calls = []

    def get_device_count():
        calls.append(1)
        if error is not None:
            raise error
        return count

    runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)), calls


def test_a_gpu_cupy_cannot_reach_is_reported_with_cudas_error(monkeypatch):
    fake, calls = _fake_cupy(error=RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    backend = GPUBackend()
    assert backend.available() == (False, "cupy cannot reach a GPU: cudaErrorNoDevice: no CUDA-capable device "
                                          "is detected")
    assert backend.device_count() == 0 and backend.available()[0] is False
    assert len(calls) == 1, "the probe is cached"
    with pytest.raises(RuntimeError, match="cannot be used: cupy cannot reach a GPU: cudaErrorNoDevice"):
        _ = backend.xp


def test_zero_devices_and_a_found_gpu(monkeypatch):
    fake, _ = _fake_cupy(count=0)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert probe_cupy() == (False, "cupy cannot reach a GPU: CUDA reports no device", 0)
    fake, _ = _fake_cupy(count=3)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    backend = GPUBackend()
    assert backend.available() == (True, "") and backend.device_count() == 3


def test_a_missing_or_broken_cupy(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ModuleNotFoundError(name="cupy")
    usable, reason, count = probe_cupy()
    assert (usable, count) == (False, 0) and reason.startswith("cupy is not installed (pip install")
    monkeypatch.delitem(sys.modules, "cupy")
    package = tmp_path / "cupy"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    usable, reason, count = probe_cupy()
    assert not usable and reason == "cupy failed to import: ImportError: libcudart.so.12: cannot open shared " \
                                    "object file"
    (package / "__init__.py").write_text("import fastrlock_missing_for_this_test\n")
    sys.modules.pop("cupy", None)
    usable, reason, _ = probe_cupy()
    assert reason.startswith("cupy failed to import: No module named 'fastrlock_missing_for_this_test' (pip install")


def test_pinned_host_copies_follow_the_environment(monkeypatch):
    monkeypatch.setenv("OARLOCK_CUDA_PINNED_HOST_COPIES", "1")
    assert GPUBackend().pinned_host_copies is True
    monkeypatch.setenv("OARLOCK_CUDA_PINNED_HOST_COPIES", "0")
    assert GPUBackend().pinned_host_copies is False
    assert GPUBackend(pinned_host_copies=True).pinned_host_copies is True


# -- the random generator, on its host engine ------------------------------------------------------------------------

def test_the_bits_are_splitmix64():
    # SplitMix64 from state 1234567: the reference vector of Vigna's splitmix64.c, used by many test suites
    expected = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431,
                16408922859458223821]
    assert NumpyEngine.bits(1234567, 0, 5).tolist() == expected
    assert NumpyEngine.bits(1234567, 2, 3).tolist() == expected[2:]
    assert NumpyEngine.bits(1234567, 1, 2, stride=2).tolist() == [expected[1], expected[3]]


def test_generator_reproducibility_and_state():
    a, b = CounterGenerator(5), CounterGenerator(5)
    np.testing.assert_array_equal(a.random((3, 4)), b.random((3, 4)))
    state = a.state
    assert state == {"bit_generator": ALGORITHM, "seed": 5, "offset": 12}
    first = a.standard_normal(7)
    assert a.state["offset"] == 12 + 14  # Box-Muller: two draws per value
    a.state = state
    np.testing.assert_array_equal(a.standard_normal(7), first)
    a.seed(5)
    np.testing.assert_array_equal(a.random(12), CounterGenerator(5).random(12))
    assert not np.array_equal(CounterGenerator(6).random(8), CounterGenerator(5).random(8))
    with pytest.raises(ValueError, match="a gpu generator state is a dict"):
        a.state = {"seed": 1}
    with pytest.raises(ValueError, match="as get_rng_state returns"):
        a.state = np.random.default_rng(0).bit_generator.state


def test_scalar_draws_continue_the_array_stream():
    g, h = CounterGenerator(9), CounterGenerator(9)
    scalars = [g.random(), g.random()]
    np.testing.assert_array_equal(scalars, h.random(2))
    assert isinstance(scalars[0], np.float64)
    value = g.integers(0, 2 ** 62)
    assert int(value) == int(h.integers(0, 2 ** 62, size=1)[0]) and 0 <= int(value) < 2 ** 62


def test_generator_values_and_distributions():
    g = CounterGenerator(1)
    u64, u32 = g.random(200_000), g.random((400, 500), dtype=np.float32)
    assert u64.dtype == np.float64 and u32.dtype == np.float32 and u32.shape == (400, 500)
    for u in (u64, u32):
        assert u.min() >= 0.0 and u.max() < 1.0
        assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    z = g.standard_normal(200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01 and abs(((z - z.mean()) ** 3).mean()) < 0.03
    assert g.standard_normal((2, 3), dtype=np.float32).dtype == np.float32
    k = g.integers(-3, 4, size=70_000)
    assert k.dtype == np.int64 and k.min() == -3 and k.max() == 3
    np.testing.assert_allclose(np.bincount(k + 3) / k.size, np.full(7, 1 / 7), atol=0.01)
    assert set(g.integers(5, size=1000, dtype=np.uint8).tolist()) == set(range(5))
    assert set(g.integers(1, 3, size=1000, endpoint=True, dtype=np.int32).tolist()) == {1, 2, 3}
    v = g.uniform(-2.0, 6.0, size=50_000)
    assert v.min() >= -2 and v.max() < 6 and abs(v.mean() - 2) < 0.05
    n = g.normal(10.0, 3.0, size=50_000, dtype=np.float32)
    assert n.dtype == np.float32 and abs(n.mean() - 10) < 0.1 and abs(n.std() - 3) < 0.1
    assert isinstance(g.normal(), np.float64) and isinstance(g.uniform(dtype=np.float32), np.float32)
    assert sorted(g.permutation(10).tolist()) == list(range(10))
    rows = np.arange(12).reshape(6, 2)
    assert sorted(g.permutation(rows)[:, 0].tolist()) == [0, 2, 4, 6, 8, 10]
    assert g.random(0).shape == (0,)


def test_generator_argument_errors():
    g = CounterGenerator()
    with pytest.raises(TypeError, match="random\\(\\): dtype must be float32 or float64, got float16"):
        g.random(3, dtype=np.float16)
    with pytest.raises(ValueError, match="low >= high"):
        g.integers(3, 3)
    with pytest.raises(ValueError, match="does not fit dtype int8"):
        g.integers(0, 300, size=2, dtype=np.int8)
    with pytest.raises(TypeError, match="dtype must be an integer type"):
        g.integers(0, 3, size=2, dtype=np.float32)
    with pytest.raises(ValueError, match="negative dimensions"):
        g.random((2, -1))


def test_the_kernels_compute_what_the_host_reference_computes():
    """The CUDA kernel bodies compiled as C++ on the host (same integer arithmetic) give the reference's
    numbers: the GPU itself is checked by test_gpu_generator_matches_the_host_reference."""
    from shutil import which
    compiler = which("g++") or which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    from oarlock_cuda import rng
    key, offset, n = key_of(1234), 77, 1000
    body = lambda name, params, code: (  # noqa: E731
        f"template <typename T> void {name}({', '.join('unsigned long long ' + p.split()[1] for p in params)}, "
        f"T* out_, long long n) {{ for (long long i = 0; i < n; ++i) {{ T &out = out_[i]; {code} }} }}\n")
    source = ("#include <cmath>\n#include <cstdio>\nusing std::sqrt; using std::log; using std::cos;\n"
              + rng._PREAMBLE.replace("__device__ __forceinline__", "static inline")
              + body("random", ["uint64 key", "uint64 offset"], rng._RANDOM)
              + body("normal", ["uint64 key", "uint64 offset"], rng._NORMAL)
              + body("integers", ["uint64 key", "uint64 offset", "uint64 span", "uint64 low"], rng._INTEGERS)
              + f"""int main() {{ const long long n = {n};
                   static float f[n]; static double d[n], g[n]; static long long k[n];
                   random({key}ULL, {offset}ULL, f, n); random({key}ULL, {offset}ULL, d, n);
                   normal({key}ULL, {offset}ULL, g, n);
                   integers({key}ULL, {offset}ULL, 21ULL, (unsigned long long)(-10LL), k, n);
                   for (long long i = 0; i < n; ++i) printf("%a %a %a %lld\\n", f[i], d[i], g[i], k[i]); }}""")
    workdir = __import__("tempfile").mkdtemp()
    src, exe = os.path.join(workdir, "k.cpp"), os.path.join(workdir, "k")
    with open(src, "w") as fh:
        fh.write(source)
    subprocess.run([compiler, "-O1", "-o", exe, src], check=True, capture_output=True, timeout=120)
    lines = subprocess.run([exe], check=True, capture_output=True, text=True, timeout=60).stdout.split()
    f, d, g, k = (lines[i::4] for i in range(4))
    engine = NumpyEngine()
    np.testing.assert_array_equal(np.array([float.fromhex(x) for x in f], np.float32),
                                  engine.random(key, offset, (n,), np.float32))
    np.testing.assert_array_equal([float.fromhex(x) for x in d], engine.random(key, offset, (n,), np.float64))
    np.testing.assert_allclose([float.fromhex(x) for x in g], engine.standard_normal(key, offset, (n,), np.float64),
                               rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal([int(x) for x in k], engine.integers(key, offset, (n,), np.int64, 21, -10))


# -- the counting allocator, over a fake pool -------------------------------------------------------------------

class FakePool:
    """CuPy's MemoryPool, as far as the allocator uses it: malloc and the two counters (one device)."""

    def __init__(self):
        self.used = self.total = 0

    def malloc(self, size):
        self.used += size
        self.total = max(self.total, self.used)
        return types.SimpleNamespace(device_id=0, size=size)

    def free(self, memory):
        self.used -= memory.size

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.total


def test_the_counting_allocator_keeps_exact_peaks():
    pool = FakePool()
    counter = CountingAllocator(pool)
    a, b = counter.malloc(100), counter.malloc(300)
    pool.free(a)
    pool.free(b)
    c = counter.malloc(50)
    assert counter.used(0) == 50 and counter.max_used(0) == 400 and counter.max_total(0) == 400
    counter.reset_max_used(0)
    assert counter.max_used(0) == 50
    counter.malloc(10)
    assert counter.max_used(0) == 60
    pool.free(c)
    pool.total = 60  # free_all_blocks
    counter.reset_max_total(0)
    assert counter.max_total(0) == 60 and counter.total(0) == 60


# -- with a GPU -------------------------------------------------------------------------------------------------------

@pytest.fixture
def cupy():
    import cupy
    return cupy


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "bool", "complex64"])
def test_gpu_round_trip(cupy, dtype):
    host = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    t = oarlock.to_tensor(host, place="gpu")
    assert t.place == "gpu:0" and t.place.is_gpu_place() and isinstance(t._data, cupy.ndarray)
    assert t.dtype.name == dtype and t.shape == [2, 3, 4]
    np.testing.assert_array_equal(t.numpy(), host)
    np.testing.assert_array_equal(t.cpu().numpy(), host)
    back = oarlock.to_tensor(host).cuda()
    assert back.place == "gpu:0"
    np.testing.assert_array_equal(np.asarray(back), host)
    assert oarlock.to_tensor(host).to("cuda:0").place == "gpu:0"


@needs_gpu
def test_gpu_ops_match_cpu():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    results = {}
    for place in ("cpu", "gpu"):
        x, y = oarlock.to_tensor(a, place=place), oarlock.to_tensor(b, place=place)
        out = oarlock.nn.functional.softmax(oarlock.exp(x * 0.5) @ y + 1.0, axis=-1)
        results[place] = (out.numpy(), (x - 2).abs().sum(axis=0).numpy(), oarlock.concat([x, x]).mean().item(),
                          (x > 0).astype("int64").sum().item())
        assert out.place == place if place == "cpu" else out.place == "gpu:0"
    for cpu, gpu in zip(results["cpu"], results["gpu"]):
        np.testing.assert_allclose(gpu, cpu, rtol=2e-5, atol=1e-6)


@needs_gpu
def test_gpu_gradients_and_copies():
    host = np.array([1.0, -2.0, 3.0], np.float32)
    x = oarlock.to_tensor(host, place="gpu", stop_gradient=False)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * host)
    assert x.grad.place == "gpu:0"
    c = oarlock.to_tensor(host, stop_gradient=False)
    (c.cuda() * 3).sum().backward()  # the copy is differentiable: the gradient comes back to the cpu
    assert c.grad.place == "cpu"
    np.testing.assert_allclose(c.grad.numpy(), [3, 3, 3])


@needs_gpu
def test_gpu_generator_matches_the_host_reference():
    gen = GPU.generator(0)
    oarlock.seed(42)
    assert GPU.get_rng_state(0) == {"bit_generator": ALGORITHM, "seed": 42, "offset": 0}
    reference = CounterGenerator(42)
    np.testing.assert_array_equal(gen.random((1000,)).get(), reference.random(1000))
    np.testing.assert_array_equal(gen.random((3, 7), dtype=np.float32).get(), reference.random((3, 7), np.float32))
    np.testing.assert_allclose(gen.standard_normal(999).get(), reference.standard_normal(999), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(gen.integers(-5, 9, size=500).get(), reference.integers(-5, 9, size=500))
    assert gen.state == reference.state


@needs_gpu
def test_gpu_random_ops_are_reproducible():
    with oarlock.device.device_guard("gpu"):
        oarlock.seed(7)
        a = oarlock.rand([1000])
        state = oarlock.get_rng_state()
        b = oarlock.randn([1000])
        oarlock.set_rng_state(state)
        b2 = oarlock.randn([1000])
        oarlock.seed(7)
        a2 = oarlock.rand([1000])
        d = oarlock.nn.functional.dropout(oarlock.ones([10_000]), p=0.25)
    assert a.place == "gpu:0" and b.place == "gpu:0"
    np.testing.assert_array_equal(a.numpy(), a2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())
    assert 0.45 < a.numpy().mean() < 0.55 and abs(b.numpy().mean()) < 0.15
    kept = d.numpy() != 0
    assert 0.72 < kept.mean() < 0.78 and np.allclose(d.numpy()[kept], 1 / 0.75)


@needs_gpu
def test_gpu_memory_statistics_grow_and_shrink():
    cuda = oarlock.device.cuda
    cuda.synchronize()
    cuda.empty_cache()
    cuda.reset_max_memory_allocated()
    base = cuda.memory_allocated()
    x = oarlock.zeros([16 * MiB], dtype="float32", device="gpu")  # 64 MiB
    grown = cuda.memory_allocated()
    assert grown - base >= 64 * MiB and cuda.memory_allocated("gpu:0") == grown
    assert cuda.max_memory_allocated() >= grown and cuda.memory_reserved() >= grown
    assert oarlock.device.memory_allocated("gpu") == grown
    y = x + 1  # another 64 MiB
    peak = cuda.max_memory_allocated()
    assert peak - base >= 128 * MiB
    del x, y
    shrunk = cuda.memory_allocated()
    assert grown - shrunk >= 64 * MiB - MiB and cuda.max_memory_allocated() == peak
    reserved = cuda.memory_reserved()
    assert reserved >= peak - base and cuda.max_memory_reserved() >= reserved
    cuda.empty_cache()
    assert cuda.memory_reserved() <= reserved - 64 * MiB
    cuda.reset_max_memory_allocated()
    assert cuda.max_memory_allocated() == cuda.memory_allocated()
    cuda.reset_max_memory_reserved()
    assert cuda.max_memory_reserved() == cuda.memory_reserved()


@needs_gpu
def test_gpu_streams_and_events_order_work(cupy):
    cuda = oarlock.device.cuda
    n = 2048
    host = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    x = oarlock.to_tensor(host, place="gpu")
    producer, consumer = oarlock.device.Stream("gpu"), cuda.Stream(priority=1)
    assert producer != consumer and producer.device == "gpu:0"
    default = cuda.current_stream()
    start, end = cuda.Event(enable_timing=True), oarlock.device.Event("gpu", enable_timing=True)
    producer.wait_stream(default)  # x was made on the default stream
    with producer:
        assert oarlock.device.current_stream("gpu") == producer
        assert cupy.cuda.get_current_stream().ptr == producer.stream_base.ptr
        start.record()
        y = x @ x
        for _ in range(5):
            y = y * 0.5 + x
        end.record()
        done = producer.record_event()
    assert cuda.current_stream() == default
    consumer.wait_event(done)
    with oarlock.device.stream_guard(consumer):
        z = y.sum(axis=0)
    consumer.synchronize()
    assert done.query() and end.query() and consumer.query()
    assert start.elapsed_time(end) > 0.0
    expected = host.astype(np.float64) @ host
    for _ in range(5):
        expected = expected * 0.5 + host
    np.testing.assert_allclose(z.numpy(), expected.sum(axis=0), rtol=1e-3, atol=1e-1 * n ** 0.5)
    previous = oarlock.device.set_stream(consumer)
    assert previous == default and cuda.current_stream() == consumer
    oarlock.device.set_stream(previous)
    cuda.synchronize()
    oarlock.device.synchronize("gpu:0")
    with pytest.raises(ValueError, match="enable_timing=True"):
        done.elapsed_time(end)


@needs_gpu
def test_gpu_streams_are_per_thread(cupy):
    s = oarlock.device.Stream("gpu")
    seen = []
    with s:
        thread = threading.Thread(target=lambda: seen.append(oarlock.device.current_stream("gpu")))
        thread.start()
        thread.join()
    assert seen[0] != s


@needs_gpu
def test_pinned_memory(cupy, monkeypatch):
    host = np.arange(MiB, dtype=np.float32)
    pinned = GPU.pin_memory(host)
    np.testing.assert_array_equal(pinned, host)
    attributes = cupy.cuda.runtime.pointerGetAttributes(pinned.ctypes.data)
    assert attributes.type == cupy.cuda.runtime.memoryTypeHost
    t = oarlock.to_tensor(pinned, place="gpu")
    monkeypatch.setattr(GPU, "pinned_host_copies", True)
    copied = GPU.to_host(t._data[::2])  # 2 MiB, not contiguous
    assert cupy.cuda.runtime.pointerGetAttributes(copied.ctypes.data).type == cupy.cuda.runtime.memoryTypeHost
    np.testing.assert_array_equal(copied, host[::2])
    np.testing.assert_array_equal(t.numpy(), host)


@needs_gpu
def test_async_copies_on_the_copy_stream(cupy):
    """copy_to_host_async reads a non-contiguous array after the work queued before it, into pinned memory
    counted in the host pool; copy_to_device_async brings it back, ordered before the work queued after wait()."""
    x = cupy.arange(4 * MiB, dtype=cupy.float32).reshape(2048, 2048)
    y = x * 2                                       # queued on the compute stream before the copy
    pool = GPU.host_memory_allocated()
    down = GPU.copy_to_host_async(y[:, ::2])
    host = down.wait()
    assert down.done() and GPU.host_memory_allocated() - pool == host.nbytes
    assert cupy.cuda.runtime.pointerGetAttributes(host.ctypes.data).type == cupy.cuda.runtime.memoryTypeHost
    np.testing.assert_array_equal(host, np.arange(4 * MiB, dtype=np.float32).reshape(2048, 2048)[:, ::2] * 2)
    up = GPU.copy_to_device_async(host)
    back = up.wait() + 1                            # the add waits for the copy's event on the current stream
    np.testing.assert_array_equal(cupy.asnumpy(back), host + 1)


@needs_gpu
def test_gpu_device_queries():
    cuda = oarlock.device.cuda
    assert cuda.device_count() == GPU.device_count() >= 1
    props = cuda.get_device_properties()
    assert isinstance(props.name, str) and props.name and props.total_memory > 1 << 30
    assert cuda.get_device_name(0) == props.name and cuda.get_device_capability() == (props.major, props.minor)
    assert "gpu:0" in oarlock.device.get_available_device()
    with pytest.raises(ValueError, match=f"asks for device index {GPU.device_count()} but only"):
        oarlock.to_tensor([1.0], place=f"gpu:{GPU.device_count()}")
    with pytest.raises(TypeError, match="the gpu device \\(CuPy\\) has no bfloat16 arrays"):
        oarlock.to_tensor([1.0], dtype="bfloat16").cuda()
    a, b = oarlock.ones([2], device="gpu"), oarlock.ones([2])
    with pytest.raises(Exception, match="is on cpu but an earlier input is on gpu:0"):
        a + b


@needs_gpu
@pytest.mark.skipif(AVAILABLE and GPU.device_count() < 2, reason="needs two GPUs")
def test_two_gpus(cupy):
    host = np.arange(6, dtype=np.float32)
    t1 = oarlock.to_tensor(host).to("gpu:1")  # the backend's copies go to the device asked for
    assert t1.place == "gpu:1" and t1._data.device.id == 1
    t0 = t1.to("gpu:0")  # a peer copy
    assert t0.place == "gpu:0" and t0._data.device.id == 0
    np.testing.assert_array_equal(t0.numpy(), host)
    try:
        # kernels run on CuPy's current device, which set_device / device_guard choose
        with oarlock.device.device_guard("gpu:1"):
            doubled = t1 * 2
            assert doubled._data.device.id == 1 and oarlock.ones([1])._data.device.id == 1
            assert oarlock.to_tensor([1.0], place="gpu:1")._data.device.id == 1
        np.testing.assert_array_equal(doubled.numpy(), host * 2)
        assert oarlock.device.cuda.memory_allocated(1) > 0
        oarlock.seed(4)
        np.testing.assert_array_equal(GPU.generator(1).random(5).get(), GPU.generator(0).random(5).get())
    finally:
        oarlock.set_device("gpu:0")  # CuPy's current device back to 0
        oarlock.set_device("cpu")
