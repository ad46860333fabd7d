"""Pattern rules: how each NumPy operation maps its inputs' dependency rows to its output's.

Four families cover most code:

- **elementwise** ops, one rule per derivative-table entry: rows of broadcast operands are
  unioned; the entry's second-derivative strings say which pairs interact (``"0"`` is linear,
  anything else couples), read structurally so that the pattern holds at every point;
- **moves** (indexing, reshape, transpose, concatenate, stack, pad, tril, ...): the same function
  applied to arrays of *row numbers* says where every output element comes from (row 0 is
  "depends on nothing", so zero fill comes out right);
- **reductions and scans** (sum, prod, max, cumsum, sort, softmax, ...): a 0/1 matrix ``S`` that
  maps input elements to output elements, so the output's rows are ``S @ G``;
- **matrix products** with constant or pattern operands, and einsum/tensordot, which couple the
  operands' elements met at every index assignment.

``np.max``/``np.min`` and ``np.sort`` are piecewise linear: like ``np.maximum`` in the derivative
table (whose second derivative is ``"0"``) they add no Hessian pairs, which is exactly what
``mp.hessian`` computes for them.
"""
import operator

import numpy as np

from ..core.array_ops import astype as _astype
from ..rules import special as _special
from ..rules.cotangents import scatter_add
from ..rules.derivative_table import on_new_entries
from ..rules.linear_algebra import cho_solve, solve_triangular
from . import rows as R
from .tracer import (
    PATTERN_RULES,
    PatternArray,
    _is_ours,
    call_primal,
    dense_fallback,
    pattern_rule,
    patterns_in,
    primal,
    register_views,
)

_SEQ = (list, tuple)


def _register_if_present(module, name, rule):
    """Register ``rule`` for ``module.name`` if this NumPy has it (np.linalg.matmul is 2.0+)."""
    fn = getattr(module, name, None)
    if fn is not None:
        PATTERN_RULES[fn] = rule


def _rows_as(a, shape):
    """Rows of ``a`` (a PatternArray or a constant) broadcast to ``shape``; None for constants."""
    if type(a) is not PatternArray:
        return None
    return R.broadcast(a._rows, np.shape(a._value), shape)


# --- elementwise ----------------------------------------------------------------------------
def _couples(s):
    return s.strip() != "0"


def _constant_power_is_linear(b):
    """``a ** b`` with constant ``b`` has no second derivative in ``a`` when every b is 0 or 1."""
    b = np.asarray(b)
    return b.dtype.kind in "iuf" and bool(np.all((b == 0) | (b == 1)))


def _elementwise(entry):
    d2 = entry.d2
    is_power = entry.ufunc in (np.power, np.float_power)

    def rule(trace, fn, args, kwargs):
        out = call_primal(fn, args, kwargs)
        shape = np.shape(out)
        ours = [_is_ours(a, trace) for a in args[:entry.nin]]
        rows = [_rows_as(a, shape) if o else None for a, o in zip(args, ours)]
        if entry.nin == 1:
            if _couples(d2[0]):
                trace.add_pairs(args[0]._rows, args[0]._rows)
        else:
            aa, ab, bb = d2
            if ours[0] and _couples(aa) and not (is_power and not ours[1]
                                                 and _constant_power_is_linear(args[1])):
                trace.add_pairs(args[0]._rows, args[0]._rows)
            if ours[0] and ours[1] and _couples(ab):
                trace.add_pairs(rows[0], rows[1])
            if ours[1] and _couples(bb):
                trace.add_pairs(args[1]._rows, args[1]._rows)
        return trace.wrap(out, R.union(rows))
    rule.__name__ = f"pattern({entry.name})"
    return rule


@on_new_entries  # now, and again when the table's scipy.special section loads (lazily)
def _register_elementwise(entries):
    for entry in entries:
        PATTERN_RULES[entry.ufunc] = _elementwise(entry)
PATTERN_RULES[np.divide] = PATTERN_RULES[np.true_divide]


