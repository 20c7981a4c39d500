"""What travels between pipeline stages: a Tensor, or tuples, lists and dicts of them (None allowed), taken apart
into its tensors plus a JSON-able description of the nesting, and put back together.

The pipeline's point-to-point code sends the description once per step (with each tensor's shape, dtype and
stop_gradient) and then only the tensors; PipelineLayer's recompute passes the tensors of a dict or nested
input to recompute() one by one, since recompute() only tracks top-level tensors.
"""

from __future__ import annotations

import oarlock


def flatten(value, what: str) -> tuple[list, object]:
    """(the tensors of `value` in order, its spec). `what` names the caller in the error for other leaves."""
    tensors: list = []

    def walk(item, path):
        if isinstance(item, oarlock.Tensor):
            tensors.append(item)
            return "T"
        if item is None:
            return None
        if isinstance(item, (tuple, list)):
            return ["tuple" if isinstance(item, tuple) else "list",
                    [walk(x, f"{path}[{i}]") for i, x in enumerate(item)]]
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise TypeError(f"{what}: dict keys must be str; got {list(item)} at {path or 'the top'}")
            return ["dict", list(item), [walk(x, f"{path}[{k!r}]") for k, x in item.items()]]
        raise TypeError(f"{what}: {path or 'the value'} is a {type(item).__name__}; accepted: a Tensor, None, or "
                        "tuples, lists and dicts of them")

    return tensors, walk(value, "")


def unflatten(spec, tensors):
    """The value `spec` describes, with `tensors` (an iterable, in flatten's order) at its leaves."""
    it = iter(tensors)

    def build(node):
        if node == "T":
            return next(it)
        if node is None:
            return None
        if node[0] == "dict":
            return {k: build(x) for k, x in zip(node[1], node[2])}
        items = [build(x) for x in node[1]]
        return tuple(items) if node[0] == "tuple" else items

    return build(spec)


def describe(spec, shapes) -> str:
    """A short human description of a spec with the leaf shapes/dtypes (for errors)."""
    it = iter(shapes)

    def show(node):
        if node == "T":
            return str(next(it))
        if node is None:
            return "None"
        if node[0] == "dict":
            return "{" + ", ".join(f"{k!r}: {show(x)}" for k, x in zip(node[1], node[2])) + "}"
        inner = ", ".join(show(x) for x in node[1])
        return f"({inner}{',' if len(node[1]) == 1 else ''})" if node[0] == "tuple" else f"[{inner}]"

    return show(spec)
