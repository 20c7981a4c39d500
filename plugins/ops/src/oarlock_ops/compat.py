"""oarlock.compat: Paddle 3.2's torch-style functions, with torch's argument names and results.

- sort(input, dim=-1, descending=False, stable=False, *, out=None) -> return_types.sort(values, indices).
- split(tensor, split_size_or_sections, dim=0): an int is a chunk size (the last chunk may be smaller),
  a list gives the sizes, which must add up to the axis; returns a tuple. (oarlock.split keeps Paddle's
  meaning: an int is a number of parts.)
- max/min in torch's three forms: (input) reduces every element to a 0-d tensor (ties share the
  gradient); (input, dim, keepdim=False) gives return_types.max/min(values, indices) with the int64
  index of the first extreme (NaN wins) and the gradient sent to it; (input, other) is elementwise.
- median/nanmedian(input, dim=None, keepdim=False, *, out=None): the lower median; with dim, a named
  tuple (values, indices). nanmedian of an all-NaN slice has index 0 like torch (Paddle's says -1).
- softmax(input, dim=None, dtype=None, *, out=None): dim None is torch's legacy choice, 0 for 0-D, 1-D
  and 3-D input and 1 otherwise; dtype casts the input first.

Paddle's argument names (x, axis) are refused with a pointer to the Paddle function, as Paddle 3.2
does. out= follows the call path's rules (exact shape, no kind-losing cast, no autograd; see
sorting.write_out). The named tuple types are sorting.return_types, shared with oarlock.topk.
Argument errors name the compat function: the arguments are checked here, before the ops (which
would report their own names) see them.
"""

from __future__ import annotations

import numbers

import oarlock
from oarlock import Tensor
from oarlock.nn import functional as F
from oarlock_ops.sorting import _UNSET, internal_op, return_types, write_out


# -- argument checks ---------------------------------------------------------------------------------------

def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _plain(value):
    """A 0-d integer Tensor as the int it holds (Paddle's compat takes those for sizes and dims)."""
    if isinstance(value, Tensor) and value.ndim == 0 and value.dtype in ("int32", "int64"):
        return value.item()
    return value


def _refuse_keywords(public, kwargs, paddle_name, accepted):
    """The keywords left over after the signature's own: Paddle's names get a pointer to `paddle_name`."""
    if not kwargs:
        return
    paddle = sorted(k for k in kwargs if k in ("x", "axis"))
    if paddle:
        raise TypeError(f"{public}() takes torch's argument names (input, dim), got {', '.join(map(repr, paddle))}; "
                        f"{paddle_name} is the function with Paddle's names")
    raise TypeError(f"{public}() got unexpected keyword argument(s) {', '.join(map(repr, kwargs))}; "
                    f"it accepts {accepted}")


def _tensor(public, name, value):
    if value is _UNSET:
        raise TypeError(f"{public}() missing required argument '{name}'")
    if not isinstance(value, Tensor):
        raise TypeError(f"{public}(): argument '{name}' must be a Tensor, got {type(value).__name__}")