def _union_rule(trace, fn, args, kwargs):
    """Output element i depends on element i of every (broadcast) argument; piecewise linear."""
    out = call_primal(fn, args, kwargs)
    shape = np.shape(out)
    rows = [_rows_as(a, shape) for a in list(args) + list(kwargs.values())]
    return trace.wrap(out, R.union(rows) if any(r is not None for r in rows)
                      else trace.constant_rows(int(np.size(out))))


@pattern_rule(np.where)
def _where(trace, fn, args, kwargs):
    # Both branches' rows, whatever the condition picked: the pattern then holds wherever the
    # condition flips, which matters for prepared caches reused at other points.
    if len(args) + len(kwargs) == 1:
        return np.where(primal(args[0]))
    return _union_rule(trace, fn, args, kwargs)


PATTERN_RULES[np.clip] = _union_rule


# --- moves: the function applied to row numbers -----------------------------------------------
def _is_float_leaf(a):
    if type(a) is float:
        return True
    dt = getattr(a, "dtype", None)
    return dt is not None and dt.kind in "fc" and type(a) is not PatternArray


def _move(trace, fn, args, kwargs):
    """Run ``fn`` on integer arrays of row numbers in place of the pattern operands (and zeros,
    "no dependency", in place of float constants): ``fn`` only moves elements, so its result says
    which row every output element takes."""
    tables = [None]  # row 0, "no dependency": made only if a fill or a constant needs it
    offset = [1]

    def as_index(a):
        if type(a) is PatternArray and a._trace is trace:
            size = int(np.size(a._value))
            idx = np.arange(offset[0], offset[0] + size).reshape(np.shape(a._value))
            tables.append(a._rows)
            offset[0] += size
            return idx
        if _is_float_leaf(a):
            return np.zeros(np.shape(a), dtype=np.intp)
        return a

    def conv(a):
        if type(a) in _SEQ:
            return type(a)(as_index(b) for b in a)
        return as_index(a)
    iargs = [conv(a) for a in args]
    ikw = {k: conv(v) for k, v in kwargs.items()}
    if fn is np.pad:
        ikw.pop("constant_values", None)  # zero padding is "no dependency"
    idx = call_primal(fn, iargs, ikw)
    out = call_primal(fn, args, kwargs)
    table = []

    def rows_of(i):
        i = np.asarray(i).ravel()
        if len(tables) == 2 and (i.size == 0 or i.min() > 0):
            return R.gather(tables[1], i - 1)  # one operand, no fill: skip building the table
        if not table:
            tables[0] = trace.constant_rows(1)
            table.append(R.sparse().vstack(tables, format="csr"))
        return R.gather(table[0], i)

    def wrap(o, i):
        if isinstance(o, _SEQ):
            return type(o)(wrap(a, b) for a, b in zip(o, i))
        return trace.wrap(o, rows_of(i))
    result = wrap(out, idx)
    register_views(trace, result, list(args) + list(kwargs.values()))
    return result


_MOVES = [operator.getitem, np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis,
          np.squeeze, np.expand_dims, np.atleast_1d, np.atleast_2d, np.atleast_3d,
          np.broadcast_to, np.broadcast_arrays, np.flip, np.fliplr, np.flipud, np.roll, np.rot90,
          np.concatenate, np.stack, np.hstack, np.vstack, np.dstack, np.column_stack, np.append,
          np.diag, np.diagonal, np.tril, np.triu, np.repeat, np.tile, np.take,
          np.take_along_axis, np.copy, np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit,
          np.real, np.conjugate, np.ascontiguousarray]
# NumPy 2 names, absent from the NumPy 1.25+ this package also supports
for _fn in _MOVES + [getattr(np, "unstack", None), getattr(np, "permute_dims", None),
                     getattr(np, "matrix_transpose", None),
                     getattr(np, "concat", None)]:
    if _fn is not None:
        PATTERN_RULES[_fn] = _move


@pattern_rule(np.pad)
def _pad(trace, fn, args, kwargs):
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    if mode in ("constant", "edge", "reflect", "symmetric", "wrap", "empty"):
        return _move(trace, fn, args, kwargs)
    return dense_fallback(trace, fn, args, kwargs, nonlinear=False, warn=False)


