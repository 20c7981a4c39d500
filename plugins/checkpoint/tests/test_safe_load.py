"""Safe loading by default: oarlock.load of a pickle checkpoint refuses every import or call a genuine
checkpoint does not need, before it runs, and still reads genuine Paddle 3.2 files as paddle.load does.

Hostile files (hostile_pickles.py) carry payloads that create a sentinel file; stdlib pickle.loads of
each live case creates it (so each refusal is of a working exploit), oarlock.load must not.
"""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
import random
from fractions import Fraction

import hostile_pickles as hostile
import numpy as np
import pytest

import oarlock
from oarlock_checkpoint.safe_pickle import UnsafePickleError, safe_load, safe_loads
from same_structure import assert_same

PAYLOADS = ["open", "os.system", "eval", "exec", "numpy.load", "numpy.testing.runstring", "functools.partial"]
FUNCTION_PAYLOADS = PAYLOADS[:-1]  # what copyreg's extension registry can name (module + qualified name)
CASES = ([("reduce", payload, protocol) for payload in PAYLOADS for protocol in range(6)]
         + [(mechanism, None, protocol) for mechanism in ("BUILD", "NEWOBJ", "NEWOBJ_EX", "dict subclass",
                                                          "ndarray subclass", "persistent id")
            for protocol in range(6)]
         + [(ext, payload, protocol) for ext in hostile.EXT_CODES for payload in FUNCTION_PAYLOADS
            for protocol in range(2, 6)])


@pytest.fixture
def sentinel(tmp_path, monkeypatch):
    path = tmp_path / "payload-ran"
    monkeypatch.setattr(hostile, "SENTINEL", str(path))
    return path


def _opcodes(data: bytes) -> set[str]:
    try:
        return {op.name for op, _, _ in pickletools.genops(data)}
    except ValueError:
        return set()


def _assert_refused(path, data, names, sentinel):
    """oarlock.load(path) and safe_loads(data) refuse with UnsafePickleError naming the file and `names`,
    and nothing ran."""
    path.write_bytes(data)
    with pytest.raises(UnsafePickleError) as refused:
        oarlock.load(path)
    message = str(refused.value)
    assert str(path) in message and names in message and "weights_only=False" in message, message
    with pytest.raises(UnsafePickleError, match="^the-source: refused"):
        safe_loads(data, source="the-source")
    assert not sentinel.exists(), "the payload ran"


def _assert_live(data, sentinel):
    """stdlib pickle runs the payload: the case is a working exploit, not a malformed file."""
    try:
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - what the payload returns may fail later; it ran first
        pass
    assert sentinel.exists(), "the hostile case does not even run under plain pickle"
    sentinel.unlink()


@pytest.mark.parametrize("mechanism, payload, protocol", CASES,
                         ids=[f"{m}-{p or ''}-protocol{n}" for m, p, n in CASES])
def test_hostile_pickles_are_refused_before_anything_runs(tmp_path, sentinel, mechanism, payload, protocol):
    npy = str(tmp_path / "payload.npy")
    with hostile.extension(mechanism, payload, npy):
        data, live = hostile.case(mechanism, payload, protocol, npy)
        if mechanism in hostile.EXT_CODES:
            assert mechanism in _opcodes(data)
        elif mechanism in ("NEWOBJ", "NEWOBJ_EX") and protocol >= (2 if mechanism == "NEWOBJ" else 4):
            assert mechanism in _opcodes(data)
        if mechanism == "persistent id":  # oarlock.load reads its own records through persistent ids
            assert hostile.first_foreign_global(data) is None and _opcodes(data) & {"PERSID", "BINPERSID"}
            with pytest.raises(UnsafePickleError, match="^the-source: refused to unpickle a persistent id"):
                safe_loads(data, source="the-source")
            (tmp_path / "f.pdparams").write_bytes(data)
            with pytest.raises(pickle.UnpicklingError, match="a tensor record in this file is malformed"):
                oarlock.load(tmp_path / "f.pdparams")
            return
        _assert_refused(tmp_path / "hostile.pdparams", data, hostile.first_foreign_global(data), sentinel)
        if live:
            _assert_live(data, sentinel)


@pytest.mark.parametrize("name", list(hostile.handwritten("x.npy")))
def test_handwritten_hostile_pickles_are_refused(tmp_path, sentinel, name):
    """INST, OBJ, getattr chains and dotted names, and admitted reconstructors called or built the wrong way."""
    data, live, names = hostile.handwritten(str(tmp_path / "payload.npy"))[name]
    hostile.payloads(str(tmp_path / "payload.npy"))  # writes the .npy file the numpy.load case reads
    _assert_refused(tmp_path / "hostile.pkl", data, names, sentinel)
    if live:
        _assert_live(data, sentinel)