def _flag(public, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{public}(): argument '{name}' must be a bool, got {type(value).__name__} {value!r}")


def _dim(public, dim, ndim):
    """dim as an int in [-ndim, ndim) (a 0-d tensor takes 0 and -1); a 0-d integer Tensor counts as an int."""
    dim = _plain(dim)
    if not _is_int(dim):
        raise TypeError(f"{public}(): argument 'dim' must be an int, got {type(dim).__name__} {dim!r}")
    span = max(ndim, 1)
    if not -span <= dim < span:
        raise ValueError(f"{public}(): argument 'dim' is {dim}, out of range for a {ndim}-D tensor; it accepts "
                         f"[{-span}, {span - 1}]")
    return int(dim)


def _finish(public, out, result):
    return result if out is None else write_out(public, out, result)


# -- the functions -------------------------------------------------------------------------------------------

def sort(input=_UNSET, dim=-1, descending=False, stable=False, *, out=None, **kwargs):
    """compat.sort(input, dim=-1, descending=False, stable=False, *, out=None): the values sorted along dim
    and their int64 indices, as return_types.sort (stable; NaN last, first when descending)."""
    public = "oarlock.compat.sort"
    _refuse_keywords(public, kwargs, "oarlock.sort", "input, dim=-1, descending=False, stable=False, *, out=None")
    _tensor(public, "input", input)
    _flag(public, "descending", descending)
    _flag(public, "stable", stable)
    result = return_types.sort(*internal_op("sort")(input, _dim(public, dim, input.ndim), descending, stable))
    return _finish(public, out, result)


def _split_sizes(public, sections, size, dim):
    """torch's split sizes along an axis of `size`: an int is a chunk size, a list the sizes themselves."""
    sections = _plain(sections)
    if isinstance(sections, (list, tuple)):
        sections = [_plain(n) for n in sections]
    if _is_int(sections):
        if sections <= 0:
            raise ValueError(f"{public}(): argument 'split_size_or_sections' must be a positive chunk size, "
                             f"got {sections}")
        if size == 0:  # torch: one empty chunk
            return [0]
        return [int(sections)] * (size // sections) + ([size % sections] if size % sections else [])
    if isinstance(sections, (list, tuple)) and all(_is_int(n) for n in sections):
        sizes = [int(n) for n in sections]
        if any(n < 0 for n in sizes) or sum(sizes) != size:
            raise ValueError(f"{public}(): argument 'split_size_or_sections' {sizes} must be non-negative sizes "
                             f"adding up to {size}, the size of dim {dim}; they add up to {sum(sizes)}")
        return sizes
    raise TypeError(f"{public}(): argument 'split_size_or_sections' must be an int (the chunk size) or a list of "
                    f"ints (the sizes), got {type(sections).__name__} {sections!r}")


def split(tensor=_UNSET, split_size_or_sections=_UNSET, dim=0, **kwargs):
    """compat.split(tensor, split_size_or_sections, dim=0): a tuple of pieces along dim; an int is the
    chunk size (the last chunk may be smaller), a list gives the sizes."""
    public = "oarlock.compat.split"
    _refuse_keywords(public, kwargs, "oarlock.split", "tensor, split_size_or_sections, dim=0")
    _tensor(public, "tensor", tensor)
    if split_size_or_sections is _UNSET:
        raise TypeError(f"{public}() missing required argument 'split_size_or_sections'")
    if tensor.ndim == 0:
        raise ValueError(f"{public}(): argument 'tensor' is 0-D; it needs a dimension to split")
    dim = _dim(public, dim, tensor.ndim)
    sizes = _split_sizes(public, split_size_or_sections, tensor.shape[dim], dim)
    return tuple(oarlock.split(tensor, sizes, axis=dim))


def _min_max_form(public, args, kwargs):
    """(dim, other, keepdim) from torch's call forms (input), (input, dim, keepdim=False), (input, other)."""
    forms = "(input), (input, dim, keepdim=False) or (input, other)"
    _refuse_keywords(public, {k: v for k, v in kwargs.items() if k not in ("dim", "keepdim", "other")},
                     public.replace("compat.", ""), forms)
    if len(args) > 2:
        raise TypeError(f"{public}() takes at most 3 positional arguments, got {len(args) + 1}; it accepts {forms}")
    bound = dict(kwargs)
    for i, value in enumerate(args):
        key = "keepdim" if i else ("other" if isinstance(value, Tensor) else "dim")
        if key in bound:
            raise TypeError(f"{public}() got multiple values for argument '{key}'")
        bound[key] = value
    other, dim, keepdim = bound.get("other"), bound.get("dim"), bound.get("keepdim", _UNSET)
    if other is not None:
        if dim is not None or keepdim is not _UNSET:
            raise TypeError(f"{public}(): 'other' (elementwise) does not combine with dim or keepdim; "
                            f"it accepts {forms}")
        _tensor(public, "other", other)
        return None, other, False
    if dim is None:
        if keepdim is not _UNSET:
            raise TypeError(f"{public}(): keepdim needs dim; it accepts {forms}")
        return None, None, False
    if not (_is_int(dim) or isinstance(dim, Tensor)):
        raise TypeError(f"{public}(): the second argument must be an int dim or a Tensor other, got "
                        f"{type(dim).__name__} {dim!r}; it accepts {forms}")
    keepdim = False if keepdim is _UNSET else keepdim
    _flag(public, "keepdim", keepdim)
    return dim, None, keepdim


def _min_max(name):
    public = f"oarlock.compat.{name}"
    elementwise = {"max": "maximum", "min": "minimum"}[name]

    def reduce(input=_UNSET, *args, out=None, **kwargs):
        dim, other, keepdim = _min_max_form(public, args, kwargs)
        _tensor(public, "input", input)
        if other is not None:
            result = getattr(oarlock, elementwise)(input, other)
        elif dim is None:
            result = getattr(oarlock, name)(input)
        else:
            pair = internal_op(f"{name}_with_index")(input, _dim(public, dim, input.ndim), keepdim)
            result = getattr(return_types, name)(*pair)
        return _finish(public, out, result)

    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = (f"compat.{name}: (input) -> the {name} of every element, 0-d; (input, dim, keepdim=False) "
                      f"-> return_types.{name}(values, indices int64); (input, other) -> {elementwise}(input, "
                      f"other). out= takes a Tensor, or (values, indices) for the dim form.")
    return reduce


def _median(name):
    public = f"oarlock.compat.{name}"

    def median(input=_UNSET, dim=None, keepdim=False, *, out=None, **kwargs):
        _refuse_keywords(public, kwargs, f"oarlock.{name}", "input, dim=None, keepdim=False, *, out=None")
        _tensor(public, "input", input)
        _flag(public, "keepdim", keepdim)
        op = internal_op(name)
        if dim is None:  # the value only; ties share its gradient (torch)
            return _finish(public, out, op(input, None, keepdim, "min")[0])
        values, indices = op(input, _dim(public, dim, input.ndim), keepdim, "min", spread_ties=False)
        if name == "nanmedian":  # an all-NaN slice: torch says index 0, Paddle's op -1
            indices = oarlock.maximum(indices, 0)
        return _finish(public, out, getattr(return_types, name)(values, indices))

    median.__name__ = median.__qualname__ = name
    median.__doc__ = (f"compat.{name}(input, dim=None, keepdim=False, *, out=None): the lower median"
                      f"{' ignoring NaN' if name == 'nanmedian' else ''}; with dim, return_types.{name}"
                      f"(values, indices int64).")
    return median


def softmax(input=_UNSET, dim=None, dtype=None, *, out=None, **kwargs):
    """compat.softmax(input, dim=None, dtype=None, *, out=None): softmax along dim; dim None means 0 for
    0-D, 1-D and 3-D input and 1 otherwise (torch's legacy rule); dtype casts the input first."""
    public = "oarlock.compat.softmax"
    _refuse_keywords(public, kwargs, "oarlock.nn.functional.softmax", "input, dim=None, dtype=None, *, out=None")
    _tensor(public, "input", input)
    if dim is None:
        dim = 0 if input.ndim in (0, 1, 3) else 1
    dim = _dim(public, dim, input.ndim)
    x = input if dtype is None else oarlock.cast(input, dtype)
    return _finish(public, out, F.softmax(x, axis=dim))


FUNCTIONS = (sort, split, _min_max("max"), _min_max("min"), _median("median"), _median("nanmedian"), softmax)


def register_api(api):
    """Export this module's public names."""
    for fn in FUNCTIONS:
        api.export("oarlock.compat", fn.__name__, fn)
