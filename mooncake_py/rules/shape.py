"""Reverse and forward rules for shape manipulation: reshape, transpose, joining, splitting,
tiling, flips, diagonals, triangles, padding and the ``*_like`` constructors.

Every function here is linear in its array argument, so each pullback is the adjoint map: the
inverse reshape/permutation, a slice, a sum over copies, or a scatter of ``g`` back into place,
and each frule applies the function itself to the tangent. The frules are lane-aware: the
tangent's leading lane axis is carried through by shifting axis arguments by one (or by
reshaping to ``(k,) + out.shape``). Pullbacks and frules only use ``np.`` calls (and
:func:`~.cotangents.scatter_add`), so they also run on dual numbers for second order.
"""
import itertools
import math

import numpy as np

from ..core import array_module as am
from ..core.array_ops import astype
from ..errors import MissingRuleError, MutationError
from .broadcasting import shape_of, unbroadcast
from .cotangents import scatter_add
from .lanes import align, nlanes, shift_axis
from .registry import RRULES, composite, fn_name, frule, primitive, rrule, zero_derivative


def linear_in_first(fn):
    """Register a rule for ``fn`` that is differentiable in its first positional argument only.

    The decorated ``rule(*args, **kwargs)`` returns ``(out, adjoint)`` where ``adjoint(g)`` is
    the cotangent of the first argument; the other positional arguments get ``None``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def double(x, unused):
        ...     return 2 * x
        >>> @linear_in_first(double)
        ... def _(x, unused):
        ...     return double(x, unused), lambda g: 2 * g
        >>> float(mp.grad(lambda x: double(x, 0))(1.0))
        2.0
    """
    def register(rule):
        def full(args, kwargs, needs):
            out, adjoint = rule(*args, **kwargs)
            if adjoint is None:
                return out, None
            rest = (None,) * (len(args) - 1)
            return out, lambda g: (adjoint(g),) + rest
        full.__name__ = f"rrule({fn_name(fn)})"
        RRULES[fn] = full
        return rule
    return register


def linear_frule(fn):
    """Register a lane-aware frule for ``fn``, linear in its first positional argument only.

    The decorated ``rule(dx, y, *args, **kwargs)`` gets the lane-first tangent ``dx`` of the
    first argument, the output ``y = fn(*args, **kwargs)`` and the call's arguments, and returns
    ẏ with the lane axis first. No tangent in, no tangent out.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def double(x, unused):
        ...     return 2 * x
        >>> @linear_frule(double)
        ... def _(dx, y, x, unused):
        ...     return 2 * dx
        >>> from mooncake_py.dual import dual, tangent
        >>> float(tangent(double(dual(1.0, 1.0), 0)))
        2.0
    """
    def register(tmap):
        @frule(fn, lanes=True)
        def rule(primals, tangents, **kw):
            y = fn(*primals, **kw)
            dx = tangents[0]
            return y, (None if dx is None else tmap(dx, y, *primals, **kw))
        rule.__name__ = rule.__qualname__ = f"frule({fn_name(fn)})"
        rule.__module__ = tmap.__module__
        return tmap
    return register


def _as_out(t, y):
    """Lane-first tangent ``t`` reshaped to ``(k,) + y.shape`` (for ops that only add or drop
    axes of length one, or read elements in C order)."""
    return np.reshape(t, (nlanes(t),) + tuple(shape_of(y)))


def _flat(t):
    """Lane-first tangent ``t`` with each lane flattened (C order): shape ``(k, size)``."""
    s = shape_of(t)
    return np.reshape(t, (s[0], math.prod(s[1:])))


def _seq_tangents(arrays, ts):
    """Lane-first tangents of every element of a sequence argument (zeros for elements without
    one), or None if none has one. A sequence given as one array is iterated along its axis 0."""
    if ts is None:
        return None
    if type(ts) is not tuple:
        return [ts[:, i] for i in range(shape_of(ts)[1])]
    live = next((t for t in ts if t is not None), None)
    if live is None:
        return None
    k = nlanes(live)
    return [np.zeros_like(live, shape=(k,) + tuple(shape_of(a))) if t is None else t
            for a, t in zip(arrays, ts)]


def _ax(axis, ndim):
    """A single (possibly negative) axis as a non-negative int."""
    return int(axis) % ndim if ndim else 0


def _no_out(fn, out):
    if out is not None:
        raise MutationError(
            f"{fn_name(fn)}(..., out=...) writes into an existing array, which the tape cannot "
            "represent yet; drop out= and use the returned value.")


def _along(axis, key):
    """An index selecting ``key`` along ``axis`` and everything along the axes before it."""
    return (slice(None),) * axis + (key,)


def _split_along(g, sizes, axis):
    """``g`` cut into consecutive pieces of ``sizes`` along ``axis`` (basic slices: views)."""
    pieces, start = [], 0
    for n in sizes:
        pieces.append(g[_along(axis, slice(start, start + n))])
        start += n
    return pieces


