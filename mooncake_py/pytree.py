"""Nested tuple/list/dict arguments: flatten them to leaves and rebuild the same structure."""


class TreeDef:
    """The structure of a nested container; ``unflatten(leaves)`` rebuilds it."""
    __slots__ = ("kind", "meta", "children")

    def __init__(self, kind, meta, children):
        self.kind, self.meta, self.children = kind, meta, children

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and self.meta == other.meta and self.children == other.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        return f"({inner},)" if self.kind == "tuple" else f"[{inner}]"

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
        if self.kind == "dict":
            return dict(zip(self.meta, items))
        if self.kind == "namedtuple":
            return self.meta(*items)
        return tuple(items) if self.kind == "tuple" else list(items)


_LEAF = TreeDef("leaf", None, ())


def flatten(obj):
    """``(leaves, treedef)`` for nested tuples, lists, dicts and namedtuples of leaves."""
    leaves = []
    return leaves, _flatten(obj, leaves)


def _flatten(obj, leaves):
    t = type(obj)
    if t is tuple or t is list:
        return TreeDef(t.__name__, None, tuple(_flatten(o, leaves) for o in obj))
    if t is dict:
        keys = tuple(obj)
        return TreeDef("dict", keys, tuple(_flatten(obj[k], leaves) for k in keys))
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return TreeDef("namedtuple", t, tuple(_flatten(o, leaves) for o in obj))
    leaves.append(obj)
    return _LEAF


def leaf_paths(obj, prefix=""):
    """Index paths (``[0]['w']``) of the leaves of a nested container, in ``flatten``'s order."""
    t = type(obj)
    if t is tuple or t is list or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
        return [p for i, o in enumerate(obj) for p in leaf_paths(o, f"{prefix}[{i}]")]
    if t is dict:
        return [p for k in obj for p in leaf_paths(obj[k], f"{prefix}[{k!r}]")]
    return [prefix]
