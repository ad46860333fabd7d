"""Nested arguments ("pytrees"): flatten them to leaves and rebuild the same structure.

Containers are tuples, lists, dicts, namedtuples, dataclasses (their ``init`` fields) and any
class registered with :func:`register_pytree_node`; everything else is a leaf. The derivative
of a container argument has the same container structure, with one derivative per float leaf.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

# cls -> (flatten(obj) -> (children, aux), unflatten(aux, children) -> obj)
_NODES: dict[type, tuple[Callable[[Any], tuple[Sequence[Any], Hashable]],
                         Callable[[Any, Sequence[Any]], Any]]] = {}


class TreeDef:
    """The structure of a nested container; ``unflatten(leaves)`` rebuilds it."""
    __slots__ = ("children", "kind", "meta")

    def __init__(self, kind, meta, children):
        self.kind, self.meta, self.children = kind, meta, children

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and self.meta == other.meta and self.children == other.children)

    def __hash__(self):
        return hash((self.kind, self.children))

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        if self.kind == "tuple":
            return f"({inner},)"
        if self.kind == "list":
            return f"[{inner}]"
        cls = self.meta[0] if self.kind in ("dataclass", "custom") else self.meta
        return f"{cls.__name__}({inner})"

    @property
    def num_leaves(self):
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves):
        it = iter(leaves)
        return self._build(it)

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        items = [c._build(it) for c in self.children]
        kind = self.kind
        if kind == "tuple":
            return tuple(items)
        if kind == "list":
            return items
        if kind == "dict":
            return dict(zip(self.meta, items))
        if kind == "namedtuple":
            return self.meta(*items)
        if kind == "dataclass":
            cls, names = self.meta
            return cls(**dict(zip(names, items)))
        cls, aux = self.meta
        return _NODES[cls][1](aux, items)


_LEAF = TreeDef("leaf", None, ())


def register_pytree_node(cls: type, flatten: Callable[[Any], tuple[Iterable[Any], Hashable]],
                         unflatten: Callable[[Any, Sequence[Any]], Any]) -> None:
    """Make instances of ``cls`` containers: their children are differentiated, not the object.

    ``flatten(obj)`` returns ``(children, aux)``: the children (arrays, floats or further
    containers) and any constant data needed to rebuild the object (compared with ``==`` when
    a prepared cache checks its arguments, so keep it small and hashable). ``unflatten(aux,
    children)`` rebuilds an object from new children. Gradients of a registered argument come
    back as an object of the same class holding one gradient per child. Dataclasses need no
    registration.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> class Affine:
        ...     def __init__(self, w, b):
        ...         self.w, self.b = w, b
        >>> mp.register_pytree_node(Affine, lambda a: ((a.w, a.b), None),
        ...                         lambda aux, ch: Affine(*ch))
        >>> g = mp.grad(lambda p: np.sum(p.w * 3.0) + p.b ** 2)(Affine(np.ones(2), 2.0))
        >>> g.w, float(g.b)
        (array([3., 3.]), 4.0)
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node needs a class, got {type(cls).__name__}.")
    if cls in (tuple, list, dict):
        raise ValueError(f"{cls.__name__} is already a container; it cannot be re-registered.")
    if not (callable(flatten) and callable(unflatten)):
        raise TypeError("register_pytree_node(cls, flatten, unflatten): flatten(obj) -> "
                        "(children, aux) and unflatten(aux, children) -> obj must be callables.")
    _NODES[cls] = (flatten, unflatten)


def flatten(obj):
    """``(leaves, treedef)`` for nested containers of leaves (see the module docstring)."""
    leaves = []
    return leaves, _flatten(obj, leaves)


def _flatten(obj, leaves):
    t = type(obj)
    if t is np.ndarray or t is float:
        leaves.append(obj)
        return _LEAF
    if t is tuple or t is list:
        return TreeDef(t.__name__, None, tuple(_flatten(o, leaves) for o in obj))
    if t is dict:
        keys = tuple(obj)
        return TreeDef("dict", keys, tuple(_flatten(obj[k], leaves) for k in keys))
    node = _NODES.get(t)
    if node is not None:
        children, aux = node[0](obj)
        return TreeDef("custom", (t, aux), tuple(_flatten(o, leaves) for o in children))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return TreeDef("namedtuple", t, tuple(_flatten(o, leaves) for o in obj))
    if hasattr(t, "__dataclass_fields__"):
        names = tuple(f.name for f in dataclasses.fields(obj) if f.init)
        return TreeDef("dataclass", (t, names),
                       tuple(_flatten(getattr(obj, n), leaves) for n in names))
    leaves.append(obj)
    return _LEAF