def _like_input(g, a):
    """``g`` cast to the float dtype of input ``a`` where a mixed-dtype join promoted it."""
    dt, gdt = getattr(a, "dtype", None), getattr(g, "dtype", None)
    if dt is not None and gdt is not None and dt != gdt and dt.kind == "f":
        return astype(np.real(g) if gdt.kind == "c" else g, dt)  # real input, complex join
    return g


def _as_input_structure(arrays, pieces):
    """Cotangents of a sequence argument: a list aligned with it, or (when the sequence was
    itself one array, iterated along axis 0) an array."""
    if isinstance(arrays, (list, tuple)):
        return [_like_input(p, a) for p, a in zip(pieces, arrays)]
    return np.stack(pieces)


# --- casts and copies ----------------------------------------------------------------------------
@rrule(astype)
def _astype(x, dtype):
    out = astype(x, dtype)
    if np.dtype(dtype).kind != "f":
        return out, None
    src = x.dtype
    return out, lambda g: (astype(g, src), None)


@linear_in_first(np.copy)
def _copy(a, *args, **kw):
    return np.copy(a, *args, **kw), lambda g: g


@linear_frule(np.copy)
def _copy_f(dx, y, a, *args, **kw):
    return np.copy(dx)


# (np.real, np.imag, np.conjugate: rules/complex.py)


# --- reshaping ------------------------------------------------------------------------------------
def _ravel_order(a, order):
    """The order in which ``np.ravel(a, order)`` reads ``a``: "C", "F", or (for order 'K' on a
    layout that is neither) the C-order positions it reads, as an index array."""
    if order in ("C", "F", None):
        return order or "C"
    if not isinstance(a, np.ndarray) and am.device_module(a) is None:
        return "C"  # a wrapped value: its primal's layout is not ours to see
    if order == "A":
        return "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    idx = np.empty_like(a, dtype=np.intp)  # same axis order as a's memory layout
    idx[...] = am.arange(a.size, like=a).reshape(a.shape)
    perm = np.ravel(idx, order="K")
    if np.array_equal(perm, am.arange(a.size, like=a)):
        return "C"
    if np.array_equal(perm, np.ravel(idx, order="F")):
        return "F"
    return perm


@linear_in_first(np.reshape)
def _reshape(a, shape=None, order="C", **kw):
    shp, back = shape_of(a), _ravel_order(a, order)  # order 'A' follows a's layout, not g's
    return np.reshape(a, shape, order=order, **kw), lambda g: np.reshape(g, shp, order=back)


@linear_frule(np.reshape)
def _reshape_f(dx, y, a, shape=None, order="C", **kw):
    # With the lane axis first, C order keeps each lane's C order, and F order (lane axis
    # fastest) each lane's F order; 'A' is decided by the primal's layout.
    return np.reshape(dx, (nlanes(dx),) + tuple(shape_of(y)), order=_ravel_order(a, order))


@linear_in_first(np.ravel)
def _ravel(a, order="C"):
    shape = shape_of(a)
    read = _ravel_order(a, order)
    if isinstance(read, str):
        return np.ravel(a, order), lambda g: np.reshape(g, shape, order=read)
    inverse = np.argsort(read)
    return np.ravel(a, order), lambda g: np.reshape(np.take(g, inverse), shape)


@linear_frule(np.ravel)
def _ravel_f(dx, y, a, order="C"):
    read = _ravel_order(a, order)
    if isinstance(read, str):
        return np.reshape(dx, (nlanes(dx),) + tuple(shape_of(y)), order=read)
    return np.take(_flat(dx), read, axis=1)


@linear_in_first(np.squeeze)
def _squeeze(a, axis=None):
    shape = shape_of(a)
    return np.squeeze(a, axis), lambda g: np.reshape(g, shape)


@linear_frule(np.squeeze)
def _squeeze_f(dx, y, a, axis=None):
    return _as_out(dx, y)


@linear_in_first(np.expand_dims)
def _expand_dims(a, axis):
    shape = shape_of(a)
    return np.expand_dims(a, axis), lambda g: np.reshape(g, shape)


@linear_frule(np.expand_dims)
def _expand_dims_f(dx, y, a, axis):
    return _as_out(dx, y)


@linear_in_first(np.broadcast_to)
def _broadcast_to(array, shape, subok=False):
    src = shape_of(array)
    return np.broadcast_to(array, shape, subok=subok), lambda g: unbroadcast(g, src)


def _broadcast_tangent(t, y):
    s = tuple(shape_of(y))
    return np.broadcast_to(align(t, len(s)), (nlanes(t),) + s)


@linear_frule(np.broadcast_to)
def _broadcast_to_f(dx, y, array, shape, subok=False):
    return _broadcast_tangent(dx, y)


@rrule(np.broadcast_arrays)
def _broadcast_arrays(*args, **kw):
    outs = np.broadcast_arrays(*args, **kw)
    shapes = [shape_of(a) for a in args]
    return outs, lambda gs: tuple(unbroadcast(g, s) for g, s in zip(gs, shapes))


@frule(np.broadcast_arrays, lanes=True)
def _broadcast_arrays_f(primals, tangents, **kw):
    outs = np.broadcast_arrays(*primals, **kw)
    return outs, tuple(None if t is None else _broadcast_tangent(t, y)
                       for t, y in zip(tangents, outs))