# -- genuine Paddle 3.2 files -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def paddle_files(tmp_path_factory):
    """Files written by the installed Paddle: layer state dicts, an AdamW state with its LR scheduler,
    and nested containers (Paddle writes a Tensor inside them as tuple((name, ndarray)))."""
    paddle = pytest.importorskip("paddle")
    out = tmp_path_factory.mktemp("paddle")
    paddle.seed(0)
    linear, conv, bn = paddle.nn.Linear(3, 4), paddle.nn.Conv2D(2, 3, 3), paddle.nn.BatchNorm2D(3)
    bn(paddle.randn([2, 3, 4, 4]))  # moves the running statistics off their initial values
    scheduler = paddle.optimizer.lr.StepDecay(0.1, step_size=2)
    adamw = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=linear.parameters())
    linear(paddle.randn([2, 3])).sum().backward()
    adamw.step()
    scheduler.step()
    nested = {"list": [1, 2, (3, "x")], "tuple": ("s", 4.5, None, True), "complex": 3 + 2j,
              "inner": {"tensor": paddle.to_tensor([1.5, 2.5]), "array": np.arange(3),
                        "bf16": paddle.ones([2], dtype="bfloat16")},
              "scalars": [np.float32(1.5), np.int64(3)]}
    files = {"linear.pdparams": linear.state_dict(), "conv.pdparams": conv.state_dict(),
             "bn.pdparams": bn.state_dict(), "adamw.pdopt": adamw.state_dict(), "nested.pkl": nested}
    for name, obj in files.items():
        paddle.save(obj, str(out / name))
    paddle.save(linear.state_dict(), str(out / "linear-protocol2.pdparams"), protocol=2)
    return paddle, out


_same = assert_same


@pytest.mark.parametrize("name", ["linear.pdparams", "conv.pdparams", "bn.pdparams", "adamw.pdopt", "nested.pkl",
                                  "linear-protocol2.pdparams"])
def test_genuine_paddle_files_load_by_default_as_paddle_loads_them(paddle_files, name):
    paddle, out = paddle_files
    theirs = paddle.load(str(out / name), return_numpy=True)
    # the same arrays Tensors hold; test_paddle_files.py compares the Tensors of the default
    for options in ({"return_numpy": True}, {"return_numpy": True, "weights_only": True}):
        _same(oarlock.load(out / name, **options), theirs)
    if name == "adamw.pdopt":
        assert oarlock.load(out / name)["LR_Scheduler"] == {"last_epoch": 1, "last_lr": 0.1}


# -- corrupt files ------------------------------------------------------------------------------------

def _oracle(data: bytes, genuine_globals: set[str]):
    """stdlib pickle's reference (pure-Python) unpickler, limited to the globals the unmutated file names
    (so a mutation cannot import). Not the C one: that sizes its memo by the largest index, so a mutated
    LONG_BINPUT makes it run out of memory where pickle's semantics give a value."""

    class Oracle(pickle._Unpickler):
        def find_class(self, module, name):
            # numpy 1.x's spelling of the same reconstructors is as genuine as numpy 2's
            if f"{module}.{name}".replace("numpy.core.", "numpy._core.") not in genuine_globals:
                raise pickle.UnpicklingError(f"{module}.{name}")
            return super().find_class(module, name)

    return Oracle(io.BytesIO(data)).load()


def _globals_of(data: bytes) -> set[str]:
    named = set()

    class Tracer(pickle.Unpickler):
        def find_class(self, module, name):
            named.add(f"{module}.{name}")
            return super().find_class(module, name)

    Tracer(io.BytesIO(data)).load()
    return named


def _mutants(data: bytes, rng: random.Random, count: int):
    for _ in range(count):
        mutant = bytearray(data)
        kind = rng.randrange(4)
        if kind == 0:  # a few random bytes
            for _ in range(rng.randint(1, 4)):
                mutant[rng.randrange(len(mutant))] = rng.randrange(256)
        elif kind == 1:  # truncated
            del mutant[rng.randrange(len(mutant)):]
        elif kind == 2:  # a byte dropped
            del mutant[rng.randrange(len(mutant))]
        else:  # a byte inserted
            mutant.insert(rng.randrange(len(mutant)), rng.randrange(256))
        yield bytes(mutant)


@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")  # genops on mutated STRING ops
@pytest.mark.parametrize("name", ["adamw.pdopt", "nested.pkl", "linear-protocol2.pdparams"])
def test_mutated_genuine_files_load_the_same_data_or_raise_unpickling_errors(paddle_files, name):
    _, out = paddle_files
    data = (out / name).read_bytes()
    genuine = _globals_of(data)
    outcomes = collections.Counter()
    for mutant in _mutants(data, random.Random(name), 1500):
        try:
            ours = safe_loads(mutant, source="mutant")
        except pickle.UnpicklingError:  # UnsafePickleError included
            outcomes["refused"] += 1
            continue
        # anything else (ValueError, KeyError, MemoryError, ...) fails the test here
        try:
            theirs = _oracle(mutant, genuine)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"safe_loads accepted a mutant stdlib pickle rejects ({type(exc).__name__}: {exc})")
        _same(ours, theirs)
        outcomes["loaded"] += 1
    assert outcomes["refused"] > 500 and outcomes["loaded"] >= 20, outcomes  # both paths were exercised


