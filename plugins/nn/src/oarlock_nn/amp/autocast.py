"""auto_cast (Paddle), autocast (torch's spelling) and the autocast queries.

The dispatcher does the casting (oarlock.dispatch: `set_autocast` and each op's `amp` policy:
"white" ops compute in the low-precision dtype, "black" ops in float32, the others follow their
inputs). This module turns Paddle's options into that state:

- O0: autocast off. O1: the ops' own policies, overridden by custom_white_list/custom_black_list.
- O2 (with decorate(level="O2") casting the parameters): the same, so that an op that is in neither
  list computes in the low-precision dtype when its inputs are low precision, and in float32 when any
  input is float32 -- Paddle's O2 with use_promote=True (its default). use_promote=False casts every
  float32 input of every op that is not black to the low-precision dtype, given to the dispatcher as
  an explicit white list. The dispatcher's own level "O2" is not used: it would also cast the inputs
  of `cast` (which autocast itself calls, so it recurses) and of the in-place optimizer updates.
- OD: the white ops compute in the low-precision dtype, every other op in float32.

Unlike Paddle, the ops in the black list stay in float32 under O2 too (Paddle's O2 black list only
holds interpolation, embedding lookup and scatter): the dispatcher has one black policy per op.

The state is per thread, like grad mode (and as in PyTorch): an auto_cast block casts the ops of the
thread that entered it, never those other threads run meanwhile, and exiting it restores what that
thread had when it entered.
"""

from __future__ import annotations

import difflib
import functools
import threading

import oarlock
import oarlock.dispatch as dispatch  # `from oarlock import dispatch` would ask oarlock.__getattr__ (plugin load)
from oarlock.registry import default_registry

LEVELS = ("O0", "O1", "O2", "OD")
DTYPES = ("float16", "bfloat16")
# Paddle's operator names (its AMP lists, custom_white_list={'elementwise_add'} in its examples)
# for the oarlock ops that compute the same thing
PADDLE_OP_NAMES = {
    "matmul_v2": "matmul", "mul": "matmul", "elementwise_add": "add", "elementwise_sub": "subtract",
    "elementwise_mul": "multiply", "elementwise_div": "divide", "elementwise_pow": "pow", "reduce_sum": "sum",
    "reduce_mean": "mean", "reduce_prod": "prod", "reduce_max": "max", "reduce_min": "min",
    "lookup_table": "embedding", "lookup_table_v2": "embedding", "softmax_with_cross_entropy": "cross_entropy",
    "cross_entropy2": "cross_entropy", "sigmoid_cross_entropy_with_logits": "binary_cross_entropy_with_logits",
    "flash_attn": "scaled_dot_product_attention",
}
_NAME_PREFIXES = ("paddle.", "torch.")


class _Last(threading.local):
    """The dtype of the auto_cast block this thread entered last (entering sets it, leaving does not
    restore it, as Paddle's amp_global_state().amp_dtype): GradScaler turns itself off after bfloat16
    autocast. Per thread, like the autocast state: a bfloat16 block in one thread must not turn off the
    float16 GradScaler of another."""

    dtype = None


LAST = _Last()


# -- the queries -------------------------------------------------------------------------------------

def is_autocast_enabled(device_type=None) -> bool:
    """Whether an auto_cast block (level O1, O2 or OD) is active. device_type is accepted and ignored:
    every device shares one autocast state, as in Paddle."""
    return dispatch.AUTOCAST.enabled


def get_autocast_dtype(device_type=None) -> str:
    """The low-precision dtype of the active auto_cast block ("float16" or "bfloat16"), "float16" when
    autocast is off (Paddle's semantics; torch's get_autocast_gpu_dtype also reports float16 by default).
    The name is a string, as Paddle returns; any oarlock function takes it as a dtype."""
    state = dispatch.AUTOCAST
    return state.dtype.name if state.enabled else "float16"


def get_autocast_cpu_dtype() -> str:
    """get_autocast_dtype(): one autocast state serves every device."""
    return get_autocast_dtype()


def get_autocast_gpu_dtype() -> str:
    """get_autocast_dtype(): one autocast state serves every device."""
    return get_autocast_dtype()


def _supported(dtype, device) -> bool:
    registry = default_registry()
    if device is None:
        from oarlock.device import default_place
        place = default_place()
    else:
        place = registry.parse_place(device, what=f"is_{dtype.name}_supported(): argument 'device'")
    return registry.find_kernel("matmul", place.type, dtype) is not None


def is_float16_supported(device=None) -> bool:
    """Whether `device` (default: the current one) has float16 kernels for the white ops (matmul)."""
    return _supported(oarlock.float16, device)


def is_bfloat16_supported(device=None) -> bool:
    """Whether `device` (default: the current one) has bfloat16 kernels for the white ops (matmul)."""
    return _supported(oarlock.bfloat16, device)


# -- op names --------------------------------------------------------------------------------------------