@pattern_rule(_astype)
def _astype_rule(trace, fn, args, kwargs):
    out = call_primal(fn, args, kwargs)
    return trace.wrap(out, args[0]._rows)


def _constructor(trace, fn, args, kwargs):
    """``np.zeros_like(x)`` and friends: a fresh buffer that depends on nothing (``full_like``:
    on its fill value)."""
    out = call_primal(fn, args, kwargs)
    fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
    if fn is np.full_like and _is_ours(fill, trace):
        return trace.wrap(out, _rows_as(fill, np.shape(out)))
    return trace.wrap(out, trace.constant_rows(int(np.size(out))))


for _fn in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
    PATTERN_RULES[_fn] = _constructor


# --- reductions and scans -------------------------------------------------------------------
def _arg(args, kwargs, pos, name, default=None):
    if len(args) > pos:
        return args[pos]
    return kwargs.get(name, default)


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % max(ndim, 1) for a in axis))


def _groups(shape, axes):
    """(group of every element, number of groups) for reducing ``axes`` of ``shape``."""
    kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    n_out = int(np.prod(kept, dtype=np.int64))
    g = np.broadcast_to(np.arange(n_out).reshape(kept), shape).ravel()
    return g, n_out


def _reduction(nonlinear, axis_pos=1):
    def rule(trace, fn, args, kwargs):
        x = args[0]
        out = call_primal(fn, args, kwargs)
        others = list(args[1:]) + list(kwargs.values())
        if not _is_ours(x, trace) or any(_is_ours(a, trace) for a in others):
            return dense_fallback(trace, fn, args, kwargs, nonlinear, warn=False)
        shape = np.shape(x._value)
        axis = _arg(args, kwargs, axis_pos, "axis", 0 if type(fn) is tuple else None)
        g, n_out = _groups(shape, _axes(axis, len(shape)))
        rows = (R.group_map(g, n_out) @ x._rows).tocsr()
        if nonlinear:
            trace.add_pairs(rows, rows)
        if int(np.size(out)) != n_out:  # e.g. a where= mask made it something else
            return dense_fallback(trace, fn, args, kwargs, nonlinear, warn=False)
        return trace.wrap(out, rows)
    return rule


_LINEAR_REDUCTIONS = [np.sum, np.mean, np.nansum, np.nanmean, (np.add, "reduce"),
                      np.max, np.min, np.amax, np.amin, np.nanmax, np.nanmin,
                      (np.maximum, "reduce"), (np.minimum, "reduce"),
                      (np.fmax, "reduce"), (np.fmin, "reduce")]
_NONLINEAR_REDUCTIONS = [np.prod, np.nanprod, (np.multiply, "reduce"), np.var, np.std,
                         np.nanvar, np.nanstd, _special.logsumexp]
for _fn in _LINEAR_REDUCTIONS:
    PATTERN_RULES[_fn] = _reduction(False)
for _fn in _NONLINEAR_REDUCTIONS:
    PATTERN_RULES[_fn] = _reduction(True)


@pattern_rule(np.linalg.norm)
def _norm(trace, fn, args, kwargs):
    return _reduction(True, axis_pos=2)(trace, fn, args, kwargs)


def _along_axis(nonlinear, default_axis):
    """softmax-like: every output element depends on all elements of its line along ``axis``."""
    def rule(trace, fn, args, kwargs):
        x = args[0]
        out = call_primal(fn, args, kwargs)
        shape = np.shape(x._value)
        axis = _arg(args, kwargs, 1, "axis", default_axis)
        if fn is np.sort and axis is None:
            shape = (int(np.size(x._value)),)
        g, n_out = _groups(shape, _axes(axis, len(shape)))
        lines = (R.group_map(g, n_out) @ x._rows).tocsr()
        if nonlinear:
            trace.add_pairs(lines, lines)
        return trace.wrap(out, lines[g])
    return rule


PATTERN_RULES[np.sort] = _along_axis(False, -1)
PATTERN_RULES[_special.softmax] = _along_axis(True, None)
PATTERN_RULES[_special.log_softmax] = _along_axis(True, None)