def _labelled_children(obj):
    """``[(path label, child)]`` of a container, in flatten's order; None for a leaf."""
    t = type(obj)
    if t is tuple or t is list or (isinstance(obj, tuple) and hasattr(obj, "_fields")
                                   and t not in _NODES):
        return [(f"[{i}]", o) for i, o in enumerate(obj)]
    if t is dict:
        return [(f"[{k!r}]", obj[k]) for k in obj]
    if t in _NODES:
        return [(f"[{i}]", o) for i, o in enumerate(_NODES[t][0](obj)[0])]
    if hasattr(t, "__dataclass_fields__") and not isinstance(obj, type):
        return [(f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init]
    return None


def leaf_paths(obj, prefix=""):
    """Index paths (``[0]['w']``, ``.bias``) of the leaves of a container, in flatten's order."""
    children = _labelled_children(obj)
    if children is None:
        return [prefix]
    return [p for label, o in children for p in leaf_paths(o, prefix + label)]


def _is_float_leaf(x):
    if type(x) is float:
        return True
    dt = getattr(x, "dtype", None)
    return dt is not None and getattr(dt, "kind", None) == "f"


def ravel_pytree(tree: Any) -> tuple[Any, Callable[[Any], Any]]:
    """``(flat, unravel)``: the float leaves of ``tree`` as one 1-D array, and its inverse.

    The leaves are raveled in flatten order (the order :func:`mooncake_py.hessian` uses for a
    container argument) and concatenated with their common dtype. ``unravel(v)`` cuts a vector
    of that length back into the tree's structure, each piece reshaped and cast to its leaf's
    dtype; non-float leaves (integers, strings, None) are constants and come back unchanged.
    ``unravel`` is built from indexing and reshapes, so it is differentiable: ``f(unravel(v))``
    can be passed to ``mp.grad``, ``mp.hessian`` or :func:`mooncake_py.hessian_operator`.
    ``unravel(d)`` of a flat direction is a direction for ``mp.hvp``/``mp.jvp`` at ``tree``: the
    constant leaves it keeps count as no direction.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> params = {"w": np.ones((2, 2)), "b": np.zeros(2), "n": 3}
        >>> flat, unravel = mp.ravel_pytree(params)
        >>> flat
        array([1., 1., 1., 1., 0., 0.])
        >>> unravel(np.arange(6.0))["w"]
        array([[0., 1.],
               [2., 3.]])
        >>> H = mp.hessian(lambda p: np.sum(p["w"] ** 2) * p["n"])(params)  # (6, 6), flat order
        >>> np.diag(H)
        array([6., 6., 6., 6., 0., 0.])
        >>> mp.hvp(lambda p: np.sum(p["b"] ** 2) * p["n"])(params, unravel(np.ones(6)))["b"]
        array([6., 6.])
    """
    leaves, treedef = flatten(tree)
    floats = [i for i, leaf in enumerate(leaves) if _is_float_leaf(leaf)]
    shapes = [np.shape(leaves[i]) for i in floats]
    dtypes = [np.dtype(np.float64) if type(leaves[i]) is float else leaves[i].dtype
              for i in floats]
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    if floats:
        flat = np.concatenate([np.ravel(leaves[i]).astype(dtype, copy=False) for i in floats])
    else:
        flat = np.zeros(0, dtype=dtype)
    n = offsets[-1]

    def unravel(v):
        if np.ndim(v) != 1 or np.shape(v)[0] != n:
            raise ValueError(f"unravel expects a 1-D vector of length {n}, got shape "
                             f"{tuple(np.shape(v))}.")
        new = list(leaves)
        for i, shape, dt, a, b in zip(floats, shapes, dtypes, offsets[:-1], offsets[1:]):
            piece = v[a:b].reshape(shape)
            if getattr(v, "dtype", dt) != dt:
                piece = piece.astype(dt)
            new[i] = piece
        return treedef.unflatten(new)
    return flat, unravel