def _ops_by_policy(registry, policy):
    return {name for name, op in registry.ops.items() if op.amp == policy}


def white_list() -> dict:
    """{dtype: {level: op names}} of the ops that compute in the low-precision dtype (Paddle's layout)."""
    white = _ops_by_policy(default_registry(), "white")
    return {dtype: {level: set(white) for level in ("OD", "O1", "O2")} for dtype in DTYPES}


def black_list() -> dict:
    """{dtype: {level: op names}} of the ops that compute in float32 (under OD every op outside the white
    list does, so its entry is empty, as in Paddle)."""
    black = _ops_by_policy(default_registry(), "black")
    return {dtype: {"OD": set(), "O1": set(black), "O2": set(black)} for dtype in DTYPES}


def _castable(op) -> bool:
    """Whether autocast may cast op's inputs: not `cast` itself (autocast calls it: it would recurse),
    not an in-place op (the cast copy would be updated instead of the tensor: optimizer steps), not an
    internal op (a backward helper: it computes in the dtypes its forward saved)."""
    return op.name != "cast" and op.inplace is None and not op.name.startswith("_") and not op.creation


def resolve_op_name(name, where: str) -> str:
    """The registry name of the op called `name`: a registry name ("softmax"), a public name with or
    without its namespace ("nn.functional.softmax", "oarlock.matmul", "paddle.matmul", "Tensor.matmul")
    or one of Paddle's operator names ("elementwise_add", "matmul_v2")."""
    if not isinstance(name, str):
        raise TypeError(f"{where} must hold op names (str), got {type(name).__name__} {name!r}")
    registry = default_registry()
    op = registry.ops.get(name) or registry.ops.get(PADDLE_OP_NAMES.get(name, ""))
    qualified = name
    for prefix in _NAME_PREFIXES:
        if qualified.startswith(prefix):
            qualified = "oarlock." + qualified[len(prefix):]
    if not qualified.startswith(("oarlock.", "Tensor.")):
        qualified = "oarlock." + qualified
    if op is None:
        namespace, _, short = qualified.rpartition(".")
        entry = registry.api.get(namespace, {}).get(short)
        if entry is not None:
            op = getattr(entry[0], "opdef", None)
            if op is None:
                raise ValueError(f"{where}: {name!r} ({qualified}) is a Python function built from other ops, not "
                                 f"an op; list the ops it calls instead")
    if op is None:
        known = sorted(registry.ops)
        close = difflib.get_close_matches(name.rpartition(".")[2], known, n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"{where}: unknown op name {name!r}{hint}. Give an op's registry name (the keys of "
                         f"oarlock.registry.default_registry().ops, also shown by oarlock.amp.white_list() and "
                         f"black_list()), a public name such as 'matmul' or 'nn.functional.softmax' (see "
                         f"dir(oarlock.nn.functional)), or a Paddle operator name such as 'elementwise_add'")
    if not _castable(op):
        raise ValueError(f"{where}: op {op.name!r} cannot be listed: autocast never casts the inputs of `cast`, of "
                         f"in-place ops or of internal (backward) ops")
    return op.name


def _op_names(names, where):
    if names is None:
        return set()
    if isinstance(names, str):
        raise TypeError(f"{where} must be a list or set of op names, got the str {names!r} (write [{names!r}])")
    try:
        items = list(names)
    except TypeError:
        raise TypeError(f"{where} must be a list or set of op names, got {type(names).__name__} {names!r}") from None
    return {resolve_op_name(n, where) for n in items}


@functools.lru_cache(maxsize=8)
def _all_castable(registry, generation):
    """(the castable ops that are not black, those that are not white) for one state of a registry."""
    ops = registry.ops.values()
    return (frozenset(op.name for op in ops if _castable(op) and op.amp != "black"),
            frozenset(op.name for op in ops if _castable(op) and op.amp != "white"))


# -- the context manager ------------------------------------------------------------------------------

def _check_level(level, where):
    text = level.upper() if isinstance(level, str) else level
    if text not in LEVELS:
        raise ValueError(f"{where}: level must be one of {', '.join(map(repr, LEVELS))} (O0: off; O1: mixed "
                         f"precision; O2: with decorate(level='O2'); OD: only the white ops in low precision), "
                         f"got {level!r}")
    return text


def _check_dtype(dtype, where):
    name = dtype.name if isinstance(dtype, oarlock.dtypes.DType) else dtype
    name = name.lower().rsplit(".", 1)[-1] if isinstance(name, str) else name
    if name not in DTYPES:
        raise ValueError(f"{where}: dtype must be 'float16' or 'bfloat16' (the low-precision dtype the white ops "
                         f"compute in), got {dtype!r}")
    return name


def _check_bool(value, arg, where):
    if not isinstance(value, bool):
        raise TypeError(f"{where}: argument '{arg}' must be a bool, got {type(value).__name__} {value!r}")
    return value


