"""Reverse and forward rules for linear algebra: matmul, dot, vdot, inner, outer, tensordot,
einsum, trace, kron; numpy.linalg inv, solve, det, slogdet, cholesky, eigh, eigvalsh, svd; and the
scipy.linalg triangular solves ``solve_triangular`` / ``cho_solve`` as primitives (exported to
``mooncake_py.linalg``).

Matrix functions act on the last two axes and broadcast over leading (batch) axes, as NumPy does.
A right-hand side ``b`` is a vector when it is 1-D and a stack of matrices otherwise (NumPy 2 and
SciPy's batched semantics). ``cholesky``, ``eigh`` and ``eigvalsh`` read one triangle of their
input (the lower one, or the upper for ``upper=True`` / ``UPLO='U'``); their derivatives are with
respect to the entries read, as finite differences see them (docs/conventions.md): a tangent
Ȧ acts as the Hermitian matrix its triangle stands for, sym(Ȧ ∘ M), and a cotangent is
M ∘ Ā_sym, with M the read triangle's mask (2 off the diagonal, 1 on it, 0 elsewhere) and
Ā_sym the symmetric cotangent. The two are adjoint, and on symmetric directions they are the
symmetric-input derivative.

Every forward rule is lane-aware (``@frule(fn, lanes=True)``): tangents arrive with a leading
lane axis of k directions. Products contract the lane axis nowhere; the solves fold the k lanes
into the columns of one right-hand side, so k directions cost one factorisation.
"""
import string

import numpy as np

from ..core import array_module as am
from ..core.blas_threads import small as small_blas
from ..errors import MissingRuleError
from . import cholesky_blas
from .broadcasting import shape_of, unbroadcast
from .complex import declare_complex
from .lanes import align, lane_matmul, nlanes
from .registry import composite, frule, primitive, rrule

__all__ = ["solve_triangular", "cho_solve"]


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _pad(needs, *gs):
    """The cotangents ``gs`` as one entry per positional argument of the call (None for the
    rest): there may be more (``axes`` passed positionally) or fewer (``b`` passed by keyword)."""
    n = len(needs)
    return gs[:n] + (None,) * (n - len(gs))


def _need2(needs):
    """``needs`` for the first two arguments; one given by keyword is not tracked."""
    return tuple(needs[:2]) + (False,) * (2 - len(needs))


def _dtype(x):
    dt = getattr(x, "dtype", None)  # (a dtype is falsy: it has no fields)
    return np.result_type(x) if dt is None else dt


def _cols(x, vec):
    """A right-hand side as a stack of column matrices (a vector becomes one column)."""
    return np.expand_dims(x, -1) if vec else x


def _uncols(x, vec):
    return np.reshape(x, shape_of(x)[:-1]) if vec else x


_NUMPY2 = int(np.__version__.split(".")[0]) >= 2


def _is_vector_rhs(a, b):
    """Whether a solve treats ``b`` as (a stack of) vectors: NumPy 2 and SciPy when it is 1-D;
    NumPy 1's ``np.linalg.solve`` also when it has one axis fewer than ``a``."""
    nb = len(shape_of(b))
    return nb == 1 or (not _NUMPY2 and nb == len(shape_of(a)) - 1)


def _as_matrix_scalar(x):
    """A (batch of) scalar(s) shaped to broadcast against a (batch of) matrices."""
    return np.reshape(x, shape_of(x) + (1, 1))


def _sym(x):
    return (x + _mT(x)) / 2


def _cplx(x):
    return getattr(getattr(x, "dtype", None), "kind", None) == "c"


def _mH(x):
    """The conjugate transpose (complex matrices; C is R², see docs/complex.md)."""
    return np.conjugate(_mT(x))


def _herm(x):
    return (x + _mH(x)) / 2


def _adjoints(x):
    """(transpose, symmetric part) for ``x``'s dtype: the Hermitian pair for complex values,
    where the real rules' transposes become conjugate transposes. One dtype test per call."""
    return (_mH, _herm) if _cplx(x) else (_mT, _sym)


def _tan(tangents, i):
    """The tangent of positional argument ``i`` (None also when it was not passed)."""
    return tangents[i] if i < len(tangents) else None


def _addt(s, t):
    """Sum of two tangents, either of which may be None (zero)."""
    return t if s is None else s if t is None else s + t


def _module_impl(fn):
    """``fn`` calling the implementation of its first operand's array module: CuPy lacks the
    NumPy 2 spellings np.linalg.outer/tensordot/trace, and there a MissingRuleError names the
    op (rather than NumPy's "no implementation found"). On NumPy arrays it is ``fn`` itself."""
    def call(x, *args, **kwargs):
        return am.device_function(fn, x)(x, *args, **kwargs)
    call.__name__ = fn.__name__
    return call


def _lane_solve(solve, r):
    """``solve(r)`` for a lane-first stack of column matrices ``r`` (k, ..., n, m): the lanes are
    folded into the columns, so one call (one factorisation) serves every lane."""
    s = shape_of(r)
    k, m = s[0], s[-1]
    x = solve(np.reshape(np.moveaxis(r, 0, -2), tuple(s[1:-1]) + (k * m,)))
    xs = shape_of(x)
    return np.moveaxis(np.reshape(x, tuple(xs[:-1]) + (k, m)), -2, 0)


# --- products -------------------------------------------------------------------------------
@rrule(np.matmul, needs=True)
def _matmul(needs, a, b, **kw):
    y = np.matmul(a, b, **kw)
    sa, sb = shape_of(a), shape_of(b)
    need = _need2(needs)

    if len(sa) == 2 and len(sb) == 2:
        return y, _matrix_product_pullback(needs, need, a, b)

    def pullback(g):
        # Promote 1-D operands to matrices as matmul does, then undo it on the cotangents.
        a2 = np.expand_dims(a, 0) if len(sa) == 1 else a
        b2 = np.expand_dims(b, -1) if len(sb) == 1 else b
        g2 = np.expand_dims(g, -1) if len(sb) == 1 else g
        g2 = np.expand_dims(g2, -2) if len(sa) == 1 else g2
        ga = gb = None
        if need[0]:
            ga = _reshaped(unbroadcast(np.matmul(g2, _mT(b2)), shape_of(a2)), sa)
        if need[1]:
            gb = _reshaped(unbroadcast(np.matmul(_mT(a2), g2), shape_of(b2)), sb)
        return _pad(needs, ga, gb)
    return y, pullback


def _reshaped(x, shape):
    """``np.reshape(x, shape)``, or ``x`` itself where it has that shape already: a reshaped
    view of a fresh product is one that value_and_grad copies again before returning it."""
    return x if shape_of(x) == shape else np.reshape(x, shape)


def _matrix_product_pullback(needs, need, a, b):
    """The pullback of ``a @ b`` for two matrices: no promotion, no broadcast to undo."""
    def pullback(g):
        return _pad(needs, np.matmul(g, _mT(b)) if need[0] else None,
                    np.matmul(_mT(a), g) if need[1] else None)
    return pullback


@frule(np.matmul, lanes=True)
def _matmul_f(primals, tangents, **kw):
    (a, b), (da, db) = primals, tangents
    ta = None if da is None else lane_matmul(da, b, True)
    if ta is not None and db is not None and not kw and _gemm_accumulate(ta, a, db):
        return np.matmul(a, b), ta
    tb = None if db is None else lane_matmul(a, db, False)
    return np.matmul(a, b, **kw), _add_products(ta, tb)


def _gemm_operand(x):
    """``(matrix, trans)`` with ``op(matrix) = x`` and a Fortran-ordered matrix, as SciPy's gemm
    takes it without a copy; None for a matrix that is neither C- nor Fortran-ordered."""
    if x.flags.f_contiguous:
        return x, 0
    if x.flags.c_contiguous:
        return x.T, 1
    return None


def _gemm_accumulate(ta, a, db):
    """``ta[0] += a @ db[0]`` in place by one gemm with beta = 1, for a fresh one-lane product
    ``ta`` and plain float matrices: the tangent's second product lands in the first one's
    buffer, with neither a second output nor the pass that adds it. False (nothing done) for
    any other operands."""
    if type(ta) is not np.ndarray or type(db) is not np.ndarray or ta.ndim != 3 \
            or db.ndim != 3 or ta.shape[0] != 1 or db.shape[0] != 1:
        return False
    return gemm_into(ta[0], a, db[0])


def gemm_into(c, a, b):
    """``c += a @ b`` in place by one gemm with beta = 1, for a C-ordered writeable float
    matrix ``c`` and plain float matrices of its dtype; False (nothing done) for any other
    operands."""
    if type(c) is not np.ndarray or type(a) is not np.ndarray or type(b) is not np.ndarray \
            or c.ndim != 2 or a.ndim != 2 or b.ndim != 2 or not c.flags.c_contiguous \
            or not c.flags.writeable:
        return False
    dt = c.dtype
    if dt.char not in "fd" or a.dtype != dt or b.dtype != dt or not c.size \
            or c.shape != (a.shape[0], b.shape[1]) or a.shape[1] != b.shape[0]:
        return False
    # (c + a b)ᵀ = bᵀ aᵀ + cᵀ, and cᵀ is the Fortran reading of the C-ordered c
    x, y = _gemm_operand(b.T), _gemm_operand(a.T)
    fn = _blas_routine("gemm", dt)
    if x is None or y is None or fn is None:
        return False
    ct = c.T
    with small_blas(a, b, lib="scipy"):
        r = fn(1.0, x[0], y[0], beta=1.0, c=ct, overwrite_c=1, trans_a=x[1], trans_b=y[1])
    if r is not ct and not np.shares_memory(r, ct):
        ct[...] = r  # (SciPy copied c after all: keep the result)
    return True


def matrix_product_tangent(a, b, da, db):
    """``(a @ b, ȧ b + a ḃ)`` for plain matrices ``a``, ``b`` and tangents of their shapes
    (either may be None: no tangent), computed exactly as the lane-aware rule computes a
    one-lane tangent, without the lane axis: the dual matmul of a plan of matrix products
    (forward and pullback alike) runs here, its per-call cost the three products."""
    ta = None if da is None else np.matmul(da, b)
    if ta is not None and db is not None and gemm_into(ta, a, db):
        return np.matmul(a, b), ta
    tb = None if db is None else np.matmul(a, db)
    return np.matmul(a, b), _add_products(ta, tb)


def _add_products(ta, tb):
    """``ta + tb`` for two fresh products (either may be None), into ``ta``'s buffer where it
    is a NumPy array of the sum's shape and dtype: one output-sized temporary fewer per dual
    matmul (stacking the two products into one GEMM, ``[ȧ | a] @ [b ; ḃ]`` or ``[a ; ȧ] @ b``,
    measured no faster at the suite's sizes and cost copies of the operands)."""
    if ta is None or tb is None or type(ta) is not np.ndarray or type(tb) is not np.ndarray \
            or ta.shape != tb.shape or ta.dtype != tb.dtype or not ta.flags.writeable:
        return _addt(ta, tb)
    ta += tb
    return ta


def _normalize_tensordot_axes(axes, nda, ndb):
    """``axes`` of tensordot as two equally long lists of non-negative axes of a and b."""
    try:
        ia, ib = axes
    except TypeError:
        n = int(axes)
        return list(range(nda - n, nda)), list(range(n))
    ia = [ia] if isinstance(ia, (int, np.integer)) else list(ia)
    ib = [ib] if isinstance(ib, (int, np.integer)) else list(ib)
    return [int(i) % nda for i in ia], [int(i) % ndb for i in ib]