def _scan(nonlinear):
    """cumsum/cumprod: element i of a line depends on elements 0..i of it."""
    def rule(trace, fn, args, kwargs):
        x = args[0]
        out = call_primal(fn, args, kwargs)
        axis = _arg(args, kwargs, 1, "axis", 0 if type(fn) is tuple else None)
        shape = np.shape(x._value)
        if axis is None:
            shape, axis = (int(np.size(x._value)),), 0
        idx = np.moveaxis(np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape),
                          int(axis), -1)
        L = idx.shape[-1] if idx.ndim else 1
        lines = idx.reshape(-1, L)
        ti, tj = np.tril_indices(L)
        S = R.sparse().csr_matrix((np.ones(lines.shape[0] * ti.size, dtype=bool),
                                   (lines[:, ti].ravel(), lines[:, tj].ravel())),
                                  shape=(idx.size, idx.size))
        rows = (S @ x._rows).tocsr()
        if nonlinear:
            trace.add_pairs(rows, rows)
        return trace.wrap(out, rows)
    return rule


for _fn in (np.cumsum, np.nancumsum, (np.add, "accumulate")):
    PATTERN_RULES[_fn] = _scan(False)
for _fn in (np.cumprod, np.nancumprod, (np.multiply, "accumulate")):
    PATTERN_RULES[_fn] = _scan(True)


@pattern_rule(np.trace)
def _trace_rule(trace, fn, args, kwargs):
    x, offset = args[0], _arg(args, kwargs, 1, "offset", 0)
    a1, a2 = _arg(args, kwargs, 2, "axis1", 0), _arg(args, kwargs, 3, "axis2", 1)
    return np.sum(np.diagonal(x, offset, a1, a2), axis=-1)


@pattern_rule(scatter_add)
def _scatter_add(trace, fn, args, kwargs):
    shape, index, values = args
    out = call_primal(fn, args, kwargs)
    size = int(np.prod(shape, dtype=np.int64))
    pos = np.arange(size).reshape(shape)[index]
    if not _is_ours(values, trace):
        return trace.wrap(out, trace.constant_rows(size))
    vshape = np.shape(values._value)
    src = np.broadcast_to(np.arange(int(np.size(values._value))).reshape(vshape), pos.shape)
    S = R.sparse().csr_matrix((np.ones(pos.size, dtype=bool), (pos.ravel(), src.ravel())),
                              shape=(size, int(np.size(values._value))))
    return trace.wrap(out, (S @ values._rows).tocsr())


# --- matrix products --------------------------------------------------------------------------
def _nonzero_map(c):
    """A constant's structural nonzeros as a sparse 0/1 matrix."""
    return R.sparse().csr_matrix(np.asarray(c) != 0)


def _matmul2(trace, A, B, out):
    """``A @ B`` for 2-D operands (PatternArray or constant): rows and Hessian pairs."""
    sp = R.sparse()
    (m, n), k = np.shape(primal(A)), np.shape(primal(B))[1]
    pa, pb = _is_ours(A, trace), _is_ours(B, trace)
    parts = []
    if pa:  # out[i, j] depends on A[i, l] wherever B[l, j] may be nonzero
        Bmask = sp.csr_matrix(np.ones((n, k), dtype=bool)) if pb else _nonzero_map(B)
        parts.append((sp.kron(sp.identity(m, dtype=bool, format="csr"), Bmask.T.tocsr(),
                              format="csr") @ A._rows).tocsr())
    if pb:  # out[i, j] depends on B[l, j] wherever A[i, l] may be nonzero
        Amask = sp.csr_matrix(np.ones((m, n), dtype=bool)) if pa else _nonzero_map(A)
        parts.append((sp.kron(Amask, sp.identity(k, dtype=bool, format="csr"),
                              format="csr") @ B._rows).tocsr())
    if pa and pb:  # the bilinear term couples A[i, l] with B[l, j]
        i, l, j = (a.ravel() for a in np.indices((m, n, k)))
        trace.add_pairs(A._rows[i * n + l], B._rows[l * k + j])
    return trace.wrap(out, R.union(parts))


