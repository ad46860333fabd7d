"""A reverse-mode call's arguments and output, on tapes whose values may be duals.

:class:`Tracked` makes the differentiated leaves of a call tracked values (a dual argument gets
its own copy of its tangent) and puts the cotangents back in the arguments' structure;
:func:`as_gradient` gives a gradient the input's dtype; :func:`check_scalar`,
:func:`check_seeds` and :func:`unwrap_out` check and unwrap what ``f`` returned. Used by the
transforms and by replay, which records a call exactly as the transforms do.
"""
import numpy as np

from ..core import array_module as am
from ..core.arguments import check_leaf_kind, describe_arg, fname, is_float_leaf, leaf_error
from ..core.array_ops import has_buffer
from ..core.pytree import flatten
from ..dual.dual_array import DualArray
from ..errors import OutputTypeError, TangentError
from ..tape import TrackedArray


class Tracked:
    """The tracked leaves of one call: which argument/leaf each belongs to.

    ``f`` may write into its array arguments: the tracked handles are the user's arrays (no
    copy), so after the call they hold what ``f`` wrote, as with plain NumPy, while
    ``entry`` keeps a handle on each argument's value at entry, with respect to which the
    gradients are taken. A dual argument (forward-over-reverse) gets its own copy of its
    tangent, so that writes move the tangent of the tracked value, never the caller's
    direction ``v``.
    """

    def __init__(self, f, args, argnums, tape):
        self.args = list(args)
        self.slots = []  # (argnum, treedef, [leaf or tracked], [index of tracked leaf or None])
        self.tracked = []
        self.entry = []
        for i in argnums:
            leaves, tree = flatten(args[i])
            if tree.kind == "leaf" and not is_float_leaf(leaves[0]):
                raise leaf_error(f, i, leaves[0])
            new, where = [], []
            for j, leaf in enumerate(leaves):
                if type(leaf) is not np.ndarray:
                    check_leaf_kind(f, i, leaf, "" if tree.kind == "leaf" else f" (leaf {j})")
                if is_float_leaf(leaf):
                    where.append(len(self.tracked))
                    if type(leaf) is DualArray and has_buffer(leaf._tangent):
                        leaf = DualArray(leaf._value, np.copy(leaf._tangent), leaf._tag)
                    t = tape.track(leaf)
                    self.tracked.append(t)
                    self.entry.append(TrackedArray(t._value, tape, t._node))
                    new.append(t)
                else:
                    where.append(None)
                    new.append(leaf)
            self.slots.append((i, tree, leaves, where))
            self.args[i] = tree.unflatten(new)

    def structure(self, cotangents):
        """Per differentiated argument, its cotangents in the argument's structure."""
        out = []
        for _, tree, leaves, where in self.slots:
            out.append(tree.unflatten([None if w is None else as_gradient(cotangents[w], leaf)
                                       for leaf, w in zip(leaves, where)]))
        return out


def as_gradient(g, leaf):
    """A gradient with the input's dtype, never a read-only view into the tape's buffers."""
    if type(g) is TrackedArray:
        return g
    dt = getattr(leaf, "dtype", None)
    if type(leaf) is float:
        # a dual (grad inside jvp) stays one: float() of it would drop the outer derivative
        return g if type(g) is DualArray else np.float64(g)
    if isinstance(leaf, np.generic) and isinstance(g, np.ndarray) and g.shape == ():
        g = g[()]
    if isinstance(g, np.ndarray):
        if dt is not None and g.dtype != dt:
            g = g.astype(dt)
        elif not g.flags.writeable or g.base is not None:
            g = g.copy()
        return g
    if isinstance(g, np.generic) and dt is not None and g.dtype != dt:
        return g.astype(dt)
    if type(g) is not DualArray and am.is_device(g):
        if dt is not None and g.dtype != dt:
            return g.astype(dt)
        return g.copy() if getattr(g, "base", None) is not None else g
    return g


def unwrap_out(y):
    return y._value if type(y) is TrackedArray else y


def check_scalar(f, y):
    v = unwrap_out(y)
    if type(v) is float:
        return
    shape = getattr(v, "shape", None)
    dt = getattr(v, "dtype", None)
    if shape is None or dt is None:
        raise OutputTypeError(
            f"grad needs {fname(f)} to return a real floating-point scalar; it returned "
            f"{type(v).__name__}. Return a float array of shape () (e.g. np.sum(...)); for "
            "several outputs use mp.vjp or mp.jacobian.")
    if shape != () or dt.kind != "f":
        raise OutputTypeError(
            f"grad needs {fname(f)} to return a real floating-point scalar; it returned "
            f"{describe_arg(y)} ({type(v).__name__} of dtype {dt}, shape {tuple(shape)}). "
            + ("Reduce it to a scalar (np.sum, np.mean, x @ w) or use mp.vjp / mp.jacobian for "
               "non-scalar outputs." if dt.kind == "f" else
               "A complex output has no gradient: take a real scalar of it (np.real, np.imag, "
               "np.abs(z)**2, np.angle), or use mp.vjp with a complex cotangent."
               if dt.kind == "c" else "Integer and boolean outputs have no derivative."))


def check_cotangent_kind(f, o, s):
    """A complex cotangent pairs with a complex output only (the imaginary part would have
    nothing to pair with and be dropped)."""
    sk = "c" if type(s) is complex else getattr(getattr(s, "dtype", None), "kind", "f")
    if sk == "c" and type(o) is TrackedArray and o._value.dtype.kind != "c":
        raise TangentError(
            f"the cotangent given to the pullback of {fname(f)} is complex but the output it "
            f"belongs to is real ({o._value.dtype}); give a real cotangent (np.real(ybar)).")


def check_seeds(f, outs, ytree, seeds, stree):
    """The checks of a pullback's cotangent ``seeds`` (flattened, structure ``stree``) against
    the outputs ``outs`` of ``f`` (structure ``ytree``): structure, shapes, and real/complex."""
    if stree != ytree:
        raise TangentError(f"the cotangent given to the pullback of {fname(f)} has structure "
                           f"{stree!r}; the output has {ytree!r}.")
    for o, s in zip(outs, seeds):
        os_, ss = np.shape(unwrap_out(o)), np.shape(s)
        if os_ != ss:
            raise TangentError(f"the cotangent given to the pullback of {fname(f)} has shape "
                               f"{ss}; the output it belongs to has shape {os_}.")
        check_cotangent_kind(f, o, s)