def _atleast_rule(fn):
    @rrule(fn)
    def rule(*arys):
        out = fn(*arys)
        shapes = [shape_of(a) for a in arys]
        if len(arys) == 1:
            return out, lambda g: (np.reshape(g, shapes[0]),)
        return out, lambda gs: tuple(np.reshape(g, s) for g, s in zip(gs, shapes))

    @frule(fn, lanes=True)
    def forward(primals, tangents):
        out = fn(*primals)
        if len(primals) == 1:
            return out, None if tangents[0] is None else _as_out(tangents[0], out)
        return out, tuple(None if t is None else _as_out(t, y) for t, y in zip(tangents, out))
    return rule


for _f in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    _atleast_rule(_f)


# --- axis permutations ---------------------------------------------------------------------------
@linear_in_first(np.transpose)
def _transpose(a, axes=None):
    out = np.transpose(a, axes)
    if axes is None:
        return out, np.transpose
    nd = len(shape_of(a))
    inverse = tuple(int(i) for i in np.argsort([_ax(ax, nd) for ax in axes]))
    return out, lambda g: np.transpose(g, inverse)


@linear_frule(np.transpose)
def _transpose_f(dx, y, a, axes=None):
    nd = len(shape_of(a))
    perm = range(nd - 1, -1, -1) if axes is None else [_ax(i, nd) for i in axes]
    return np.transpose(dx, (0,) + tuple(i + 1 for i in perm))


@linear_in_first(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    return np.swapaxes(a, axis1, axis2), lambda g: np.swapaxes(g, axis1, axis2)


@linear_frule(np.swapaxes)
def _swapaxes_f(dx, y, a, axis1, axis2):
    nd = len(shape_of(a))
    return np.swapaxes(dx, shift_axis(axis1, nd), shift_axis(axis2, nd))


@linear_in_first(np.moveaxis)
def _moveaxis(a, source, destination):
    return np.moveaxis(a, source, destination), lambda g: np.moveaxis(g, destination, source)


@linear_frule(np.moveaxis)
def _moveaxis_f(dx, y, a, source, destination):
    nd = len(shape_of(a))
    return np.moveaxis(dx, shift_axis(source, nd), shift_axis(destination, nd))


@linear_in_first(np.flip)
def _flip(m, axis=None):
    return np.flip(m, axis), lambda g: np.flip(g, axis)


@linear_frule(np.flip)
def _flip_f(dx, y, m, axis=None):
    return np.flip(dx, shift_axis(axis, len(shape_of(m))))


@linear_in_first(np.fliplr)
def _fliplr(m):
    return np.fliplr(m), np.fliplr


@linear_frule(np.fliplr)
def _fliplr_f(dx, y, m):
    return np.flip(dx, 2)


@linear_in_first(np.flipud)
def _flipud(m):
    return np.flipud(m), np.flipud


@linear_frule(np.flipud)
def _flipud_f(dx, y, m):
    return np.flip(dx, 1)


@linear_in_first(np.rot90)
def _rot90(m, k=1, axes=(0, 1)):
    return np.rot90(m, k, axes), lambda g: np.rot90(g, -k, axes)


@linear_frule(np.rot90)
def _rot90_f(dx, y, m, k=1, axes=(0, 1)):
    return np.rot90(dx, k, shift_axis(tuple(axes), len(shape_of(m))))


@linear_in_first(np.roll)
def _roll(a, shift, axis=None):
    back = -shift if np.ndim(shift) == 0 else tuple(-s for s in shift)
    return np.roll(a, shift, axis), lambda g: np.roll(g, back, axis)


@linear_frule(np.roll)
def _roll_f(dx, y, a, shift, axis=None):
    if axis is None:  # np.roll rolls the flattened array
        return _as_out(np.roll(_flat(dx), shift, 1), y)
    return np.roll(dx, shift, shift_axis(axis, len(shape_of(a))))


# --- joining -------------------------------------------------------------------------------------
@linear_in_first(np.concatenate)
def _concatenate(arrays, axis=0, out=None, **kw):
    _no_out(np.concatenate, out)
    y = np.concatenate(arrays, axis, **kw)
    shapes = [shape_of(a) for a in arrays]
    if axis is None:
        sizes = [math.prod(s) for s in shapes]
        return y, lambda g: _as_input_structure(arrays, [
            np.reshape(p, s) for p, s in zip(_split_along(g, sizes, 0), shapes)])
    ax = _ax(axis, len(shapes[0]))
    sizes = [s[ax] for s in shapes]
    return y, lambda g: _as_input_structure(arrays, _split_along(g, sizes, ax))


@frule(np.concatenate, lanes=True)
def _concatenate_f(primals, tangents, **kw):
    arrays, *rest = primals
    _no_out(np.concatenate, rest[1] if len(rest) > 1 else None)
    y = np.concatenate(arrays, *rest, **kw)
    ts = _seq_tangents(arrays, tangents[0])
    if ts is None:
        return y, None
    axis = rest[0] if rest else kw.get("axis", 0)
    if axis is None:
        return y, np.concatenate([_flat(t) for t in ts], axis=1)
    return y, np.concatenate(ts, axis=_ax(axis, len(shape_of(y))) + 1)


@linear_in_first(np.stack)
def _stack(arrays, axis=0, out=None, **kw):
    _no_out(np.stack, out)
    y = np.stack(arrays, axis, **kw)
    ax, n = _ax(axis, len(shape_of(y))), len(arrays)
    return y, lambda g: _as_input_structure(arrays, [g[_along(ax, i)] for i in range(n)])


@frule(np.stack, lanes=True)
def _stack_f(primals, tangents, **kw):
    arrays, *rest = primals
    _no_out(np.stack, rest[1] if len(rest) > 1 else None)
    y = np.stack(arrays, *rest, **kw)
    ts = _seq_tangents(arrays, tangents[0])
    if ts is None:
        return y, None
    axis = rest[0] if rest else kw.get("axis", 0)
    return y, np.stack(ts, axis=_ax(axis, len(shape_of(y))) + 1)


def _at_least(nd):
    """The shape ``np.atleast_{nd}d`` gives an array of shape ``s``."""
    def promote(s):
        if len(s) >= nd:
            return s
        return {1: {0: (1,)}, 2: {0: (1, 1), 1: (1,) + s},
                3: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}}[nd][len(s)]
    return promote