def _as2d(x, left):
    """A 1-D operand as a row (left) or column (right) matrix, as matmul treats it."""
    if np.ndim(primal(x)) != 1:
        return x
    return np.reshape(x, (1, -1)) if left else np.reshape(x, (-1, 1))


@pattern_rule(np.matmul)
def _matmul(trace, fn, args, kwargs):
    A, B = args[:2]
    out = call_primal(fn, args, kwargs)
    if kwargs:
        return dense_fallback(trace, fn, args, kwargs)
    if np.ndim(primal(A)) > 2 or np.ndim(primal(B)) > 2:
        return np.reshape(_batched_matmul(trace, _as2d(A, True), _as2d(B, False)), np.shape(out))
    r = _matmul2(trace, _as2d(A, True), _as2d(B, False),
                 np.reshape(out, (np.shape(primal(_as2d(A, True)))[0], -1)))
    return np.reshape(r, np.shape(out)) if type(r) is PatternArray else r


def _batched_matmul(trace, A, B):
    """``A @ B`` with batch axes: both broadcast to the common batch shape, then an einsum."""
    sa, sb = np.shape(primal(A)), np.shape(primal(B))
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    A, B = np.broadcast_to(A, batch + sa[-2:]), np.broadcast_to(B, batch + sb[-2:])
    lead = "abcdefghijklmnopqrstuvw"[:len(batch)]
    return _einsum(trace, np.einsum, (f"{lead}xy,{lead}yz->{lead}xz", A, B), {})


_register_if_present(np.linalg, "matmul", _matmul)


@pattern_rule(np.dot)
def _dot(trace, fn, args, kwargs):
    A, B = args[:2]
    if np.ndim(primal(A)) == 0 or np.ndim(primal(B)) == 0:
        return np.multiply(A, B)
    if np.ndim(primal(A)) > 2 or np.ndim(primal(B)) > 2:  # not matmul's batching
        return dense_fallback(trace, fn, args, kwargs)
    return _matmul(trace, np.matmul, args, kwargs)


@pattern_rule(np.vdot)
def _vdot(trace, fn, args, kwargs):
    return _matmul(trace, np.matmul, (np.ravel(args[0]), np.ravel(args[1])), {})


@pattern_rule(np.inner)
def _inner(trace, fn, args, kwargs):
    if np.ndim(primal(args[0])) <= 1 and np.ndim(primal(args[1])) <= 1:
        return _dot(trace, np.dot, args, kwargs)
    return dense_fallback(trace, fn, args, kwargs)


@pattern_rule(np.outer)
def _outer(trace, fn, args, kwargs):
    return np.multiply(np.reshape(args[0], (-1, 1)), np.reshape(args[1], (1, -1)))


_register_if_present(np.linalg, "outer", _outer)


@pattern_rule(np.kron)
def _kron(trace, fn, args, kwargs):
    a, b = args
    if np.ndim(primal(a)) != 2 or np.ndim(primal(b)) != 2:
        return dense_fallback(trace, fn, args, kwargs)
    (m, n), (p, q) = np.shape(primal(a)), np.shape(primal(b))
    prod = np.multiply(np.reshape(a, (m, 1, n, 1)), np.reshape(b, (1, p, 1, q)))
    return np.reshape(prod, (m * p, n * q))


# --- einsum and tensordot: every index assignment couples its operands' elements ------------
_EINSUM_MAX_POINTS = 1 << 24


def _einsum_spec(spec, n_ops):
    """(input subscripts, output subscripts) of an explicit or implicit einsum without '...'."""
    spec = spec.replace(" ", "")
    if "..." in spec:
        return None
    ins, _, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != n_ops:
        return None
    if "->" not in spec:
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ins, out