def _transpose_to(x, labels):
    """Permute ``x``, whose axis k is axis ``labels[k]`` of the target, into target order."""
    perm = tuple(int(i) for i in np.argsort(labels))
    return x if perm == tuple(range(len(perm))) else np.transpose(x, perm)


def _tensordot_pullback(needs, g, a, b, ia, ib):
    """Cotangents of ``tensordot(a, b, axes=(ia, ib))`` (normalized axes)."""
    needs = _need2(needs)
    nda, ndb = len(shape_of(a)), len(shape_of(b))
    fa = [i for i in range(nda) if i not in ia]
    fb = [i for i in range(ndb) if i not in ib]
    ga = gb = None
    if needs[0]:
        # Contract g's b-part with b's free axes; what is left of b are its contracted axes
        # in increasing order, each standing for the a-axis it was paired with.
        t = np.tensordot(g, b, axes=(list(range(len(fa), len(fa) + len(fb))), fb))
        ga = _transpose_to(t, fa + [ia[ib.index(j)] for j in sorted(ib)])
    if needs[1]:
        t = np.tensordot(a, g, axes=(fa, list(range(len(fa)))))
        gb = _transpose_to(t, [ib[ia.index(i)] for i in sorted(ia)] + fb)
    return ga, gb


def _scalar_product_pullback(needs, g, a, b):
    needs = _need2(needs)
    return (unbroadcast(g * b, shape_of(a)) if needs[0] else None,
            unbroadcast(g * a, shape_of(b)) if needs[1] else None)


def _tensordot_tangent(a, b, da, db, ia, ib):
    """Lane-first tangent of ``tensordot(a, b, axes=(ia, ib))`` (normalized axes): the lane
    axis is a free axis of ``da`` (first already) or of ``db`` (moved first)."""
    ta = tb = None
    if da is not None:
        ta = np.tensordot(da, b, axes=([i + 1 for i in ia], ib))
    if db is not None:
        tb = np.tensordot(a, db, axes=(ia, [j + 1 for j in ib]))
        nfa = len(shape_of(a)) - len(ia)
        tb = np.moveaxis(tb, nfa, 0) if nfa else tb
    return _addt(ta, tb)


@rrule(np.tensordot, needs=True)
def _tensordot(needs, a, b, axes=2):
    y = np.tensordot(a, b, axes)
    ia, ib = _normalize_tensordot_axes(axes, len(shape_of(a)), len(shape_of(b)))
    return y, lambda g: _pad(needs, *_tensordot_pullback(needs, g, a, b, ia, ib))


@frule(np.tensordot, lanes=True)
def _tensordot_f(primals, tangents, **kw):
    def go(a, b, axes=2):
        ia, ib = _normalize_tensordot_axes(axes, len(shape_of(a)), len(shape_of(b)))
        return np.tensordot(a, b, axes), _tensordot_tangent(a, b, _tan(tangents, 0),
                                                            _tan(tangents, 1), ia, ib)
    return go(*primals, **kw)


def _linalg_tensordot(needs, x1, x2, axes=2):
    y = _module_impl(np.linalg.tensordot)(x1, x2, axes=axes)
    ia, ib = _normalize_tensordot_axes(axes, len(shape_of(x1)), len(shape_of(x2)))
    return y, lambda g: _pad(needs, *_tensordot_pullback(needs, g, x1, x2, ia, ib))


def _linalg_tensordot_f(primals, tangents, axes=2):
    x1, x2 = primals
    ia, ib = _normalize_tensordot_axes(axes, len(shape_of(x1)), len(shape_of(x2)))
    return (_module_impl(np.linalg.tensordot)(x1, x2, axes=axes),
            _tensordot_tangent(x1, x2, tangents[0], tangents[1], ia, ib))


def _contracting_rule(fn, b_axis):
    """Rule for dot/inner: a scalar times anything, else a tensordot over the last axis of a
    and axis ``b_axis(ndim of b)`` of b."""
    def rule(needs, a, b, *rest):
        y = fn(a, b, *rest)
        nda, ndb = len(shape_of(a)), len(shape_of(b))
        if nda == 0 or ndb == 0:
            return y, lambda g: _pad(needs, *_scalar_product_pullback(needs, g, a, b))
        ia, ib = [nda - 1], [b_axis(ndb)]
        return y, lambda g: _pad(needs, *_tensordot_pullback(needs, g, a, b, ia, ib))
    return rule


rrule(np.dot, needs=True)(_contracting_rule(np.dot, lambda nd: max(nd - 2, 0)))
rrule(np.inner, needs=True)(_contracting_rule(np.inner, lambda nd: nd - 1))


def _contracting_frule(fn, b_axis):
    """Forward rule for dot/inner (see :func:`_contracting_rule`): bilinear, so ẏ = f(ȧ, b) +
    f(a, ḃ), each term a lane-first tensordot (or product, for a scalar operand)."""
    def rule(primals, tangents, **kw):
        da, db = _tan(tangents, 0), _tan(tangents, 1)

        def go(a, b, *rest):
            y = fn(a, b, *rest)
            nda, ndb = len(shape_of(a)), len(shape_of(b))
            if nda == 0 or ndb == 0:
                nd = len(shape_of(y))
                return y, _addt(None if da is None else align(da, nd) * b,
                                None if db is None else a * align(db, nd))
            return y, _tensordot_tangent(a, b, da, db, [nda - 1], [b_axis(ndb)])
        return go(*primals, **kw)
    return rule


frule(np.dot, lanes=True)(_contracting_frule(np.dot, lambda nd: max(nd - 2, 0)))
frule(np.inner, lanes=True)(_contracting_frule(np.inner, lambda nd: nd - 1))


@rrule(np.vdot, needs=True)
def _vdot(needs, a, b):
    y = np.vdot(a, b)
    need = _need2(needs)

    def pullback(g):  # vdot flattens both operands (in C order)
        # y = Σ conj(a)·b, so for the inner product Re Σ conj(u)·v: ā = conj(ȳ)·b, b̄ = ȳ·a
        return _pad(needs, np.reshape(_conj(g) * b, shape_of(a)) if need[0] else None,
                    np.reshape(g * a, shape_of(b)) if need[1] else None)
    return y, pullback


def _conj(x):
    """``conj(x)``, skipped for real ``x``."""
    return np.conjugate(x) if _dtype(x).kind == "c" else x


@frule(np.vdot, lanes=True)
def _vdot_f(primals, tangents):
    (a, b), (da, db) = primals, tangents
    flat = (lambda t: np.reshape(t, (nlanes(t), -1)))  # each lane flattened, as vdot does
    return np.vdot(a, b), _addt(
        None if da is None else np.matmul(_conj(flat(da)), np.reshape(b, (-1,))),
        None if db is None else np.matmul(flat(db), np.reshape(_conj(a), (-1,))))


def _outer_rule(fn):
    def rule(needs, a, b, *rest):
        y = fn(a, b, *rest)
        need = _need2(needs)

        def pullback(g):  # outer flattens both operands
            ga = gb = None
            if need[0]:
                ga = np.reshape(np.matmul(g, np.reshape(b, (-1,))), shape_of(a))
            if need[1]:
                gb = np.reshape(np.matmul(np.reshape(a, (-1,)), g), shape_of(b))
            return _pad(needs, ga, gb)
        return y, pullback
    return rule


rrule(np.outer, needs=True)(_outer_rule(np.outer))


def _outer_frule(fn):
    def rule(primals, tangents, **kw):
        da, db = _tan(tangents, 0), _tan(tangents, 1)

        def go(a, b, *rest):
            ta = tb = None
            if da is not None:  # ȧ_i b_j for each lane
                ta = np.reshape(da, (nlanes(da), -1, 1)) * np.reshape(b, (1, -1))
            if db is not None:
                tb = np.reshape(a, (-1, 1)) * np.reshape(db, (nlanes(db), 1, -1))
            return fn(a, b, *rest), _addt(ta, tb)
        return go(*primals, **kw)
    return rule


frule(np.outer, lanes=True)(_outer_frule(np.outer))


# The array-API spellings in np.linalg (NumPy 2) are separate functions with the same rules.
if hasattr(np.linalg, "matmul"):
    rrule(np.linalg.matmul, needs=True)(lambda needs, x1, x2: _matmul(needs, x1, x2))
    rrule(np.linalg.outer, needs=True)(_outer_rule(_module_impl(np.linalg.outer)))
    rrule(np.linalg.tensordot, needs=True)(_linalg_tensordot)
    frule(np.linalg.matmul, lanes=True)(_matmul_f)
    frule(np.linalg.outer, lanes=True)(_outer_frule(_module_impl(np.linalg.outer)))
    frule(np.linalg.tensordot, lanes=True)(_linalg_tensordot_f)


@rrule(np.kron, needs=True)
def _kron(needs, a, b):
    y = np.kron(a, b)
    sa, sb = shape_of(a), shape_of(b)
    nd = max(len(sa), len(sb))
    sa1 = (1,) * (nd - len(sa)) + tuple(sa)
    sb1 = (1,) * (nd - len(sb)) + tuple(sb)
    need = _need2(needs)

    def pullback(g):
        # kron(a, b)[i*nb + k] = a[i] b[k] on every axis: split each axis of g into (i, k).
        gr = np.reshape(g, tuple(n for pair in zip(sa1, sb1) for n in pair))
        la, lb = string.ascii_lowercase[:nd], string.ascii_uppercase[:nd]
        gsub = "".join(p + q for p, q in zip(la, lb))
        ga = gb = None
        if need[0]:
            ga = np.reshape(np.einsum(f"{gsub},{lb}->{la}", gr, np.reshape(b, sb1)), sa)
        if need[1]:
            gb = np.reshape(np.einsum(f"{gsub},{la}->{lb}", gr, np.reshape(a, sa1)), sb)
        return _pad(needs, ga, gb)
    return y, pullback