def _column(s):
    """The shape of a ``np.column_stack`` column made from an array of shape ``s``."""
    return s if len(s) >= 2 else (1, 1) if not s else s + (1,)


def _joining_rule(fn, promote, axis_of):
    """Rule for hstack/vstack/dstack/column_stack: promote each input's shape, then concatenate
    along ``axis_of(promoted shapes)``; the pullback slices and reshapes back."""
    @linear_in_first(fn)
    def rule(tup, **kw):
        y = fn(tup, **kw)
        shapes = [shape_of(a) for a in tup]
        promoted = [promote(s) for s in shapes]
        ax = axis_of(promoted)
        sizes = [s[ax] for s in promoted]
        return y, lambda g: _as_input_structure(tup, [
            np.reshape(p, s) for p, s in zip(_split_along(g, sizes, ax), shapes)])

    @frule(fn, lanes=True)
    def forward(primals, tangents, **kw):
        tup = primals[0]
        y = fn(tup, **kw)
        ts = _seq_tangents(tup, tangents[0])
        if ts is None:
            return y, None
        if type(tangents[0]) is not tuple:  # one array iterated along axis 0: shapes of rows
            tup = [tup[0]] * len(ts)
        promoted = [promote(tuple(shape_of(a))) for a in tup]
        ts = [np.reshape(t, (nlanes(t),) + s) for t, s in zip(ts, promoted)]
        return y, np.concatenate(ts, axis=axis_of(promoted) + 1)
    return rule


_joining_rule(np.hstack, _at_least(1), lambda ps: 0 if len(ps[0]) == 1 else 1)
_joining_rule(np.vstack, _at_least(2), lambda ps: 0)
_joining_rule(np.dstack, _at_least(3), lambda ps: 2)
_joining_rule(np.column_stack, _column, lambda ps: 1)


@rrule(np.append)
def _append(arr, values, *more, **kw):
    y = np.append(arr, values, *more, **kw)
    axis = more[0] if more else kw.get("axis")
    sa, sv = shape_of(arr), shape_of(values)
    rest = (None,) * len(more)
    if axis is None:
        n = math.prod(sa)
        return y, lambda g: (np.reshape(g[:n], sa), np.reshape(g[n:], sv)) + rest
    ax = _ax(axis, len(sa))
    n = sa[ax]
    return y, lambda g: (g[_along(ax, slice(0, n))], g[_along(ax, slice(n, None))]) + rest


@frule(np.append, lanes=True)
def _append_f(primals, tangents, **kw):
    arr, values, *more = primals
    y = np.append(arr, values, *more, **kw)
    ts = _seq_tangents((arr, values), tuple(tangents[:2]))
    if ts is None:
        return y, None
    axis = more[0] if more else kw.get("axis")
    if axis is None:
        return y, np.concatenate([_flat(t) for t in ts], axis=1)
    return y, np.concatenate(ts, axis=_ax(axis, len(shape_of(arr))) + 1)


# --- splitting ------------------------------------------------------------------------------------
def _piece_bounds(n, indices_or_sections):
    """``(start, length)`` of each piece ``np.array_split`` cuts from ``n`` elements."""
    if np.ndim(indices_or_sections) == 0:
        k = int(indices_or_sections)
        each, extra = divmod(n, k)
        lengths = [each + 1] * extra + [each] * (k - extra)
        starts = np.cumsum([0] + lengths[:-1]).tolist()
        return list(zip(starts, lengths))
    points = [0] + list(indices_or_sections) + [n]
    bounds = []
    for lo, hi in itertools.pairwise(points):
        start, stop, _ = slice(lo, hi).indices(n)
        bounds.append((start, max(0, stop - start)))
    return bounds