def _einsum(trace, fn, args, kwargs):
    ops = args[1:]
    parsed = _einsum_spec(args[0], len(ops)) if isinstance(args[0], str) else None
    out = call_primal(fn, args, kwargs)
    if parsed is None:
        return dense_fallback(trace, fn, args, kwargs)
    ins, outs = parsed
    dims = {}
    for sub, op in zip(ins, ops):
        for c, d in zip(sub, np.shape(primal(op))):
            dims[c] = d
    letters = sorted(dims)
    if np.prod([dims[c] for c in letters], dtype=np.int64) > _EINSUM_MAX_POINTS:
        return dense_fallback(trace, fn, args, kwargs)
    grid = dict(zip(letters, np.indices([dims[c] for c in letters], sparse=True)))
    space = tuple(dims[c] for c in letters)

    def position(sub, shape):  # flat index, at every point of the iteration space
        pos, stride = np.zeros((1,) * len(letters), dtype=np.intp), 1
        for c, d in zip(reversed(sub), reversed(shape)):
            pos = pos + grid[c] * stride
            stride *= d
        return np.broadcast_to(pos, space).ravel()
    pos = [position(sub, np.shape(primal(op))) for sub, op in zip(ins, ops)]
    opos = position(outs, tuple(dims[c] for c in outs))
    nonzero = [np.ones(len(opos), dtype=bool) if _is_ours(op, trace)
               else (np.asarray(op) != 0).ravel()[p] for op, p in zip(ops, pos)]
    ours = [k for k, op in enumerate(ops) if _is_ours(op, trace)]

    def others(*skip):
        m = np.ones(len(opos), dtype=bool)
        for k, nz in enumerate(nonzero):
            if k not in skip:
                m &= nz
        return m
    parts = []
    for k in ours:
        m = others(k)
        S = R.sparse().csr_matrix((np.ones(int(m.sum()), dtype=bool), (opos[m], pos[k][m])),
                                  shape=(int(np.size(out)), int(np.size(primal(ops[k])))))
        parts.append((S @ ops[k]._rows).tocsr())
    for a in range(len(ours)):
        for b in range(a + 1, len(ours)):
            k, l = ours[a], ours[b]
            m = others(k, l)
            trace.add_pairs(ops[k]._rows[pos[k][m]], ops[l]._rows[pos[l][m]])
    return trace.wrap(out, R.union(parts))


PATTERN_RULES[np.einsum] = _einsum


@pattern_rule(np.tensordot)
def _tensordot(trace, fn, args, kwargs):
    a, b = args[:2]
    axes = _arg(args, kwargs, 2, "axes", 2)
    na, nb = np.ndim(primal(a)), np.ndim(primal(b))
    if isinstance(axes, (int, np.integer)):
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if isinstance(axes[0], int) else list(axes[0]),
                      [axes[1]] if isinstance(axes[1], int) else list(axes[1]))
    ax_a, ax_b = [i % na for i in ax_a], [i % nb for i in ax_b]
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    sa = [next(letters) for _ in range(na)]
    sb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in ax_a] + \
        [c for j, c in enumerate(sb) if j not in ax_b]
    return _einsum(trace, np.einsum,
                   ("".join(sa) + "," + "".join(sb) + "->" + "".join(out), a, b), {})


_register_if_present(np.linalg, "tensordot", _tensordot)


# --- dense by nature: no warning, since dense dependence is the right answer ------------------
def _dense_rule(linear_in=None):
    """Every output depends on every input (inverse, solve, det, ...); linear when only the
    argument at position ``linear_in`` (solve's right-hand side) carries a pattern."""
    def rule(trace, fn, args, kwargs):
        ours = [i for i, a in enumerate(args) if patterns_in([a], trace)]
        linear = linear_in is not None and ours == [linear_in]
        return dense_fallback(trace, fn, args, kwargs, nonlinear=not linear, warn=False)
    return rule


for _fn in (np.linalg.inv, np.linalg.pinv, np.linalg.det, np.linalg.slogdet, np.linalg.cholesky,
            np.linalg.eigh, np.linalg.eigvalsh, np.linalg.svd):
    PATTERN_RULES[_fn] = _dense_rule()
for _fn in (np.linalg.solve, solve_triangular, cho_solve):
    PATTERN_RULES[_fn] = _dense_rule(linear_in=1)