def _kron_and_tangent(a, b, da, db):
    """``(kron(a, b), kron(da, b) + kron(a, db))`` per lane for NumPy arrays of rank ≥ 1 (one
    tangent may be None), or None where the layout below would not pay.

    Entry ``(i0, k0, ..., i_last, k_last)`` of kron's result, its axes split in pairs, is the
    product of row ``i...`` of ``[a | 0]`` and column ``k...`` of ``[b ; 0]`` over the last
    pair, and of the tangent ``[da | a] @ [b ; db]``: one broadcast matmul with an inner
    dimension of 2 writes value and tangents into kron's layout, in one buffer, through BLAS.
    The sum of two krons made two outputs of the full size and a third for their sum, and each
    np.kron is an elementwise broadcast whose short inner loops run ~6x slower than the
    product (the zero column keeps every product on that path; a zero may change sign, the
    values are those of np.kron otherwise). It pays when the last axes are not tiny (each
    output matrix is one small product)."""
    sa, sb = a.shape, b.shape
    nd = max(len(sa), len(sb))
    sa1 = (1,) * (nd - len(sa)) + sa
    sb1 = (1,) * (nd - len(sb)) + sb
    if nd > 1 and sa1[-1] * sb1[-1] < 32 or not a.size or not b.size:
        return None
    dt = np.result_type(a, b)
    if dt.kind not in "fc" or np.result_type(dt, *[t for t in (da, db) if t is not None]) != dt:
        return None  # (one buffer holds both: they must share a dtype)
    lanes = nlanes(da if da is not None else db)
    n = 1 + lanes  # the value, then the lanes
    a1, b1 = np.reshape(a, (1,) + sa1), np.reshape(b, (1,) + sb1)
    za, zb = np.zeros((n,) + sa1, a.dtype), np.zeros((n,) + sb1, b.dtype)
    if da is not None and db is not None:
        l0 = np.concatenate([a1, np.reshape(da, (lanes,) + sa1)])
        l1 = np.concatenate([za[:1], np.broadcast_to(a1, (lanes,) + sa1)])
        r0 = np.broadcast_to(b1, (n,) + sb1)
        r1 = np.concatenate([zb[:1], np.reshape(db, (lanes,) + sb1)])
    elif da is not None:
        l0, l1 = np.concatenate([a1, np.reshape(da, (lanes,) + sa1)]), za
        r0, r1 = np.broadcast_to(b1, (n,) + sb1), zb
    else:
        l0, l1 = np.broadcast_to(a1, (n,) + sa1), za
        r0, r1 = np.concatenate([b1, np.reshape(db, (lanes,) + sb1)]), zb
    # batch axes interleaved, (n, i0, 1, i1, 1, ...) against (n, 1, k0, 1, k1, ...): they
    # broadcast to kron's axes split in pairs
    left = np.reshape(np.stack([l0, l1], axis=-1),
                      (n,) + tuple(v for m in sa1[:-1] for v in (m, 1)) + (sa1[-1], 2))
    right = np.reshape(np.stack([r0, r1], axis=-2),
                       (n,) + tuple(v for m in sb1[:-1] for v in (1, m)) + (2, sb1[-1]))
    buf = np.empty((n,) + tuple(v for p, q in zip(sa1, sb1) for v in (p, q)), dtype=dt)
    np.matmul(left, right, out=buf)
    buf = np.reshape(buf, (n,) + tuple(p * q for p, q in zip(sa1, sb1)))
    return buf[0], buf[1:]


def _plain_operand(x):
    return type(x) is np.ndarray and x.ndim > 0


@frule(np.kron, lanes=True)
def _kron_f(primals, tangents, **kw):
    da, db = _tan(tangents, 0), _tan(tangents, 1)
    if not kw and len(primals) == 2 and (da is not None or db is not None):
        a, b = primals
        if _plain_operand(a) and _plain_operand(b) and \
                (da is None or type(da) is np.ndarray) and (db is None or type(db) is np.ndarray):
            r = _kron_and_tangent(a, b, da, db)
            if r is not None:
                return r

    def go(a, b):
        sa, sb = shape_of(a), shape_of(b)
        nd = max(len(sa), len(sb))
        sa1 = (1,) * (nd - len(sa)) + tuple(sa)
        sb1 = (1,) * (nd - len(sb)) + tuple(sb)
        # kron of a lane-first tangent with the other operand given a leading axis of size 1
        # keeps the lane axis as it is (index i*1 + 0 = i) and is kron on every other axis.
        ta = tb = None
        if da is not None:
            ta = np.kron(np.reshape(da, (nlanes(da),) + sa1), np.reshape(b, (1,) + sb1))
        if db is not None:
            tb = np.kron(np.reshape(a, (1,) + sa1), np.reshape(db, (nlanes(db),) + sb1))
        return np.kron(a, b), _addt(ta, tb)
    return go(*primals, **kw)


def _trace_pullback(g, shape, offset, axis1, axis2):
    nd = len(shape)
    ax1, ax2 = axis1 % nd, axis2 % nd
    rest = [i for i in range(nd) if i not in (ax1, ax2)]
    diag = am.eye(shape[ax1], shape[ax2], offset, dtype=_dtype(g), like=g)
    return _transpose_to(np.reshape(g, shape_of(g) + (1, 1)) * diag, rest + [ax1, ax2])