def _split_adjoint(shape, axis, bounds):
    """Pullback of a split into pieces ``bounds`` along ``axis``: the pieces' cotangents put back.

    Pieces that tile the axis in order are concatenated; overlapping or out-of-order pieces
    (index lists that are not increasing) are zero-padded into place and summed.
    """
    n = shape[axis]
    in_order, pos = True, 0
    for start, length in bounds:
        if length:
            in_order &= start == pos
            pos = start + length
    if in_order and pos == n:
        used = [k for k, (_, length) in enumerate(bounds) if length]
        return lambda gs: np.concatenate([gs[k] for k in used], axis)

    def pullback(gs):
        total = None
        for g, (start, length) in zip(gs, bounds):
            if length:
                width = [(0, 0)] * len(shape)
                width[axis] = (start, n - start - length)
                part = np.pad(g, width)
                total = part if total is None else total + part
        return total if total is not None else am.zeros(shape, dtype=gs[0].dtype, like=gs[0])
    return pullback


def _split_rule(fn, axis_of=None):
    @linear_in_first(fn)
    def rule(ary, indices_or_sections, *args, **kw):
        ys = fn(ary, indices_or_sections, *args, **kw)
        shape = shape_of(ary)
        if axis_of is None:
            axis = args[0] if args else kw.get("axis", 0)
        else:
            axis = axis_of(len(shape))
        ax = _ax(axis, len(shape))
        return ys, _split_adjoint(shape, ax, _piece_bounds(shape[ax], indices_or_sections))

    @linear_frule(fn)
    def forward(dx, ys, ary, indices_or_sections, *args, **kw):
        nd = len(shape_of(ary))
        axis = (args[0] if args else kw.get("axis", 0)) if axis_of is None else axis_of(nd)
        # The primal call has validated the sections; array_split cuts the tangent the same way.
        return np.array_split(dx, indices_or_sections, axis=_ax(axis, nd) + 1)
    return rule


_split_rule(np.split)
_split_rule(np.array_split)
_split_rule(np.hsplit, lambda nd: 1 if nd > 1 else 0)
_split_rule(np.vsplit, lambda nd: 0)
_split_rule(np.dsplit, lambda nd: 2)

if hasattr(np, "unstack"):
    @linear_in_first(np.unstack)
    def _unstack(x, *, axis=0):
        return np.unstack(x, axis=axis), lambda gs: np.stack(gs, axis)

    @linear_frule(np.unstack)
    def _unstack_f(dx, ys, x, *, axis=0):
        return np.unstack(dx, axis=_ax(axis, len(shape_of(x))) + 1)


# --- copies: tile, repeat -------------------------------------------------------------------------
@linear_in_first(np.tile)
def _tile(A, reps):
    shape = shape_of(A)
    reps = (int(reps),) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    d = max(len(shape), len(reps))
    src = (1,) * (d - len(shape)) + tuple(shape)
    reps = (1,) * (d - len(reps)) + reps
    # The output's axis i, of length reps[i] * src[i], is (copy, element) in C order.
    split = tuple(n for pair in zip(reps, src) for n in pair)
    copies = tuple(range(0, 2 * d, 2))
    return np.tile(A, reps), lambda g: np.reshape(np.sum(np.reshape(g, split), axis=copies),
                                                  shape)


@linear_frule(np.tile)
def _tile_f(dx, y, A, reps):
    shape = tuple(shape_of(A))
    reps = (int(reps),) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    d = max(len(shape), len(reps))
    src = (1,) * (d - len(shape)) + shape
    reps = (1,) * (d - len(reps)) + reps
    return np.tile(np.reshape(dx, (nlanes(dx),) + src), (1,) + reps)


@linear_in_first(np.repeat)
def _repeat(a, repeats, axis=None):
    y = np.repeat(a, repeats, axis)
    shape = shape_of(a)
    src = (math.prod(shape),) if axis is None else tuple(shape)
    ax = 0 if axis is None else _ax(axis, len(shape))
    reps = am.to_host(repeats)  # it decides the output's shape: host data
    if reps.size == 1:
        r = int(reps.reshape(-1)[0])
        split = src[:ax] + (src[ax], r) + src[ax + 1:]
        return y, lambda g: np.reshape(np.sum(np.reshape(g, split), axis=ax + 1), shape)
    source = np.repeat(np.arange(src[ax]), reps)  # input position of each output position
    return y, lambda g: np.reshape(scatter_add(src, _along(ax, source), g), shape)


@linear_frule(np.repeat)
def _repeat_f(dx, y, a, repeats, axis=None):
    if axis is None:  # np.repeat repeats the flattened array
        return np.repeat(_flat(dx), repeats, 1)
    return np.repeat(dx, repeats, _ax(axis, len(shape_of(a))) + 1)