class auto_cast:
    """`with oarlock.amp.auto_cast(...):` (or `@oarlock.amp.auto_cast(...)`) runs ops in mixed precision.

    - enable: False runs the block without autocast (also inside an enabled block).
    - custom_white_list / custom_black_list: op names that compute in the low-precision dtype / in
      float32, overriding the ops' own policies (registry names such as "softmax", public names such
      as "nn.functional.softmax", or Paddle operator names such as "elementwise_add"); an op in both
      is an error.
    - level: "O1" (default), "O2" (with decorate(level="O2")), "OD", or "O0" (off); see the module notes.
    - dtype: "float16" (default) or "bfloat16".
    - use_promote: O2 only: True computes an op that is in neither list in float32 when any input is
      float32; False casts it to the low-precision dtype.

    On exit (also through an exception) the state current at entry is restored, so blocks nest. The
    state is per thread, like grad mode: other threads' ops are not cast.
    """

    def __init__(self, enable=True, custom_white_list=None, custom_black_list=None, level="O1", dtype="float16",
                 use_promote=True):
        where = "auto_cast()"
        self._enable = _check_bool(enable, "enable", where)
        self._level = _check_level(level, where)
        self._dtype = _check_dtype(dtype, where)
        self._use_promote = _check_bool(use_promote, "use_promote", where)
        self._white = _op_names(custom_white_list, f"{where}: custom_white_list")
        self._black = _op_names(custom_black_list, f"{where}: custom_black_list")
        both = sorted(self._white & self._black)
        if both:
            raise ValueError(f"{where}: op(s) {both} are in both custom_white_list and custom_black_list; "
                             f"put each op in one list")
        self._args = (enable, custom_white_list, custom_black_list, level, dtype, use_promote)
        self._previous = threading.local()   # .stack: per thread, as one object may be entered by several

    def _state(self):
        """The set_autocast arguments for this block."""
        if not self._enable or self._level == "O0":
            return (False, None, "O1", (), ())
        white, black = self._white, self._black
        if self._level == "OD" or (self._level == "O2" and not self._use_promote):
            registry = default_registry()
            castable_white, castable_black = _all_castable(registry, registry.generation)
            if self._level == "OD":
                white = _ops_by_policy(registry, "white") | white
                black = (castable_black | black) - white
            else:
                white = (castable_white | white) - black
        return (True, oarlock.dtypes.convert_dtype(self._dtype), "O1", white, black)

    def __enter__(self):
        LAST.dtype = self._dtype
        # a stack, so the same object may be entered again inside its own block
        stack = self._previous.__dict__.setdefault("stack", [])
        stack.append(dispatch.set_autocast(*self._state()))
        return self

    def __exit__(self, *exc):
        dispatch.set_autocast(*self._previous.stack.pop())
        return False

    def __call__(self, fn):
        """Decorator: each call of fn runs inside a fresh block with these arguments."""
        args = self._args

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with auto_cast(*args):
                return fn(*a, **kw)
        return wrapper

    def __repr__(self):
        state = "off" if not self._enable or self._level == "O0" else f"{self._level}, {self._dtype}"
        return f"auto_cast({state})"


def amp_guard(enable=True, custom_white_list=None, custom_black_list=None, level="O1", dtype="float16",
              use_promote=True):
    """Paddle's older name of auto_cast (same arguments)."""
    return auto_cast(enable, custom_white_list, custom_black_list, level, dtype, use_promote)


def autocast(device_type=None, dtype=None, enabled=True, cache_enabled=None):
    """torch's spelling: `with oarlock.autocast("cuda", dtype=oarlock.bfloat16):` is auto_cast at level O1.
    dtype defaults to float16, or to bfloat16 for device_type "cpu" (torch's defaults). device_type
    is otherwise ignored (one autocast state serves every device); cache_enabled is accepted without
    effect (casts are not cached: each white op casts its float32 inputs on every call)."""
    if device_type is not None and not isinstance(device_type, str):
        raise TypeError(f"autocast(): argument 'device_type' must be a device type such as 'cuda' or 'cpu', "
                        f"got {type(device_type).__name__} {device_type!r}")
    if dtype is None:
        dtype = "bfloat16" if device_type == "cpu" else "float16"
    _check_bool(enabled, "enabled", "autocast()")
    return auto_cast(enable=enabled, level="O1", dtype=_check_dtype(dtype, "autocast()"))


class suspended:
    """Run a block with autocast off, restoring the state after: optimizer updates and loss scaling
    compute in their tensors' own dtypes, inside an auto_cast block too (as Paddle's optimizer ops do).
    Costs one attribute test when autocast is already off."""

    __slots__ = ("_previous",)

    def __enter__(self):
        self._previous = dispatch.set_autocast(False) if dispatch.AUTOCAST.enabled else None
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            dispatch.set_autocast(*self._previous)
        return False