@rrule(np.trace, needs=True)
def _trace(needs, a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    y = np.trace(a, offset, axis1, axis2, dtype)
    shape = shape_of(a)
    return y, lambda g: _pad(needs, _trace_pullback(g, shape, offset, axis1, axis2))


@frule(np.trace, lanes=True)
def _trace_f(primals, tangents, **kw):
    def go(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        nd = len(shape_of(a))
        return (np.trace(a, offset, axis1, axis2, dtype),
                np.trace(tangents[0], offset, axis1 % nd + 1, axis2 % nd + 1, dtype))
    return go(*primals, **kw)


def _linalg_trace(needs, x, offset=0, dtype=None):
    y = _module_impl(np.linalg.trace)(x, offset=offset, dtype=dtype)
    shape = shape_of(x)
    return y, lambda g: _pad(needs, _trace_pullback(g, shape, offset, -2, -1))


if hasattr(np.linalg, "trace"):
    rrule(np.linalg.trace, needs=True)(_linalg_trace)
    frule(np.linalg.trace, lanes=True)(
        lambda primals, tangents, offset=0, dtype=None:
        (_module_impl(np.linalg.trace)(primals[0], offset=offset, dtype=dtype),
         np.linalg.trace(tangents[0], offset=offset, dtype=dtype)))


# --- einsum ---------------------------------------------------------------------------------
_INT_LABELS = string.ascii_uppercase + string.ascii_lowercase  # sorted like the ints they stand for


def _sublist_to_str(sub, names):
    return "".join("..." if s is Ellipsis else names.setdefault(s, _INT_LABELS[len(names)])
                   for s in sub)


def _einsum_spec(args):
    """``(positions of the operands, input subscripts, output subscript)`` for an einsum call,
    explicit and with every ``...`` spelled out as letters."""
    if isinstance(args[0], str):
        pos = list(range(1, len(args)))
        spec = args[0].replace(" ", "")
        ins, arrow, out = spec.partition("->")
        ins = ins.split(",")
        explicit = bool(arrow)
    else:  # interleaved form: op0, sublist0, op1, sublist1, ..., [sublist_out]
        pos = list(range(0, len(args) - 1, 2))
        names = {}
        for s in sorted({s for k in pos for s in args[k + 1]} - {Ellipsis}):
            names[s] = _INT_LABELS[len(names)]
        ins = [_sublist_to_str(args[k + 1], names) for k in pos]
        explicit = len(args) % 2 == 1
        out = _sublist_to_str(args[-1], names) if explicit else ""
    used = set("".join(ins) + out) - {"."}
    free = [c for c in string.ascii_letters if c not in used]
    ells = [len(shape_of(args[k])) - (len(s) - 3) for k, s in zip(pos, ins) if "..." in s]
    ell = "".join(free[:max(ells, default=0)])
    ins = [s.replace("...", ell[len(ell) - (len(shape_of(args[k])) - (len(s) - 3)):])
           for k, s in zip(pos, ins)]
    if explicit:
        out = out.replace("...", ell)
    else:  # broadcast axes first, then the labels used once, in sorted order
        labels = "".join(ins)
        out = ell + "".join(sorted(c for c in set(labels) if labels.count(c) == 1 and c not in ell))
    return pos, ins, out


def _einsum_cotangent(g, out, ins, ops, k, optimize):
    """Cotangent of operand ``k``: an einsum of ``g`` with the other operands onto the labels of
    operand k, broadcast over labels only k has, and put on the diagonal for repeated labels."""
    sub, shape = ins[k], tuple(shape_of(ops[k]))
    size = dict(zip(sub, shape))
    uniq = "".join(dict.fromkeys(sub))
    others = [j for j in range(len(ins)) if j != k]
    elsewhere = set(out).union(*(ins[j] for j in others))
    have = "".join(c for c in uniq if c in elsewhere)
    t = np.einsum(",".join([out] + [ins[j] for j in others]) + "->" + have,
                  g, *[ops[j] for j in others], optimize=optimize)
    ts = shape_of(t)
    # Labels on which operand k had size 1 and was broadcast: sum them back.
    red = tuple(i for i, c in enumerate(have) if size[c] == 1 and ts[i] != 1)
    if red:
        t = np.sum(t, axis=red, keepdims=True)
        ts = shape_of(t)
    full = tuple(size[c] for c in uniq)
    if have != uniq or ts != full:
        # Labels summed away inside operand k alone: every entry got the same cotangent.
        t = np.broadcast_to(np.reshape(t, tuple(ts[have.index(c)] if c in have else 1
                                                for c in uniq)), full)
    if uniq == sub:
        return t
    # Repeated labels (a diagonal was read): multiply by identities to put t back on it.
    fresh = iter(c for c in string.ascii_letters if c not in uniq)
    target, eyes, seen = "", [], set()
    for c in sub:
        if c in seen:
            f = next(fresh)
            target += f
            eyes.append((c + f, am.eye(size[c], dtype=_dtype(t), like=t)))
        else:
            seen.add(c)
            target += c
    return np.einsum(",".join([uniq] + [s for s, _ in eyes]) + "->" + target,
                     t, *[e for _, e in eyes])


@rrule(np.einsum, needs=True)
def _einsum(needs, *args, out=None, optimize=False, **kw):
    y = np.einsum(*args, optimize=optimize, **kw)
    pos, ins, osub = _einsum_spec(args)
    ops = [args[k] for k in pos]
    # An explicit contraction path (from np.einsum_path) fits only the forward contraction.
    opt = optimize if isinstance(optimize, (bool, str)) else True

    def pullback(g):
        gs = [None] * len(args)
        for n, k in enumerate(pos):
            if needs[k]:
                gs[k] = _einsum_cotangent(g, osub, ins, ops, n, opt)
        return tuple(gs)
    return y, pullback


@frule(np.einsum, lanes=True)
def _einsum_f(primals, tangents, out=None, optimize=False, **kw):
    y = np.einsum(*primals, optimize=optimize, **kw)
    pos, ins, osub = _einsum_spec(primals)
    ops = [primals[k] for k in pos]
    opt = optimize if isinstance(optimize, (bool, str)) else True
    # Multilinear: one einsum per operand with a tangent, that operand's lanes on a fresh label.
    lane = next(c for c in string.ascii_letters if c not in set("".join(ins) + osub))
    total = None
    for n, k in enumerate(pos):
        t = tangents[k]
        if t is not None:
            subs = ",".join(lane + s if j == n else s for j, s in enumerate(ins))
            total = _addt(total, np.einsum(subs + "->" + lane + osub,
                                           *[t if j == n else o for j, o in enumerate(ops)],
                                           optimize=opt))
    return y, total


# --- numpy.linalg ---------------------------------------------------------------------------
@rrule(np.linalg.inv)
def _inv(a):
    y = np.linalg.inv(a)
    return y, lambda g: (-np.matmul(_mT(y), np.matmul(g, _mT(y))),)


@frule(np.linalg.inv, lanes=True)
def _inv_f(primals, tangents):
    y = np.linalg.inv(primals[0])
    return y, -np.matmul(y, np.matmul(tangents[0], y))


def _solve_pullback(needs, g, a, b, x, solve_transposed, a_cotangent, vec=None):
    """Shared by the solves: ``b̄ = solve_transposed(ḡ)``, ``ā = a_cotangent(b̄, x)``, both on
    column stacks; undo the vector promotion and broadcasting."""
    needs = _need2(needs)
    vec = len(shape_of(b)) == 1 if vec is None else vec
    bbar = solve_transposed(_cols(g, vec))
    ga = gb = None
    if needs[0]:
        ga = unbroadcast(a_cotangent(bbar, _cols(x, vec)), shape_of(a))
    if needs[1]:
        gb = unbroadcast(_uncols(bbar, vec), shape_of(b))
    return ga, gb


@rrule(np.linalg.solve, needs=True)
def _solve(needs, a, b):
    x = np.linalg.solve(a, b)

    def pullback(g):
        return _pad(needs, *_solve_pullback(needs, g, a, b, x,
                                             lambda gm: np.linalg.solve(_mT(a), gm),
                                             lambda bbar, xm: -np.matmul(bbar, _mT(xm)),
                                             _is_vector_rhs(a, b)))
    return x, pullback


def _solve_tangent(solve, b, x, db, dax, vec):
    """ẋ = solve(ḃ - Ȧx) for lane-first ``db`` and ``dax`` = (a callable giving) Ȧx on column
    stacks; ``solve`` acts on column stacks, ``vec``: whether b is a (stack of) vector(s)."""
    xm = _cols(x, vec)
    nd = len(shape_of(xm))
    rhs = None if db is None else align(_cols(db, vec), nd)
    if dax is not None:
        rhs = _addt(rhs, -dax(xm, nd))
    return _uncols(_lane_solve(solve, rhs), vec)


@frule(np.linalg.solve, lanes=True)
def _solve_f(primals, tangents, **kw):
    da, db = _tan(tangents, 0), _tan(tangents, 1)

    def go(a, b):
        x = np.linalg.solve(a, b)
        dax = None if da is None else (lambda xm, nd: np.matmul(align(da, nd), xm))
        return x, _solve_tangent(lambda r: np.linalg.solve(a, r), b, x, db, dax,
                                 _is_vector_rhs(a, b))
    return go(*primals, **kw)


def _tr_inv_times(a, da):
    """tr(A⁻¹ Ȧ) for each lane (and batch) of a lane-first ``da``."""
    return np.sum(_mT(np.linalg.inv(a)) * da, axis=(-2, -1))


@rrule(np.linalg.det)
def _det(a):
    d = np.linalg.det(a)
    return d, lambda g: (_as_matrix_scalar(g * d) * _mT(np.linalg.inv(a)),)


@frule(np.linalg.det, lanes=True)
def _det_f(primals, tangents):
    (a,), (da,) = primals, tangents
    d = np.linalg.det(a)
    return d, d * _tr_inv_times(a, da)


@rrule(np.linalg.slogdet)
def _slogdet(a):
    res = np.linalg.slogdet(a)

    if _dtype(a).kind == "c":
        return res, _complex_slogdet_pullback(a, res[0])

    def pullback(gs):
        _, glogabs = gs  # the sign is piecewise constant
        return (_as_matrix_scalar(glogabs) * _mT(np.linalg.inv(a)),)
    return res, pullback


def _complex_slogdet_pullback(a, sign):
    """With t = tr(A⁻¹·dA): d logabsdet = Re t and d sign = sign·i·Im t, so the cotangent is
    w·A⁻ᴴ with w = l̄ − i·Im(conj(s̄)·sign)."""
    def pullback(gs):
        gsign, glogabs = gs
        w = glogabs - 1j * np.imag(np.conjugate(gsign) * sign)
        return (_as_matrix_scalar(w) * np.conjugate(_mT(np.linalg.inv(a))),)
    return pullback


@frule(np.linalg.slogdet, lanes=True)
def _slogdet_f(primals, tangents):
    (a,), (da,) = primals, tangents
    res = np.linalg.slogdet(a)
    if _dtype(a).kind == "c":
        t = _tr_inv_times(a, da)
        return res, (res[0] * 1j * np.imag(t), np.real(t))
    return res, (None, _tr_inv_times(a, da))  # the sign is piecewise constant




def _phi_mask(n, dtype, like):
    """Lower-triangle mask with halved diagonal: Φ(M) = M * mask (in ``like``'s module)."""
    if am.is_device(like):
        return am.tri(n, dtype=dtype, like=like) - am.eye(n, dtype=dtype, like=like) / 2
    return cholesky_blas.phi_mask(n, np.dtype(dtype))


_READ_MASKS = {}  # host masks by (n, real dtype, lower), as cholesky_blas.phi_mask's


def _read_mask(x, lower):
    """M, the mask of the triangle a one-triangle routine reads of the (..., n, n) ``x``: 2 below
    (``lower``; else above) the diagonal, 1 on it, 0 elsewhere, of ``x``'s real dtype and module.

    The matrix a triangle T stands for is sym(T ∘ M) (Hermitian part for complex values, whose
    diagonal is real as LAPACK reads it), so a tangent Ȧ enters as sym(Ȧ ∘ M) and, its adjoint,
    a symmetric cotangent G leaves as M ∘ G: twice G in the triangle read, G on the diagonal.
    """
    n = shape_of(x)[-1]
    dt = _dtype(x)
    dt = np.dtype(dt.char.lower()) if dt.kind == "c" else dt  # complex64 -> float32 etc.
    if am.is_device(x):
        m = 2 * am.tri(n, dtype=dt, like=x) - am.eye(n, dtype=dt, like=x)
        return m if lower else m.T
    key = (n, dt, lower)
    m = _READ_MASKS.get(key)
    if m is None:
        m = 2 * np.tri(n, dtype=dt) - np.eye(n, dtype=dt)
        m = m if lower else np.ascontiguousarray(m.T)
        m.flags.writeable = False
        _READ_MASKS[key] = m
    return m


def _read_cotangent(g, lower):
    """M ∘ ``g`` (see :func:`_read_mask`): the cotangent of the entries read, in place for a
    fresh plain array."""
    m = _read_mask(g, lower)
    if type(g) is np.ndarray and g.flags.writeable and g.dtype.kind != "c":
        return np.multiply(g, m, out=g)
    return g * m


def _cholesky_upper(a):
    """``np.linalg.cholesky(a, upper=True)``, reading ``a``'s upper triangle; CuPy's cholesky has
    no ``upper``: there the upper factor is the adjoint of the lower factor of ``a``'s adjoint
    (whose lower triangle is ``a``'s upper one, so the same entries are read)."""
    if am.is_device(a):
        tr = _adjoints(a)[0]
        return tr(np.linalg.cholesky(tr(a)))
    return np.linalg.cholesky(a, upper=True)


@rrule(np.linalg.cholesky)
def _cholesky(a, upper=False):
    y = None if upper else cholesky_blas.factor(a)
    if y is None:
        y = _cholesky_upper(a) if upper else np.linalg.cholesky(a)
    # complex (Hermitian A = L Lᴴ, real diagonal of L): every ᵀ below becomes ᴴ
    tr, sym = _adjoints(y)
    trans = 2 if tr is _mH else 1
    L = tr(y) if upper else y

    def pullback(g):
        # A = L Lᵀ: Ā = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹), Φ = lower triangle with halved diagonal.
        gL = tr(g) if upper else g
        if trans == 1:  # real: one primitive, whose frule knows L̇ is triangular (HVPs)
            # it returns the lower triangle's cotangent M ∘ G; the upper one's is Mᵀ ∘ G, its
            # transpose (G is symmetric)
            if type(gL) is np.ndarray and type(L) is np.ndarray:  # (skip the dispatch check)
                abar = _plain_cholesky_cotangent(L, gL)
            else:
                abar = _cholesky_cotangent(L, gL)
            return (_mT(abar) if upper else abar,)
        ltg = _lower_transposed_times(L, gL)
        if ltg is None:
            p = np.matmul(tr(L), gL) * _phi_mask(shape_of(L)[-1], _dtype(gL), gL)
        else:  # (a fresh plain array: masked in place)
            p = np.multiply(ltg, _phi_mask(shape_of(L)[-1], ltg.dtype, ltg), out=ltg)
        # L comes from a successful factorisation: it is finite, no need to scan it again
        s = _solve_nonsingular(L, p, trans=trans, lower=True)
        s = tr(_solve_nonsingular(L, tr(s), trans=trans, lower=True))
        if type(s) is np.ndarray and s.ndim == 2 and s.dtype.kind == "f":
            # sym(s) in one temporary (the pullback of a plain gradient: nothing records it)
            out = np.add(s, s.T)
            out /= 2
            return (_read_cotangent(out, not upper),)
        return (_read_cotangent(sym(s), not upper),)
    return y, pullback


def _plain_cholesky_cotangent(L, gL):
    """Ā = M ∘ sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹): the cotangent of the lower triangle of A that
    ``np.linalg.cholesky`` reads, for a real Cholesky factor ``L`` of A (lower, its upper
    triangle zero) and the cotangent ``gL`` of L; Φ = lower triangle with halved diagonal, M the
    read mask (:func:`_read_mask`). A primitive so that on duals its frule, not six dual solves
    and products, runs.

    Example:
        >>> L = np.array([[2.0, 0.0], [1.0, 1.0]])
        >>> _cholesky_cotangent(L, np.eye(2)) + 0.0  # (+ 0.0: the -0.0 above the diagonal)
        array([[ 0.375,  0.   ],
               [-0.5  ,  0.5  ]])
    """
    if type(L) is np.ndarray and L.ndim == 2:
        fast = cholesky_blas.lower_cotangent(L, gL)
        if fast is not None:
            return fast
        fast = cholesky_blas.cotangent(L, gL, _phi_mask(L.shape[-1], L.dtype, L))
        if fast is not None:
            return _read_cotangent(fast, True)
    s = _cholesky_cotangent_unsym(L, gL, _cholesky_phi(L, _lower_t_times(L, gL)))
    if type(s) is np.ndarray and s.ndim == 2 and s.dtype.kind == "f":
        # sym(s) in one temporary (the pullback of a plain gradient: nothing records it)
        out = np.add(s, s.T)
        out /= 2
        return _read_cotangent(out, True)
    return _read_cotangent(_sym(s), True)


_cholesky_cotangent = primitive(_plain_cholesky_cotangent)


def _cholesky_phi(L, x):
    """Φ(x), in place where ``x`` is a fresh plain array."""
    mask = _phi_mask(shape_of(L)[-1], _dtype(x), x)
    if type(x) is np.ndarray and x.flags.writeable:  # (x is (..., n, n): the product's shape)
        return np.multiply(x, mask, out=x)
    return x * mask


def _lower_t_times(T, x):
    """``Tᵀ @ x`` reading the lower triangle of ``T`` only (by trmm where
    :func:`_triangle_times` can: half the flops of a product)."""
    r = _lower_transposed_times(T, x)
    return np.matmul(_mT(np.tril(T)), x) if r is None else r


def _cholesky_cotangent_unsym(L, gL, p):
    """L⁻ᵀ p L⁻¹ (the cotangent before symmetrising; ``p`` = Φ(Lᵀ L̄))."""
    # L comes from a successful factorisation: it is finite, no need to scan it again
    s = _solve_nonsingular(L, p, trans=1, lower=True)
    return _mT(_solve_nonsingular(L, _mT(s), trans=1, lower=True))


def _one_lane(t):
    """The only lane of a lane-first plain 2-D-per-lane tangent, or None."""
    return t[0] if type(t) is np.ndarray and t.ndim == 3 and t.shape[0] == 1 else None


def _lane_lower_t_times(T, x, lanes_in_t):
    """``Tᵀ @ x`` with a lane-first tangent (``T``'s if ``lanes_in_t``, else ``x``'s) and a
    ``T`` of which only the lower triangle is read; one lane of plain matrices by trmm."""
    t = _one_lane(T if lanes_in_t else x)
    if t is not None:
        r = _triangle_times(t, x, True, 1) if lanes_in_t else _triangle_times(T, t, True, 1)
        if r is not None:
            return r[None]
    return np.matmul(_mT(np.tril(T)), x)


@frule(_cholesky_cotangent, lanes=True)
def _cholesky_cotangent_f(primals, tangents):
    # With P = Φ(Lᵀ L̄), S = L⁻ᵀ P L⁻¹ and Ā = sym(S) (returned as M ∘ Ā, M constant):
    #   Ṡ = L⁻ᵀ Ṗ L⁻¹ - NᵀS - SN with N = L̇ L⁻¹, and sym(NᵀS + SN) = 2 sym(Ā N), so
    #   Ā̇ = sym((L⁻ᵀ Ṗ - 2 Ā L̇) L⁻¹),  Ṗ = Φ(L̇ᵀ L̄ + Lᵀ L̄̇)
    # two solves and three triangular products for the tangent, no inverse, no L⁻¹ L̇ (plain
    # float matrices: the same sequence by BLAS with an explicit L⁻¹, see cholesky_blas).
    (L, gL), (dL, dg) = primals, tangents
    if type(L) is np.ndarray and L.ndim == 2:
        fast = cholesky_blas.cotangent_and_tangent(L, gL, dL, dg,
                                                   _phi_mask(L.shape[-1], L.dtype, L))
        if fast is not None:  # (fresh buffers: masked in place)
            return _read_cotangent(fast[0], True), _read_cotangent(fast[1], True)
    s = _cholesky_cotangent_unsym(L, gL, _cholesky_phi(L, _lower_t_times(L, gL)))
    abar = _sym(s)
    dp = None if dL is None else _lane_lower_t_times(dL, gL, True)
    if dg is not None:
        dp = _addt(dp, _lane_lower_t_times(L, dg, False))
    if dp is None:
        return _read_cotangent(abar, True), None
    solve_t = (lambda r: _solve_nonsingular(L, r, trans=1, lower=True))
    y = _lane_solve(solve_t, _cholesky_phi(L, dp))
    if dL is not None:
        # Ā L̇ = (L̇ᵀ Ā)ᵀ, Ā symmetric: a triangular product
        y = y - 2 * _mT(_lane_lower_t_times(dL, abar, True))
    dabar = _sym(_mT(_lane_solve(solve_t, _mT(y))))
    return _read_cotangent(abar, True), _read_cotangent(dabar, True)


def _lower_transposed_times(L, g):
    """``Lᵀ @ g`` for a lower-triangular ``L`` by :func:`_triangle_times`, or None."""
    return _triangle_times(L, g, True, 1)


# Below this many rows a triangular product stays a matrix product: SciPy's call overhead
# (~3 µs) is then more than the flops trmm saves.
_TRMM_MIN_N = 16


def _triangle_times(a, x, lower, trans):
    """``op(T) @ x`` for the ``lower`` (or upper) triangle ``T`` of a real NumPy matrix ``a``
    (C- or Fortran-ordered; the other triangle is not read), ``op`` the transpose if
    ``trans``, and a matrix ``x`` of its dtype, by BLAS trmm: half the flops of the matrix
    product, ~0.55x its time at n = 128. None for any other operands (stacks, complex, small
    or wrapped values: the caller then masks and multiplies)."""
    if type(a) is not np.ndarray or type(x) is not np.ndarray or a.ndim != 2 or x.ndim != 2:
        return None
    dt = a.dtype
    n = a.shape[0]
    if dt.char not in "fd" or x.dtype != dt or a.shape[1] != n or x.shape[0] != n or \
            not x.size or n < _TRMM_MIN_N:
        return None
    # (op(T) x)ᵀ = xᵀ op(T)ᵀ, with xᵀ the Fortran reading of a C-ordered x: trmm from the right
    if a.flags.c_contiguous:  # the Fortran matrix a.T is aᵀ: the other triangle
        f, lower_f, trans_f = a.T, not lower, trans
    elif a.flags.f_contiguous:
        f, lower_f, trans_f = a, lower, not trans
    else:
        return None
    fn = _blas_routine("trmm", dt)
    if fn is None:
        return None
    with small_blas(a, x, lib="scipy"):
        return fn(1.0, f, x.T, side=1, lower=int(lower_f), trans_a=int(trans_f)).T


@frule(np.linalg.cholesky, lanes=True)
def _cholesky_f(primals, tangents, **kw):
    def go(a, upper=False):
        y = None if upper else cholesky_blas.factor(a)
        if y is None:
            y = _cholesky_upper(a) if upper else np.linalg.cholesky(a)
        tr, sym = _adjoints(y)
        L = tr(y) if upper else y
        da = tangents[0] * _read_mask(y, not upper)  # the triangle read: sym(da) below
        if type(L) is np.ndarray and L.ndim == 2 and tr is _mT:
            dL = cholesky_blas.factor_tangent(L, da,
                                              _phi_mask(L.shape[-1], L.dtype, L))
            if dL is not None:
                return y, tr(dL) if upper else dL
        # L̇ = L Φ(L⁻¹ Ȧ L⁻ᵀ), Ȧ symmetrised (Ȧ L⁻ᵀ = (L⁻¹ Ȧ)ᵀ for symmetric Ȧ); complex:
        # ᵀ → ᴴ, and Φ's halved diagonal of the Hermitian L⁻¹ Ȧ L⁻ᴴ is real, as L's is.
        solve_l = (lambda r: _solve_nonsingular(L, r, lower=True))
        z = _lane_solve(solve_l, tr(_lane_solve(solve_l, sym(da))))
        zphi = z * _phi_mask(shape_of(L)[-1], _dtype(z), z)
        one = _triangle_times(L, zphi[0], True, 0) if shape_of(zphi)[0] == 1 else None
        dL = np.matmul(L, zphi) if one is None else one[None]
        return y, tr(dL) if upper else dL
    return go(*primals, **kw)


def _eigh_cotangent(w, v, gw, gv):
    """Ā = V (diag(w̄) + F ∘ Vᵀ V̄) Vᵀ, symmetrised, with F_ij = 1/(λ_j - λ_i) off the diagonal.

    Limitation: at (near-)degenerate eigenvalues the eigenvectors are not differentiable and
    F blows up. Exactly equal pairs get F_ij = 0 instead of inf, so that functions of the
    eigenvalues alone (the tape passes V̄ = 0) and functions invariant under rotations within
    an eigenspace keep finite, correct gradients; other functions get meaningless values there.
    """
    # Complex (Hermitian A = V Λ Vᴴ): ᵀ → ᴴ; F is real, so F∘ is its own adjoint, and its zero
    # diagonal drops the phase (gauge) part of V̄, which a gauge-invariant function leaves 0.
    tr, sym = _adjoints(v)
    inner = np.expand_dims(gw, -2) * v
    if gv is not None:
        d = np.expand_dims(w, -2) - np.expand_dims(w, -1)
        f = (d != 0) / (d + (d == 0))  # 1/d, and 0 on the diagonal and equal pairs
        inner = inner + np.matmul(v, f * np.matmul(tr(v), gv))
    return sym(np.matmul(inner, tr(v)))


def _eigh_tangents(w, v, da, vectors):
    """λ̇ = diag(Vᵀ Ȧ V) and (if ``vectors``) V̇ = V (F ∘ Vᵀ Ȧ V), Ȧ symmetrised, F as in
    :func:`_eigh_cotangent` (0 for exactly equal eigenvalues: same limitation).

    At exactly repeated eigenvalues, tangents of symmetric functions of the eigenvalues stay
    exact, but second order does not: an HVP of ``Σ g(λ)`` there lacks the g''(λ)·(Vᵀ Ȧ V)_ij
    terms within the eigenspace (its limit is not visible to this rule).
    """
    tr, sym = _adjoints(v)
    m = np.matmul(tr(v), np.matmul(sym(da), v))
    dw = np.einsum("...ii->...i", m)
    if tr is _mH:  # Vᴴ Ȧ V is Hermitian: the eigenvalues move along its real diagonal
        dw = np.real(dw)
    if not vectors:
        return dw
    d = np.expand_dims(w, -2) - np.expand_dims(w, -1)
    f = (d != 0) / (d + (d == 0))
    return dw, np.matmul(v, f * m)


def _reads_lower(UPLO):
    """Whether eigh/eigvalsh read the lower triangle for ``UPLO`` (NumPy's check and message)."""
    u = str(UPLO).upper()
    if u not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    return u == "L"


@rrule(np.linalg.eigh, needs=True)
def _eigh(needs, a, UPLO="L"):
    res = np.linalg.eigh(a, UPLO)
    w, v = res
    lower = _reads_lower(UPLO)

    def pullback(gs):
        gw, gv = gs
        return _pad(needs, _read_cotangent(_eigh_cotangent(w, v, gw, gv), lower))
    return res, pullback


@frule(np.linalg.eigh, lanes=True)
def _eigh_f(primals, tangents, **kw):
    def go(a, UPLO="L"):
        res = np.linalg.eigh(a, UPLO)
        da = tangents[0] * _read_mask(res[1], _reads_lower(UPLO))
        return res, _eigh_tangents(res[0], res[1], da, True)
    return go(*primals, **kw)


@rrule(np.linalg.eigvalsh, needs=True)
def _eigvalsh(needs, a, UPLO="L"):
    w, v = np.linalg.eigh(a, UPLO)
    lower = _reads_lower(UPLO)
    return w, lambda g: _pad(needs, _read_cotangent(_eigh_cotangent(w, v, g, None), lower))


@frule(np.linalg.eigvalsh, lanes=True)
def _eigvalsh_f(primals, tangents, **kw):
    def go(a, UPLO="L"):
        w, v = np.linalg.eigh(a, UPLO)
        da = tangents[0] * _read_mask(v, _reads_lower(UPLO))
        return w, _eigh_tangents(w, v, da, False)
    return go(*primals, **kw)


# --- scipy.linalg triangular solves -----------------------------------------------------------
_scipy_linalg = []


def _sla(a=None, b=None, name=None):
    """scipy.linalg, or None without scipy (imported on first use: it is optional and slow);
    for CuPy operands ``a``/``b``, cupyx.scipy.linalg."""
    if am.is_device(a) or am.is_device(b):
        am.module_of(a, b, what=name)  # refuse a host operand next to a device one
        return am.scipy_linalg(a if am.is_device(a) else b, name)
    if not _scipy_linalg:
        try:
            import scipy.linalg as sla
        except ImportError:  # pragma: no cover
            sla = None
        _scipy_linalg.append(sla)
    return _scipy_linalg[0]


_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2, "n": 0, "t": 1, "c": 2}


def _trans(trans, a):
    """0 (T), 1 (Tᵀ) or 2 (Tᴴ: only for complex ``a``; for real ``a`` it is Tᵀ)."""
    t = _TRANS[trans]
    return 1 if t == 2 and not _cplx(a) else t


def _triangle(a, lower, unit_diagonal):
    n = shape_of(a)[-1]
    eye = am.eye(n, dtype=a.dtype, like=a)
    t = np.tril(a) if lower else np.triu(a)
    return t * (1 - eye) + eye if unit_diagonal else t


_TRIANGLE_MASKS = {}  # host masks by (n, lower, unit_diagonal, dtype), as cholesky_blas.phi_mask's


def _triangle_mask(n, lower, unit_diagonal, dtype, like):
    if am.is_device(like):
        m = am.tri(n, None, -1 if unit_diagonal else 0, dtype=dtype, like=like)
        return m if lower else m.T
    key = (n, bool(lower), bool(unit_diagonal), np.dtype(dtype))
    m = _TRIANGLE_MASKS.get(key)
    if m is None:
        m = np.tri(n, None, -1 if unit_diagonal else 0, dtype=dtype)
        m = m if lower else np.ascontiguousarray(m.T)
        m.flags.writeable = False
        _TRIANGLE_MASKS[key] = m
    return m


@primitive
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve ``a x = b`` (or ``aᵀ x = b`` with ``trans=1``/``'T'``) for triangular ``a``, as
    ``scipy.linalg.solve_triangular`` (same signature; only the ``lower`` or upper triangle of
    ``a`` is read), differentiable in ``a`` and ``b``.

    ``a`` may be a stack of matrices; ``b`` is a vector when 1-D, else a (stack of) matrices.
    Works without scipy (then via ``np.linalg.solve``), and on CuPy arrays (via
    ``cupyx.scipy.linalg.solve_triangular``, whose batches must match without broadcasting).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> L = np.array([[2.0, 0.0], [1.0, 1.0]])
        >>> mp.grad(lambda b: np.sum(mp.linalg.solve_triangular(L, b, lower=True)))(np.ones(2))
        array([0., 1.])
    """
    x = _checked_blas_solve(a, b, trans, lower, unit_diagonal, check_finite)
    if x is not None:
        return x
    sla = _sla(a, b, "mp.linalg.solve_triangular")
    if sla is not None:
        with small_blas(a, b, lib="scipy"):
            return sla.solve_triangular(a, b, trans=trans, lower=lower,
                                        unit_diagonal=unit_diagonal, overwrite_b=overwrite_b,
                                        check_finite=check_finite)
    a = np.asarray(a)
    t = _triangle(a, lower, unit_diagonal)
    vec = np.ndim(b) == 1
    op = (t, _mT, _mH)[_trans(trans, a)]
    return _uncols(np.linalg.solve(op if op is t else op(t), _cols(b, vec)), vec)


def _checked_blas_solve(a, b, trans, lower, unit_diagonal, check_finite):
    """scipy.linalg.solve_triangular's result for a real NumPy matrix and right-hand side of
    one dtype, by :func:`_blas_trsm` after SciPy's checks (finite entries when asked, no zero
    on the diagonal), without SciPy's per-call argument handling (~15 µs, as much as a vector
    solve at n = 128). None where SciPy must run: other operands, and every failing check, so
    that errors and their messages stay SciPy's."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 \
            or not 1 <= b.ndim <= 2 or a.dtype != b.dtype or a.dtype.char not in "fd":
        return None
    try:
        t = _TRANS[trans]
    except (KeyError, TypeError):
        return None
    if check_finite and not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    if not unit_diagonal and not np.diagonal(a).all():
        return None
    return _blas_trsm(a, b, 1 if t == 2 else t, lower, unit_diagonal)