def test_truncated_hostile_file_is_still_refused_or_damaged(tmp_path, sentinel):
    data, _ = hostile.case("reduce", "os.system", 4, str(tmp_path / "payload.npy"))
    for end in range(0, len(data), 7):
        with pytest.raises(pickle.UnpicklingError):
            safe_loads(data[:end], source="cut")
    assert not sentinel.exists()


# -- what still loads, and the opt-in ------------------------------------------------------------------

def test_python_and_numpy_values_round_trip_at_every_protocol():
    """Everything Python's and numpy's own picklers write for checkpoint values loads safely at protocols 0-5
    and equals what stdlib pickle gives."""
    value = {"bytes": [b"", b"ab"], "bytearray": bytearray(b"xy"), "set": {1, 2}, "frozenset": frozenset({3}),
             "complex": 1 - 2j, "ordered": collections.OrderedDict(a=1, b=[2.5]), "big": 2 ** 100, "text": "ü",
             "arrays": [np.arange(6.0).reshape(2, 3), np.array(["ab", "c"]), np.zeros((2, 2), order="F"),
                        np.array([1, "x", None], dtype=object), np.zeros(3, ">i4"), np.zeros(2, "V3")],
             "scalars": [np.float16(2), np.bool_(True), np.datetime64("2020-01-01"), np.complex64(1j)],
             "dtype": np.dtype("float32"), "oarlock dtype": oarlock.bfloat16, "nothing": None}
    for protocol in range(6):
        data = pickle.dumps(value, protocol)
        assert repr(safe_loads(data, source="values")) == repr(pickle.loads(data)), protocol


def test_dtype_states_numpy_never_writes_are_refused():
    """numpy takes a dtype's flags from the pickle: a float32 whose flags claim object references would
    have numpy treat its bytes as pointers. Only the states numpy writes for plain dtypes are admitted."""
    header = b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00f4\x89\x88\x87R"

    def state(*fields):
        return header + pickle.dumps(tuple(fields), 2)[2:-1] + b"b."

    assert safe_loads(state(3, "<", None, None, None, -1, -1, 0), source="d") == np.dtype("<f4")
    for bad in [(3, "<", None, None, None, -1, -1, 0x3F), (3, "<", None, None, None, -1, -122, 0),
                (3, "|", None, ("a",), {"a": (np.dtype("f4"), 0)}, 4, 1, 0x10)]:
        with pytest.raises(UnsafePickleError, match="BUILD .* of numpy.dtype float32 with a state numpy never"):
            safe_loads(state(*bad), source="d")
    structured = pickle.dumps(np.zeros(2, dtype=[("a", "<f4"), ("b", "i2", (2,))]), 4)
    with pytest.raises(UnsafePickleError, match="numpy.dtype \\|V[0-9]+ with a state numpy never writes"):
        safe_loads(structured, source="d")
    copy_false = header.replace(b"\x88", b"\x89") + b"."  # np.dtype("f4", False, False): numpy's shared float32
    with pytest.raises(UnsafePickleError, match="a call \\(REDUCE\\) of numpy.dtype with arguments"):
        safe_loads(copy_false, source="d")


def test_weights_only_false_still_loads_a_trusted_pickle(tmp_path):
    """The default refuses an arbitrary class; weights_only=False is the explicit opt-in to full pickle."""
    trusted = {"ratio": Fraction(1, 3), "counter": collections.Counter("aab"), "t": oarlock.ones([2])}
    oarlock.save(trusted, tmp_path / "trusted.pkl")
    with pytest.raises(UnsafePickleError, match="fractions.Fraction"):
        oarlock.load(tmp_path / "trusted.pkl")
    back = oarlock.load(tmp_path / "trusted.pkl", weights_only=False)
    assert back["ratio"] == Fraction(1, 3) and back["counter"] == collections.Counter("aab")
    assert back["t"].tolist() == [1.0, 1.0]


def test_bad_arguments_name_the_function(tmp_path):
    oarlock.save({}, tmp_path / "e.pkl")
    with pytest.raises(TypeError, match="load\\(\\): weights_only must be True or False, got 'yes'"):
        oarlock.load(tmp_path / "e.pkl", weights_only="yes")
    with pytest.raises(TypeError, match="safe_loads\\(\\): data must be bytes, bytearray or memoryview, got str"):
        safe_loads("not bytes", source="x")
    with pytest.raises(pickle.UnpicklingError, match="x.bin: ends early: it is truncated"):
        safe_load(io.BytesIO(b"\x80\x04]"), source="x.bin")
