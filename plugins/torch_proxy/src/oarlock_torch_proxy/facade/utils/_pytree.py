"""torch.utils._pytree: flatten nested lists, tuples, named tuples and dicts into leaves and a spec, and back
(tree_flatten, tree_unflatten, tree_map, tree_leaves); everything else is a leaf, None included, as in torch."""

from __future__ import annotations

from collections import OrderedDict


class TreeSpec:
    def __init__(self, kind, context, children):
        self.type, self.context, self.children_specs = kind, context, children
        self.num_leaves = 1 if kind is None else sum(c.num_leaves for c in children)

    def __repr__(self):
        return f"TreeSpec({getattr(self.type, '__name__', 'leaf')}, {self.context!r}, {self.children_specs!r})"

    def __eq__(self, other):
        return isinstance(other, TreeSpec) and (self.type, self.context, self.children_specs) == (
            other.type, other.context, other.children_specs)


LeafSpec = lambda: TreeSpec(None, None, [])   # noqa: E731  (torch exposes it as a class)


def _children(node):
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return type(node), None, list(node)
    if isinstance(node, (list, tuple)):
        return type(node), None, list(node)
    if isinstance(node, dict):
        keys = list(node)
        return type(node), keys, [node[k] for k in keys]
    return None


def tree_flatten(tree, is_leaf=None):
    if (is_leaf is not None and is_leaf(tree)) or _children(tree) is None:
        return [tree], LeafSpec()
    kind, context, children = _children(tree)
    leaves, specs = [], []
    for child in children:
        child_leaves, child_spec = tree_flatten(child, is_leaf)
        leaves.extend(child_leaves)
        specs.append(child_spec)
    return leaves, TreeSpec(kind, context, specs)


def tree_unflatten(leaves, treespec):
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(f"tree_unflatten(): the spec holds {treespec.num_leaves} leaves, got {len(leaves)}")
    return _build(iter(leaves), treespec)


def _build(leaves, spec):
    if spec.type is None:
        return next(leaves)
    children = [_build(leaves, s) for s in spec.children_specs]
    if spec.type in (dict, OrderedDict) or issubclass(spec.type, dict):
        return spec.type(zip(spec.context, children))
    if issubclass(spec.type, tuple) and hasattr(spec.type, "_fields"):
        return spec.type(*children)
    return spec.type(children)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map(fn, tree, *rests, is_leaf=None):
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [tree_flatten(r, is_leaf)[0] for r in rests]
    return tree_unflatten([fn(*xs) for xs in zip(leaves, *others)], spec)


def tree_map_only(types, fn, tree, is_leaf=None):
    return tree_map(lambda x: fn(x) if isinstance(x, types) else x, tree, is_leaf=is_leaf)


def tree_any(pred, tree, is_leaf=None):
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_all(pred, tree, is_leaf=None):
    return all(map(pred, tree_leaves(tree, is_leaf)))