def _blas_routine(name, dt):
    """SciPy's BLAS routine ``name`` ("trsm", "trsv", "trmm", "gemm", ...) for float32/float64
    ``dt`` (None without SciPy): cholesky_blas's lookup, which also serves LAPACK's."""
    return cholesky_blas._routine(name, dt.char)


def _blas_trsm(a, b, trans, lower, unit_diagonal):
    """``op(a)⁻¹ b`` (``trans`` 0 or 1) for a triangular float32/float64 NumPy matrix ``a``
    that is known to be non-singular, by BLAS trsm applied from the right to the transposes
    (``xᵀ op(a)ᵀ = bᵀ``, which reads C-ordered arrays as they lie); None if the operands are
    of another kind. OpenBLAS's right-sided trsm runs at the speed of a matrix product, about
    twice as fast as the left-sided one that LAPACK's trtrs (scipy's solve_triangular) uses on
    matrices of a few hundred rows, and the call skips SciPy's argument checks."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 \
            or not 1 <= b.ndim <= 2:
        return None
    dt = a.dtype
    n = a.shape[0]
    if dt != b.dtype or dt.char not in "fd" or a.shape[1] != n or b.shape[0] != n or not b.size:
        return None
    if a.flags.c_contiguous:  # the Fortran matrix is aᵀ: the other triangle, op transposed
        af, lower_f, tr = a.T, not lower, trans
    elif a.flags.f_contiguous:
        af, lower_f, tr = a, lower, 1 - trans
    else:
        return None
    if b.ndim == 1 or b.shape[1] == 1:
        # one right-hand side: trsv (~3 µs at n = 128; trsm packs the matrix first, ~13 µs)
        fn = _blas_routine("trsv", dt)
        if fn is None:
            return None
        with small_blas(a, b, lib="scipy"):
            y = fn(af, b if b.ndim == 1 else b[:, 0], lower=int(lower_f), trans=1 - int(tr),
                   diag=int(bool(unit_diagonal)))
        return y if b.ndim == 1 else np.reshape(y, (n, 1))
    fn = _blas_routine("trsm", dt)
    if fn is None:
        return None
    bt = np.reshape(b, (1, n)) if b.ndim == 1 else b.T
    with small_blas(a, b, lib="scipy"):
        y = fn(1.0, af, bt, side=1, lower=int(lower_f), trans_a=int(tr),
               diag=int(bool(unit_diagonal)))
    return np.reshape(y, (n,)) if b.ndim == 1 else y.T


@primitive
def _solve_nonsingular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                       check_finite=False):
    """:func:`solve_triangular` for a triangular ``a`` known to be finite and non-singular (a
    Cholesky factor, or the matrix of a solve that has already succeeded: the rules' inner
    solves), so neither scanned nor tested for singularity; NumPy float matrices by
    :func:`_blas_trsm`, everything else by :func:`solve_triangular`.

    Example:
        >>> L = np.array([[2.0, 0.0], [1.0, 1.0]])
        >>> _solve_nonsingular(L, np.array([2.0, 2.0]), lower=True)
        array([1., 1.])
    """
    x = _blas_trsm(a, b, _trans(trans, a), lower, unit_diagonal)
    if x is not None:
        return x
    return solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal,
                            check_finite=False)


@primitive
def _neg_masked_outer(u, v, mask):
    """``-(u vᵀ) * mask`` for (stacks of) column vectors ``u``, ``v`` (``(..., n, 1)``): the
    cotangent of a triangular matrix from one right-hand side. A primitive so that on duals
    its frule forms the tangent in one product instead of two dual outer products and a dual
    mask.

    Example:
        >>> u, v = np.array([[1.0], [2.0]]), np.array([[3.0], [4.0]])
        >>> _neg_masked_outer(u, v, np.tri(2))
        array([[-3., -0.],
               [-6., -8.]])
    """
    if type(u) is np.ndarray and type(v) is np.ndarray and u.ndim == 2 and u.shape == v.shape \
            and u.shape[1] == 1 and u.dtype == v.dtype and u.dtype.kind == "f" \
            and u.shape[0] >= _TRMM_MIN_N:
        # one product with inner dimension 2 and a zero second term: exact (but for the sign
        # of a zero) and ~2x faster than broadcasting, which NumPy's matmul with inner
        # dimension 1 is ~3x slower than
        n = u.shape[0]
        left, right = np.zeros((n, 2), u.dtype), np.zeros((2, n), u.dtype)
        np.negative(u, out=left[:, :1])
        right[0] = v[:, 0]
        r = np.matmul(left, right)
        return np.multiply(r, mask, out=r)
    r = u * -_mT(v)
    if type(r) is np.ndarray:  # (fresh: masked in place)
        return np.multiply(r, mask, out=r)
    return r * mask


@frule(_neg_masked_outer, lanes=True)
def _neg_masked_outer_f(primals, tangents):
    (u, v, mask), (du, dv, _) = primals, tangents
    y = _neg_masked_outer(u, v, mask)
    if du is None and dv is None:
        return y, None
    one = _one_lane_outer_tangent(u, v, du, dv, mask)
    if one is not None:
        return y, one
    t = None if du is None else du * -_mT(v)
    if dv is not None:
        t = _addt(t, u * -_mT(dv))
    return y, t * mask


def _one_lane_outer_tangent(u, v, du, dv, mask):
    """-(u̇ vᵀ + u v̇ᵀ) * mask for one lane of plain (n, 1) float columns of one dtype: both
    outer products as one product with inner dimension 2 (one pass over the n² result where
    two outer products and their sum make three), masked in place; None for other operands."""
    if type(u) is not np.ndarray or type(v) is not np.ndarray or u.ndim != 2 \
            or u.shape != v.shape or u.shape[1] != 1 or type(mask) is not np.ndarray:
        return None
    dt = u.dtype
    if dt.kind != "f" or v.dtype != dt or mask.dtype != dt:
        return None
    left, right = [], []
    for t, lc, rc in ((du, None, v), (dv, u, None)):
        if t is None:
            continue
        if type(t) is not np.ndarray or t.shape != (1,) + u.shape or t.dtype != dt:
            return None
        left.append(t[0] if lc is None else lc)
        right.append(t[0] if rc is None else rc)
    if len(left) == 1:  # (one outer product: by broadcasting, as the value)
        out = -left[0] * _mT(right[0])
    else:
        lc = np.concatenate(left, axis=1)
        out = np.matmul(np.negative(lc, out=lc), _mT(np.concatenate(right, axis=1)))
    np.multiply(out, mask, out=out)
    return out[None]


def _vector_tangent(a, x, da, db, t, lower, unit_diagonal):
    """ẋ = op(T)⁻¹ (ḃ - op(Ṫ) x) for one lane and one right-hand side (``x`` of shape (n,) or
    (n, 1)) of plain float arrays of one dtype, by BLAS trmv and trsv (a few µs each at
    n = 128, where the general path's lane folding and masked products cost ~10x more);
    None for other operands. Only T's triangle is read, as :func:`_triangle_times` does."""
    if type(a) is not np.ndarray or type(x) is not np.ndarray or a.ndim != 2:
        return None
    n, dt = a.shape[0], a.dtype
    if x.dtype != dt or dt.char not in "fd" or a.shape[1] != n or not n or \
            x.shape not in ((n,), (n, 1)):
        return None
    lanes = (1,) + x.shape
    if db is not None and (type(db) is not np.ndarray or db.shape != lanes or db.dtype != dt):
        return None
    rhs = None
    if da is not None:
        if unit_diagonal or type(da) is not np.ndarray or da.shape != (1, n, n) or \
                da.dtype != dt:
            return None
        rhs = _blas_trmv(da[0], x.reshape(n), t, lower)
        if rhs is None:
            return None
        rhs = np.negative(rhs, out=rhs) if db is None else \
            np.subtract(db.reshape(n), rhs, out=rhs)
    elif db is None:
        return None
    else:
        rhs = db.reshape(n)
    y = _blas_trsm(a, rhs, t, lower, unit_diagonal)
    return None if y is None else y.reshape(lanes)


def _blas_trmv(a, x, trans, lower):
    """``op(T) @ x`` for the ``lower`` (or upper) triangle T of a C- or Fortran-ordered float
    matrix ``a`` and a vector ``x`` of its dtype, by BLAS trmv (a fresh array); None where
    ``a`` is neither C- nor Fortran-ordered."""
    if a.flags.c_contiguous:  # the Fortran matrix a.T is aᵀ: the other triangle
        af, lower_f, tr = a.T, not lower, 1 - trans
    elif a.flags.f_contiguous:
        af, lower_f, tr = a, lower, trans
    else:
        return None
    fn = _blas_routine("trmv", a.dtype)
    if fn is None:
        return None
    with small_blas(a, lib="scipy"):
        return fn(af, x, lower=int(lower_f), trans=int(tr))


def _solve_triangular_rrule(primal):
    """The rrule of ``primal`` (solve_triangular or _solve_nonsingular); the solves of its
    pullback are inner solves with the matrix of the forward one."""
    def rule(needs, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
             check_finite=True):
        t = _trans(trans, a)
        x = primal(a, b, trans=t, lower=lower, unit_diagonal=unit_diagonal,
                   check_finite=check_finite)
        cplx = _cplx(a) or _cplx(x)
        opts = {"lower": lower, "unit_diagonal": unit_diagonal}

        def a_cotangent(bbar, xm):
            # x = op(T)⁻¹ b: T̄ = -b̄ xᵀ (or -x b̄ᵀ for op = transpose), on the triangle read.
            # Complex (b̄ = op(T)⁻ᴴ x̄): op = T: -b̄ xᴴ; Tᵀ: -conj(x) b̄ᵀ; Tᴴ: -x b̄ᴴ.
            if not cplx:
                u, v = (xm, bbar) if t else (bbar, xm)
                if shape_of(v)[-1] == 1:
                    return _neg_masked_outer(u, v, _triangle_mask(
                        shape_of(a)[-1], lower, unit_diagonal, _dtype(u), u))
                outer = np.matmul(u, _mT(v))
            else:
                outer = (np.matmul(bbar, _mH(xm)) if t == 0 else
                         np.conjugate(np.matmul(xm, _mH(bbar))) if t == 1 else
                         np.matmul(xm, _mH(bbar)))
            return -outer * _triangle_mask(shape_of(a)[-1], lower, unit_diagonal,
                                          _dtype(outer), outer)

        def solve_t(gm):
            # b̄ = op(T)⁻ᴴ ḡ (op(T)⁻ᵀ ḡ when real): Tᴴ for T, T for Tᴴ, conj(T)⁻¹ for Tᵀ.
            # (the forward call checked T where asked, and it solved: T is non-singular; a
            # non-finite cotangent gives a non-finite gradient, as every other pullback does)
            if not cplx:
                return _solve_nonsingular(a, gm, trans=1 - t, **opts)
            if t == 1:
                return np.conjugate(_solve_nonsingular(a, np.conjugate(gm), trans=0, **opts))
            return _solve_nonsingular(a, gm, trans=2 - t, **opts)

        def pullback(g):  # (the tape takes the real part for a real T or b: rules/complex.py)
            sx = shape_of(x)
            if len(sx) == 1 and len(shape_of(g)) == 1 and len(shape_of(a)) == 2 and not cplx:
                # one vector right-hand side and one matrix (plain, or dual in HVPs): no
                # promotion to columns and back, nothing to unbroadcast
                need = _need2(needs)
                bbar = solve_t(g)
                col = sx + (1,)
                return _pad(needs, a_cotangent(np.reshape(bbar, col), np.reshape(x, col))
                            if need[0] else None, bbar if need[1] else None)
            return _pad(needs, *_solve_pullback(needs, g, a, b, x, solve_t, a_cotangent))
        return x, pullback
    return rule


def _solve_triangular_frule(primal):
    """The frule of ``primal`` (solve_triangular or _solve_nonsingular); the tangent's solve is
    an inner solve (tangents are not scanned, as in the other frules)."""
    def rule(primals, tangents, **kw):
        da, db = _tan(tangents, 0), _tan(tangents, 1)

        def go(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
               check_finite=True):
            t = _trans(trans, a)
            opts = {"trans": t, "lower": lower, "unit_diagonal": unit_diagonal}
            x = primal(a, b, check_finite=check_finite, **opts)
            if not _cplx(a):
                one = _vector_tangent(a, x, da, db, t, lower, unit_diagonal)
                if one is not None:
                    return x, one

            def dax(xm, nd):  # only the triangle read moves; ẋ = -op(T)⁻¹ op(Ṫ) x
                if not unit_diagonal and shape_of(da)[0] == 1 and nd == 2:
                    one = _triangle_times(da[0], xm, lower, t)  # (one lane: no mask pass)
                    if one is not None:
                        return one[None]
                dt = align(da * _triangle_mask(shape_of(a)[-1], lower, unit_diagonal,
                                               _dtype(da), da), nd)
                return np.matmul((None, _mT, _mH)[t](dt) if t else dt, xm)
            return x, _solve_tangent(lambda r: _solve_nonsingular(a, r, **opts), b, x, db,
                                     None if da is None else dax, len(shape_of(b)) == 1)
        return go(*primals, **kw)
    return rule


for _fn in (solve_triangular, _solve_nonsingular):
    rrule(_fn, needs=True)(_solve_triangular_rrule(_fn))
    frule(_fn, lanes=True)(_solve_triangular_frule(_fn))


@primitive
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``A x = b`` given the Cholesky factor ``(c, lower)`` of ``A``, as
    ``scipy.linalg.cho_solve`` (``A = c cᵀ`` if ``lower`` else ``cᵀ c``; only that triangle of
    ``c`` is read), differentiable in ``c`` and ``b``.

    ``c`` may be a stack of matrices; ``b`` is a vector when 1-D, else a (stack of) matrices.
    Works without scipy (then via ``np.linalg.solve``), and on CuPy arrays (two triangular
    solves with ``cupyx.scipy.linalg.solve_triangular``).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[4.0, 2.0], [2.0, 3.0]])
        >>> c = np.linalg.cholesky(A)
        >>> x = mp.linalg.cho_solve((c, True), np.array([1.0, 2.0]))
        >>> bool(np.allclose(A @ x, [1.0, 2.0]))
        True
    """
    c, lower = c_and_lower
    if am.is_device(c) or am.is_device(b):  # cupyx.scipy.linalg has no cho_solve
        st = _sla(c, b, "mp.linalg.cho_solve").solve_triangular
        h = 2 if _cplx(c) else 1  # A = C Cᴴ for complex C
        y = st(c, b, trans=0 if lower else h, lower=lower, check_finite=check_finite)
        return st(c, y, trans=h if lower else 0, lower=lower, check_finite=check_finite)
    sla = _sla()
    if sla is not None:
        with small_blas(c, b, lib="scipy"):
            return sla.cho_solve((c, lower), b, overwrite_b=overwrite_b,
                                 check_finite=check_finite)
    c = np.asarray(c)
    t = _triangle(c, lower, False)
    tr = _adjoints(c)[0]
    vec = np.ndim(b) == 1
    y = np.linalg.solve(t if lower else tr(t), _cols(b, vec))
    return _uncols(np.linalg.solve(tr(t) if lower else t, y), vec)


@rrule(cho_solve, needs=True)
def _cho_solve(needs, c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    x = cho_solve((c, lower), b, check_finite=check_finite)
    tr = _mH if _cplx(x) else _mT  # complex: A = L Lᴴ, Ā = -b̄ xᴴ, ᵀ → ᴴ

    def a_cotangent(bbar, xm):
        # A = L Lᵀ with Ā = -b̄ xᵀ: L̄ = (Ā + Āᵀ) L; for A = Uᵀ U: Ū = U (Ā + Āᵀ). Only the
        # triangle of c that cho_solve reads is the factor: mask c, and the cotangent, to it.
        s = np.matmul(bbar, tr(xm))
        s = s + tr(s)
        mask = _triangle_mask(shape_of(c)[-1], lower, False, _dtype(s), s)
        ct = -np.matmul(s, c * mask) if lower else -np.matmul(c * mask, s)
        return ct * mask

    def pullback(g):
        gc, gb = _solve_pullback(needs, g, c, b, x,
                                 lambda gm: cho_solve((c, lower), gm, check_finite=False),
                                 a_cotangent)  # (c checked in the forward call, where asked)
        return _pad(needs, None if gc is None else (gc, None), gb)
    return x, pullback


@frule(cho_solve, lanes=True)
def _cho_solve_f(primals, tangents, **kw):
    dcl, db = _tan(tangents, 0), _tan(tangents, 1)
    dc = None if dcl is None else dcl[0]

    def go(c_and_lower, b, overwrite_b=False, check_finite=True):
        c, lower = c_and_lower
        x = cho_solve((c, lower), b, check_finite=check_finite)

        def dax(xm, nd):
            # Ȧx for A = C Cᵀ (lower) or Cᵀ C (upper), C and Ċ masked to the triangle read
            # (complex: ᵀ → ᴴ).
            tr = _adjoints(c)[0]
            mask = _triangle_mask(shape_of(c)[-1], lower, False, _dtype(dc), dc)
            cm, dcm = c * mask, align(dc * mask, nd)
            if lower:
                return (np.matmul(dcm, np.matmul(tr(cm), xm))
                        + np.matmul(cm, np.matmul(tr(dcm), xm)))
            return (np.matmul(tr(dcm), np.matmul(cm, xm))
                    + np.matmul(tr(cm), np.matmul(dcm, xm)))
        return x, _solve_tangent(lambda r: cho_solve((c, lower), r, check_finite=False),
                                 b, x, db, None if dc is None else dax, len(shape_of(b)) == 1)
    return go(*primals, **kw)


# --- numpy.linalg.svd -------------------------------------------------------------------------
# Thin SVD A = U S Vᵀ of an (m, n) matrix (stacks: the last two axes), k = min(m, n) singular
# values s ≥ 0. With dP = Uᵀ Ȧ V split into its symmetric part a and antisymmetric part b:
#     ṡ = diag(dP)
#     U̇ = U (F₋∘a + F₊∘b) + (Ȧ V − U dP) S⁻¹        (the last term, (I − UUᵀ) Ȧ V S⁻¹, if m > k)
#     V̇ = V (F₋∘a − F₊∘b) + (Ȧᵀ U − V dPᵀ) S⁻¹      (the last term if n > k)
# with F₋_ij = 1/(s_j − s_i), F₊_ij = 1/(s_i + s_j). This is the usual F_ij = 1/(s_j² − s_i²)
# form (Townsend, "Differentiating the singular value decomposition") split in two; the split
# keeps F₊ finite at repeated singular values (see _svd_f_matrices). The reverse rule is its
# adjoint: Ā = U (diag(s̄) + sym(F₋∘(X + Y)) + skew(F₊∘(X − Y))) Vᵀ + (I − UUᵀ) Ū S⁻¹ Vᵀ
#                + U S⁻¹ V̄ᵀ (I − VVᵀ),   X = UᵀŪ, Y = VᵀV̄.
# Complex A = U S Vᴴ: every ᵀ becomes ᴴ and sym/skew the Hermitian/skew-Hermitian parts; ṡ is
# Re diag(dP). The imaginary diagonal of dP (the relative phase of u_i and v_i, a gauge freedom
# of each pair) is split evenly by F₊'s diagonal 1/(2sᵢ), between U and V, so functions of the
# pairs u_i v_iᴴ, invariant under the gauge, get exact derivatives.
# Conventions (hermitian=False only):
# - exactly repeated singular values: F₋ = 0 there (as eigh's F); U, V are not differentiable
#   there, but functions of s and of the polar factor U Vᵀ keep exact derivatives. Nearly (not
#   exactly) repeated values make U̇, V̇ ill-conditioned, as they are mathematically.
# - zero singular values: S⁻¹ and F₊ are taken as 0 where they would divide by 0 (finite, but
#   second order of e.g. Σs² at a rank-deficient non-square A then misses those terms).
# - full_matrices=True: the extra columns of U (m > n) or rows of Vh (n > m) span the
#   complement and are not functions of A; they get the minimal derivative that keeps them
#   orthogonal to the rest (see _svd_side_tangent), exact for every function invariant under
#   rotations among them (and, with one extra column, for every sign-invariant function).


def _svd_check(hermitian):
    if hermitian:
        raise MissingRuleError(
            "numpy.linalg.svd with hermitian=True has no derivative rule in mooncake_py (it "
            "would differentiate through an eigendecomposition whose eigenvalue signs are "
            "folded into U and Vh). Call np.linalg.svd(a) with hermitian=False (the default), "
            "which decomposes a symmetric matrix too, or use np.linalg.eigh.")


def _nonzero_inverse(x):
    """1/x, and 0 where x == 0 (np. calls only: this runs on duals in second order)."""
    return (x != 0) / (x + (x == 0))


def _svd_f_matrices(s):
    """(F₋, F₊) of the SVD derivative, F₋_ij = 1/(s_j − s_i) and F₊_ij = 1/(s_i + s_j), each 0
    where its denominator is 0.

    Convention at repeated singular values (as for eigh: exactly equal values): F₋ is set to 0.
    The singular vectors are not differentiable there, so U, V themselves get arbitrary
    (finite) derivatives; but functions of the singular values, and of the polar factor U Vᵀ
    (whose derivative only involves F₊, e.g. the gradient of the nuclear norm, hence its HVP),
    stay exact as long as the repeated values are nonzero.
    """
    sj, si = np.expand_dims(s, -2), np.expand_dims(s, -1)
    return _nonzero_inverse(sj - si), _nonzero_inverse(sj + si)


def _svd_thin_parts(u, vh, k):
    """(U₁, U₂, V₁, V₂, tall, wide): the thin factors (m×k, n×k), the extra columns of a full
    decomposition (None where there are none), and whether m > k, n > k."""
    m, n = shape_of(u)[-2], shape_of(vh)[-1]
    tr = _adjoints(u)[0]  # complex: V = Vhᴴ
    full_u, full_v = shape_of(u)[-1] > k, shape_of(vh)[-2] > k
    u1, u2 = (u[..., :k], u[..., k:]) if full_u else (u, None)
    v1, v2 = (tr(vh[..., :k, :]), tr(vh[..., k:, :])) if full_v else (tr(vh), None)
    return u1, u2, v1, v2, m > k, n > k


def _svd_side_tangent(x1, x2, rest, dpx, sinv):
    """The tall side's extra tangent terms: ((I − X₁X₁ᵀ) R S⁻¹, Ẋ₂ or None), for X = U, R = Ȧ V,
    dpx = dP (or X = V, R = Ȧᵀ U, dpx = dPᵀ); ``sinv`` scales columns.

    Extra columns X₂ (full_matrices=True): any orthonormal basis of the complement of X₁'s
    range, not a function of A. They are moved only as much as staying orthogonal to X₁
    requires: Ẋ₂ = −X₁ (Ẋ₁ᵀ X₂) = −X₁ S⁻¹ (X₂ᵀ R)ᵀ.
    """
    tr = _adjoints(x1)[0]
    t1 = (rest - np.matmul(x1, dpx)) * sinv
    if x2 is None:
        return t1, None
    return t1, -np.matmul(x1, tr(np.matmul(tr(x2), rest) * sinv))


def _svd_tangents(u, s, vh, da, compute_uv):
    """Lane-first tangents (U̇, ṡ, V̇h) of np.linalg.svd (ṡ alone without ``compute_uv``); the
    factors may be full (then U̇, V̇h are too)."""
    k = shape_of(s)[-1]
    u1, u2, v1, v2, tall, wide = _svd_thin_parts(u, vh, k)
    tr, sym = _adjoints(u)
    dav = np.matmul(da, v1)
    if not compute_uv:
        if tr is _mH:  # Re diag(Uᴴ Ȧ V)
            return np.real(np.sum(np.conjugate(u1) * dav, axis=-2))
        return np.sum(u1 * dav, axis=-2)  # diag(Uᵀ Ȧ V)
    dp = np.matmul(tr(u1), dav)
    ds = np.einsum("...ii->...i", dp)
    if tr is _mH:
        ds = np.real(ds)
    a, b = sym(dp), (dp - tr(dp)) / 2
    fm, fp = _svd_f_matrices(s)
    du, dv = np.matmul(u1, fm * a + fp * b), np.matmul(v1, fm * a - fp * b)
    sinv = np.expand_dims(_nonzero_inverse(s), -2)
    if tall:
        t1, t2 = _svd_side_tangent(u1, u2, dav, dp, sinv)
        du = du + t1 if t2 is None else np.concatenate([du + t1, t2], axis=-1)
    if wide:
        t1, t2 = _svd_side_tangent(v1, v2, np.matmul(tr(da), u1), tr(dp), sinv)
        dv = dv + t1 if t2 is None else np.concatenate([dv + t1, t2], axis=-1)
    return du, ds, tr(dv)


def _svd_side_cotangent(x1, x2, g1, g2, xg):
    """The adjoint of :func:`_svd_side_tangent` before scaling by S⁻¹: (I − X₁X₁ᵀ) X̄₁ − X₂ X̄₂ᵀ X₁
    (``xg`` = X₁ᵀ X̄₁; ``g1``/``g2`` may be None)."""
    tr = _adjoints(x1)[0]
    r = None if g1 is None else g1 - np.matmul(x1, xg)
    if g2 is not None:
        r = _addt(r, -np.matmul(x2, np.matmul(tr(g2), x1)))
    return r


def _svd_cotangent(u, s, vh, gu, gs, gvh):
    """Ā for the cotangents (Ū, s̄, V̄h) of np.linalg.svd's outputs (any may be None); the
    factors may be full, with their cotangents."""
    k = shape_of(s)[-1]
    u1, u2, v1, v2, tall, wide = _svd_thin_parts(u, vh, k)
    tr, sym = _adjoints(u)
    gu1 = gu2 = gv1 = gv2 = None
    if gu is not None:
        gu1, gu2 = (gu[..., :k], gu[..., k:]) if u2 is not None else (gu, None)
    if gvh is not None:
        gv1, gv2 = ((tr(gvh[..., :k, :]), tr(gvh[..., k:, :])) if v2 is not None
                    else (tr(gvh), None))
    left = None if gs is None else u1 * np.expand_dims(gs, -2)  # U diag(s̄)
    x = None if gu1 is None else np.matmul(tr(u1), gu1)
    y = None if gv1 is None else np.matmul(tr(v1), gv1)
    if x is not None or y is not None:
        fm, fp = _svd_f_matrices(s)
        xpy = _addt(x, y)
        xmy = _addt(x, None if y is None else -y)
        inner = sym(fm * xpy) + (fp * xmy - tr(fp * xmy)) / 2
        left = _addt(left, np.matmul(u1, inner))
    sinv = np.expand_dims(_nonzero_inverse(s), -2)
    if tall and (gu1 is not None or gu2 is not None):
        left = _addt(left, _svd_side_cotangent(u1, u2, gu1, gu2, x) * sinv)
    ga = None if left is None else np.matmul(left, tr(v1))
    if wide and (gv1 is not None or gv2 is not None):
        ga = _addt(ga, np.matmul(u1, tr(_svd_side_cotangent(v1, v2, gv1, gv2, y) * sinv)))
    return ga


@rrule(np.linalg.svd, needs=True)
def _svd(needs, a, full_matrices=True, compute_uv=True, hermitian=False):
    """Reverse rule of np.linalg.svd (real input, hermitian=False; see the notes above).

    ``compute_uv=False`` returns the singular values of the thin decomposition (one LAPACK
    call; they may differ from NumPy's values-only driver in the last bits), and its pullback
    is U diag(s̄) Vᵀ. Zero singular values: S⁻¹ is taken as 0 there, so rank-deficient
    non-square inputs keep finite (but, for U and V, meaningless) derivatives.
    """
    _svd_check(hermitian)
    if not compute_uv:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        return s, lambda g: _pad(needs, np.matmul(u * np.expand_dims(g, -2), vh))
    res = np.linalg.svd(a, full_matrices=full_matrices)

    def pullback(gs):
        gu, gs_, gvh = gs
        return _pad(needs, _svd_cotangent(res[0], res[1], res[2], gu, gs_, gvh))
    return res, pullback


@frule(np.linalg.svd, lanes=True)
def _svd_f(primals, tangents, **kw):
    """Forward rule of np.linalg.svd: (U̇, ṡ, V̇h), or ṡ = diag(Uᵀ Ȧ V) without compute_uv."""
    da = tangents[0]

    def go(a, full_matrices=True, compute_uv=True, hermitian=False):
        _svd_check(hermitian)
        if not compute_uv:
            u, s, vh = np.linalg.svd(a, full_matrices=False)
            return s, None if da is None else _svd_tangents(u, s, vh, da, False)
        res = np.linalg.svd(a, full_matrices=full_matrices)
        return res, None if da is None else _svd_tangents(res[0], res[1], res[2], da, True)
    return go(*primals, **kw)


# --- by composition: multi_dot, pinv --------------------------------------------------------
@composite(np.linalg.multi_dot)
def _multi_dot(arrays, *, out=None):
    """Left to right (NumPy picks the cheapest order; the values agree to rounding)."""
    result = arrays[0]
    for a in arrays[1:]:
        result = np.dot(result, a)
    return result


@composite(np.linalg.pinv)
def _pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """V diag(1/s) Uᵀ over the singular values above the cutoff; differentiable where the rank
    does not change (the cutoff itself is a constant)."""
    if hermitian:
        raise MissingRuleError("np.linalg.pinv(..., hermitian=True) is not differentiated; use "
                               "hermitian=False (the default).")
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    m, n = shape_of(a)[-2:]
    tol = rcond if rcond is not None else rtol
    if tol is None:
        tol = max(m, n) * np.finfo(_dtype(s)).eps
    keep = s > tol * np.max(s, axis=-1, keepdims=True)      # plain: comparisons carry no tangent
    s_inv = np.where(keep, 1 / np.where(keep, s, 1), 0)
    return np.matmul(_mT(vh) * np.expand_dims(s_inv, -2), _mT(u))


# cholesky, eigh, eigvalsh and the triangular solves conjugate where the inner product
# Re Σ conj(a)·b asks (Hermitian A = L Lᴴ = V Λ Vᴴ), so they handle complex values themselves.

for _fn in (np.linalg.cholesky, np.linalg.eigh, np.linalg.eigvalsh, solve_triangular,
            _solve_nonsingular, cho_solve,
            np.linalg.norm, np.linalg.svd):
    declare_complex(_fn, holomorphic=False)


def blas_functions():
    """The functions whose rules make BLAS/LAPACK calls worth keeping single-threaded on
    medium-sized matrices (core/blas_threads.py's ``limit_small_calls`` wraps their rules)."""
    fns = [np.matmul, np.dot, np.inner, np.vdot, np.tensordot, np.einsum, np.kron,
           solve_triangular, _solve_nonsingular, cho_solve]
    fns += [getattr(np.linalg, n) for n in ("cholesky", "solve", "inv", "det", "slogdet", "eigh",
                                              "eigvalsh", "svd", "pinv", "lstsq", "qr",
                                              "matrix_power", "multi_dot")
            if hasattr(np.linalg, n)]
    return fns