# --- diagonals and triangles ----------------------------------------------------------------------
def _diagonal_adjoint(shape, offset, axis1, axis2, length):
    """Pullback of ``np.diagonal(a, offset, axis1, axis2)`` for ``a`` of ``shape``: ``g`` (the
    other axes, then the diagonal) scattered onto the diagonal of zeros."""
    a1, a2 = _ax(axis1, len(shape)), _ax(axis2, len(shape))
    other = tuple(n for i, n in enumerate(shape) if i not in (a1, a2))
    rows, cols = shape[a1], shape[a2]
    # In the layout with axis1, axis2 moved last and merged, the diagonal is every (cols + 1)th
    # entry from the offset's flat position: a slice, so the scatter assigns (NumPy's add.at
    # with index arrays costs ~4x as much at n = 128).
    start = offset if offset >= 0 else -offset * cols
    flat = slice(start, start + max(length - 1, 0) * (cols + 1) + 1, cols + 1) if length \
        else slice(0, 0)
    flat_shape, last = other + (rows * cols,), other + (rows, cols)
    if (a1, a2) == (len(shape) - 2, len(shape) - 1):  # (np.moveaxis alone costs ~2.5 µs)
        return lambda g: np.reshape(scatter_add(flat_shape, (Ellipsis, flat), g), last)
    return lambda g: np.moveaxis(
        np.reshape(scatter_add(flat_shape, (Ellipsis, flat), g), last), (-2, -1), (a1, a2))


@linear_in_first(np.diagonal)
def _diagonal(a, offset=0, axis1=0, axis2=1):
    y = np.diagonal(a, offset, axis1, axis2)
    return y, _diagonal_adjoint(shape_of(a), offset, axis1, axis2, shape_of(y)[-1])


@linear_frule(np.diagonal)
def _diagonal_f(dx, y, a, offset=0, axis1=0, axis2=1):
    # The lane axis stays first among the axes diagonal() keeps in front of the diagonal.
    nd = len(shape_of(a))
    return np.diagonal(dx, offset, shift_axis(axis1, nd), shift_axis(axis2, nd))


@linear_in_first(np.diag)
def _diag(v, k=0):
    y = np.diag(v, k)
    shape = shape_of(v)
    if len(shape) == 1:
        return y, lambda g: np.diagonal(g, k)
    return y, _diagonal_adjoint(shape, k, 0, 1, shape_of(y)[0])


def _diag_matrices(t, k):
    """``np.diag(v, k)`` for every lane ``v`` of the lane-first tangent ``t`` (shape (lanes, n)).

    Each lane's row ``[v_0, 0 × N, v_1, 0 × N, ...]`` read as an N × N matrix (N = n + |k|)
    holds v on the main diagonal, since consecutive diagonal entries are N + 1 apart in C order;
    shifting the row by the offset's flat position moves it to diagonal k. Built from
    concatenation and reshapes only, so it composes with every wrapper.
    """
    lanes, n = shape_of(t)
    big = n + abs(k)
    spaced = np.concatenate([t[:, :, None], np.zeros_like(t, shape=(lanes, n, big))], axis=2)
    start = k if k >= 0 else -k * big
    row = np.concatenate([np.zeros_like(t, shape=(lanes, start)),
                          np.reshape(spaced, (lanes, n * (big + 1))),
                          np.zeros_like(t, shape=(lanes, big * big))], axis=1)
    return np.reshape(row[:, :big * big], (lanes, big, big))


@linear_frule(np.diag)
def _diag_f(dx, y, v, k=0):
    if len(shape_of(v)) == 1:
        return _diag_matrices(dx, int(k))
    return np.diagonal(dx, k, 1, 2)


def _triangle_rule(fn):
    @linear_in_first(fn)
    def rule(m, k=0):
        y = fn(m, k)
        if len(shape_of(m)) == 1:  # m is broadcast to the rows of a square matrix
            return y, lambda g: np.sum(fn(g, k), axis=0)
        return y, lambda g: fn(g, k)

    @linear_frule(fn)
    def forward(dx, y, m, k=0):
        if len(shape_of(m)) == 1:  # each lane is broadcast to the rows of its square matrix
            return fn(_broadcast_tangent(dx[:, None, :], y), k)
        return fn(dx, k)  # acts on the last two axes, whatever leads them
    return rule


_triangle_rule(np.triu)
_triangle_rule(np.tril)


# --- padding --------------------------------------------------------------------------------------
def _pad_pairs(pad_width, ndim):
    """``pad_width`` (int, pair, per-axis pairs or {axis: width}) as ndim ``(before, after)``."""
    if isinstance(pad_width, dict):
        seq = [(0, 0)] * ndim
        for axis, width in pad_width.items():
            seq[axis] = (width, width) if np.ndim(width) == 0 else tuple(width)
        pad_width = seq
    pw = np.round(np.asarray(pad_width)).astype(np.intp)
    if pw.size == 1:
        return [(int(pw.ravel()[0]),) * 2] * ndim
    if pw.size == 2 and pw.shape != (2, 1):
        return [tuple(int(p) for p in pw.ravel())] * ndim
    return [tuple(int(p) for p in row) for row in np.broadcast_to(pw, (ndim, 2))]


# Modes whose padding copies entries of the array: the padded array is a gather of the array's
# entries, and np.pad itself, applied to the entries' flat positions, says which one goes where.
_GATHER_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pad_mode_supported(mode, direction, kwargs):
    if mode in ("constant", "empty"):
        return
    if mode in _GATHER_PAD_MODES and kwargs.get("reflect_type", "even") == "even":
        return
    raise MissingRuleError(
        f"mooncake_py has no {direction}-mode rule for np.pad with mode={mode!r}"
        f"{', reflect_type=' + repr(kwargs['reflect_type']) if 'reflect_type' in kwargs else ''}: "
        "supported are mode='constant' (constant constant_values), 'empty', 'edge', 'wrap', "
        "'linear_ramp' (constant end_values), and 'reflect', 'symmetric' (either "
        "reflect_type). Build other paddings from slices of the array, e.g. np.concatenate([x, "
        "np.full(k, np.max(x))]) for mode='maximum'; those are differentiated.")


def _pad_source(shape, pad_width, mode, kwargs):
    """For a gather mode: the flat position in the array of each padded entry (np.pad of the
    positions, with the same arguments: the same copies)."""
    return np.pad(np.arange(math.prod(shape)).reshape(shape), pad_width, mode, **kwargs)


def _pad_by_rule(array, pad_width, mode="constant", **kwargs):
    return np.pad(array, pad_width, mode, **kwargs)


# np.pad itself is a composite (below): the modes with rules of their own go through this
_pad_ruled = primitive(_pad_by_rule)


@linear_in_first(_pad_ruled)
def _pad(array, pad_width, mode="constant", **kwargs):
    """np.pad: constant/empty modes slice the cotangent; gather modes (edge, reflect, symmetric,
    wrap) add it back onto the entries each padded entry copies.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(np.pad(x, 2, mode="reflect")))(np.ones(3))
        array([2., 3., 2.])
    """
    _pad_mode_supported(mode, "reverse", kwargs)
    y = np.pad(array, pad_width, mode, **kwargs)
    shape = shape_of(array)
    if mode in _GATHER_PAD_MODES:
        src = _pad_source(shape, pad_width, mode, kwargs)
        return y, lambda g: np.reshape(scatter_add((math.prod(shape),), (np.ravel(src),),
                                                   np.reshape(g, (-1,))), shape)
    key = tuple(slice(before, before + n)
                for (before, _), n in zip(_pad_pairs(pad_width, len(shape)), shape))
    return y, lambda g: g[key]


@frule(_pad_ruled, lanes=True)
def _pad_f(primals, tangents, **kwargs):
    array, pad_width, *rest = primals
    mode = rest[0] if rest else kwargs.get("mode", "constant")
    extra = {k: v for k, v in kwargs.items() if k != "mode"}
    _pad_mode_supported(mode, "forward", extra)
    y = np.pad(array, pad_width, *rest, **kwargs)
    dx = tangents[0]
    if dx is None:
        return y, None
    shape = shape_of(array)
    if mode in _GATHER_PAD_MODES:  # each lane gathers as the value does
        src = _pad_source(shape, pad_width, mode, extra)
        k = shape_of(dx)[0]
        return y, np.reshape(np.reshape(dx, (k, -1))[:, np.ravel(src)], (k,) + src.shape)
    # The padding is constant (or, for 'empty', arbitrary): its tangent is zero either way.
    return y, np.pad(dx, [(0, 0)] + _pad_pairs(pad_width, len(shape)))


@composite(np.pad)
def _pad_composite(array, pad_width, mode="constant", **kwargs):
    """np.pad: ``linear_ramp`` and ``reflect_type='odd'`` (affine in the array) built axis by
    axis from indexing, products and concatenation as NumPy builds them, so every mode and
    order differentiates them; every other mode is the rule-backed :func:`_pad_ruled`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(np.pad(x, 2, mode="linear_ramp", end_values=1.0))
        >>> mp.grad(f)(np.array([2.0, 3.0]))    # pads end, end + (edge - end)/2: 1 + 1/2
        array([1.5, 1.5])
        >>> g = lambda x: np.sum(np.pad(x, 1, mode="reflect", reflect_type="odd") ** 2)
        >>> mp.grad(g)(np.array([1.0, 2.0, 4.0]))   # pads 2·1 - 2 = 0 and 2·4 - 2 = 6
        array([ 2., -8., 32.])
    """
    if mode == "linear_ramp":
        return _pad_linear_ramp(array, pad_width, kwargs)
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type", "even") == "odd":
        return _pad_odd(array, pad_width, mode == "symmetric", kwargs)
    return _pad_ruled(array, pad_width, mode, **kwargs)


def _along(axis, key):
    return (slice(None),) * axis + (key,)


def _pad_extra_check(mode, kwargs, allowed):
    extra = set(kwargs) - set(allowed)
    if extra:
        raise MissingRuleError(
            f"np.pad with mode={mode!r} takes {', '.join(allowed)} only; got {sorted(extra)}.")


def _pad_linear_ramp(array, pad_width, kwargs):
    """Per axis, as NumPy pads: each padded entry is ``end + (edge - end)·t`` with ``t`` the
    ramp from 0 at the end to 1 next to the edge, i.e. a gather of the edge times ``t`` plus a
    constant."""
    _pad_extra_check("linear_ramp", kwargs, ("end_values",))
    shape = shape_of(array)
    nd = len(shape)
    ends = np.broadcast_to(np.asarray(kwargs.get("end_values", 0)), (nd, 2))
    dt = np.result_type(array)
    real = np.empty(0, dt).real.dtype
    out = array
    for axis, ((b, a), n) in enumerate(zip(_pad_pairs(pad_width, nd), shape)):
        if b == 0 and a == 0:
            continue
        src = np.pad(np.arange(n), (b, a), "edge")
        t = np.pad(np.ones(n, real), (b, a), "linear_ramp", end_values=0)
        c = np.pad(np.zeros(n, dt), (b, a), "linear_ramp", end_values=tuple(ends[axis]))
        bshape = (-1,) + (1,) * (nd - 1 - axis)
        out = out[_along(axis, src)] * np.reshape(t, bshape) + np.reshape(c.astype(dt), bshape)
    return out


def _pad_odd(array, pad_width, symmetric, kwargs):
    """``reflect``/``symmetric`` with ``reflect_type='odd'``: per axis, chunks ``2·edge -
    mirrored entries`` added on both sides until the width is filled, in the chunks NumPy's
    ``_set_reflect_both`` uses (so a width beyond one period reflects the padded values too)."""
    _pad_extra_check("reflect" if not symmetric else "symmetric", kwargs, ("reflect_type",))
    shape = shape_of(array)
    out = array
    eo = 1 if symmetric else 0
    for axis, ((left, right), period) in enumerate(zip(_pad_pairs(pad_width, len(shape)),
                                                         shape)):
        if left == 0 and right == 0:
            continue
        if period == 1:  # NumPy extends a singleton axis with its edge (legacy behaviour)
            widths = [(0, 0)] * len(shape)
            widths[axis] = (left, right)
            out = _pad_ruled(out, widths, "edge")
            continue
        while left > 0 or right > 0:
            length = shape_of(out)[axis]
            if symmetric:
                old = length // period * period
            else:
                old = (length - 1) // (period - 1) * (period - 1)
            parts = []
            if left > 0:
                c = min(old, left)
                mirror = out[_along(axis, np.arange(c, 0, -1) - eo)]
                parts.append(2 * out[_along(axis, slice(0, 1))] - mirror)
                left -= c
            parts.append(out)
            if right > 0:
                c = min(old, right)
                mirror = out[_along(axis, np.arange(length - 2 + eo, length - 2 + eo - c, -1))]
                parts.append(2 * out[_along(axis, slice(length - 1, length))] - mirror)
                right -= c
            out = np.concatenate(parts, axis=axis)
    return out


# --- functions whose outputs carry no derivative --------------------------------------------------
# (np.empty_like/zeros_like/ones_like/full_like have rules in mutation.py: their result is a
# tracked or dual buffer that tracked values can be written into.)
for _f in [np.shape, np.ndim, np.size, np.argmax, np.argmin, np.argsort, np.nonzero,
           np.count_nonzero, np.searchsorted, np.argwhere, np.flatnonzero, np.any, np.all,
           np.result_type, np.iscomplexobj, np.isrealobj, np.may_share_memory, np.shares_memory]:
    zero_derivative(_f)


# --- by composition: block ------------------------------------------------------------------
@composite(np.block)
def _block(arrays):
    """Nested lists joined innermost-last-axis first, as ``np.block`` does (operands promoted
    to the result's rank with leading axes)."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else 0

    def rank(x):
        return max(rank(e) for e in x) if isinstance(x, list) else len(shape_of(x))
    d = depth(arrays)
    nd = max(rank(arrays), d)

    def join(x, level):
        if not isinstance(x, list):
            return np.reshape(x, (1,) * (nd - len(shape_of(x))) + tuple(shape_of(x)))
        return np.concatenate([join(e, level + 1) for e in x], axis=level - d)
    return join(arrays, 0)


# --- by composition: axis functions defined through transpose/swapaxes -------------------------
@composite(np.rollaxis)
def _rollaxis(a, axis, start=0):
    """np.rollaxis as the transpose NumPy performs."""
    nd = len(shape_of(a))
    axis = _normalize_axis(axis, nd)
    start = start + nd if start < 0 else start
    if not 0 <= start < nd + 1:
        raise np.exceptions.AxisError(
            f"'start' arg requires {-nd} <= start < {nd + 1}, but {start} was passed in")
    if axis < start:
        start -= 1
    axes = [i for i in range(nd) if i != axis]
    axes.insert(start, axis)
    return np.transpose(a, axes)


def _normalize_axis(axis, nd):
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    return axis % nd


if hasattr(np, "matrix_transpose"):
    @composite(np.matrix_transpose)
    def _matrix_transpose(x, /):
        if len(shape_of(x)) < 2:
            raise ValueError("Input array must be at least 2-dimensional, but it is "
                             f"{len(shape_of(x))}")
        return np.swapaxes(x, -1, -2)
