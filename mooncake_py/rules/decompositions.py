"""Rules for matrix decompositions and matrix functions: numpy.linalg qr, eig, eigvals, lstsq,
matrix_power and cond (and, by composition, NumPy 2's matrix_transpose, diagonal, svdvals,
matrix_norm, vector_norm, vecdot, cross, and tensorinv, tensorsolve); and the scipy.linalg primitives lu, expm, sqrtm, solve_sylvester and
solve_banded, logm (exported by :mod:`mooncake_py.scipy.linalg`).

Matrix arguments are the last two axes and leading axes are a batch, as in NumPy and SciPy. The
derivative table (k = min(m, n); Ȧ a tangent, Ā a cotangent; Rank conditions as stated):

- ``A = QR`` (R invertible on its first k columns). Square or tall, C = Qᵀ Ȧ R⁻¹ and
  Ω = tril(C, −1) − tril(C, −1)ᵀ: Ṙ = (C − Ω) R, Q̇ = Ȧ R⁻¹ − Q (C − Ω).
  Reverse: M = R̄ Rᵀ − Qᵀ Q̄, Ā = (Q̄ + Q copyu(M)) R⁻ᵀ with copyu(M) = triu(M) + triu(M, 1)ᵀ.
  Wide A = [X Y]: X = Q R₁ as above and R₂ = Qᵀ Y. The extra columns Q₂ of a complete Q (tall A)
  are no function of A: they get the least motion that keeps them orthogonal to Q₁,
  Q̇₂ = −Q₁ (Q₂ᵀ Ȧ R⁻¹)ᵀ (exact for functions of Q₂ Q₂ᵀ, as for svd's full_matrices).
- ``A V = V Λ`` (distinct eigenvalues, real or complex; V with unit columns, as LAPACK returns
  them): P = V⁻¹ Ȧ V, λ̇ = diag(P), V̇ = N(V (F ∘ P)) with F_ij = 1/(λ_j − λ_i) (0 on the
  diagonal) and N the tangent of LAPACK's normalisation (N(W) = W − V diag(Vᵀ W) when real).
  Reverse: Ā = V⁻ᴴ (diag(λ̄) + conj(F) ∘ (Vᴴ N*(V̄))) Vᴴ (see the eig section for N*).
- ``x = A⁺ b`` (lstsq, full rank): with r = b − A x, b̄ = A⁺ᵀ x̄ and
  Ā = −b̄ xᵀ + r (A⁺ b̄)ᵀ + A⁺ᵀ x (x̄ − A⁺ A x̄)ᵀ (the middle term lives for m > n, the last for
  m < n); residuals ρ = ‖r‖² give b̄ += 2 r ρ̄, Ā −= 2 r ρ̄ xᵀ (as Aᵀ r = 0).
- ``A = P L U`` (P constant; L unit lower, U upper): F = L₁⁻¹ Pᵀ Ȧ U₁⁻¹ on the leading k × k
  block, L̇₁ = L₁ tril(F, −1), U̇₁ = triu(F) U₁; a tall rest L₂ = Ã₂ U⁻¹, a wide rest
  U₂ = L⁻¹ Ã₂. Reverse: Ã̄₁ = L₁⁻ᵀ (tril(L₁ᵀ L̄₁, −1) + triu(Ū₁ U₁ᵀ)) U₁⁻ᵀ.
- ``Y = expm(A)``: Ẏ = L(A, Ȧ), the Fréchet derivative, the top right block of
  expm([[A, Ȧ], [0, A]]); Ā = L(Aᵀ, Ȳ). The pullback calls :func:`expm` itself, whose frule
  exists, so second order works. ``logm`` likewise (the block trick holds for every primary
  matrix function).
- ``X = sqrtm(A)``: X Ẋ + Ẋ X = Ȧ, so Ẋ = sylvester(X, X, Ȧ) and Ā = sylvester(Xᵀ, Xᵀ, X̄).
- ``A X + X B = Q``: Ẋ = sylvester(A, B, Q̇ − Ȧ X − X Ḃ); Q̄ = sylvester(Aᵀ, Bᵀ, X̄),
  Ā = −Q̄ Xᵀ, B̄ = −Xᵀ Q̄.
- ``solve_banded``: the solve's rule, x̄ solved with the transposed band, Ā kept on the band.

Every pullback is written with ruled ``np.`` calls (or these primitives), so forward-over-reverse
(hvp, hessian) works through all of them.
"""
import warnings

import numpy as np

from ..core import array_module as am
from ..errors import MissingRuleError
from .broadcasting import shape_of, unbroadcast
from .complex import declare_complex
from .lanes import align
from .linear_algebra import _addt, _cols, _dtype, _mT, _pad, _sla, _tan, _uncols, solve_triangular
from .registry import composite, frule, primitive, rrule, zero_derivative

__all__ = ["lu", "expm", "logm", "sqrtm", "solve_sylvester", "solve_banded"]


def _eye_like(n, x):
    return am.eye(n, dtype=_dtype(x), like=x)


def _tri_inv(t, lower, unit=False):
    """The inverse of a (stack of) triangular matrices, by a triangular solve (complex ones by
    np.linalg.inv of the triangle: solve_triangular refuses complex values, for its
    conjugating trans='C')."""
    eye = _eye_like(shape_of(t)[-1], t)
    if _is_complex(t):
        tri = np.tril(t, -1 if unit else 0) if lower else np.triu(t, 1 if unit else 0)
        return np.linalg.inv(tri + eye if unit else tri)
    return solve_triangular(t, np.broadcast_to(eye, shape_of(t)), lower=lower,
                            unit_diagonal=unit, check_finite=False)


def _copyu(m):
    """The upper triangle of ``m`` mirrored into the lower one (complex: conjugated, with the
    real part of the diagonal, as R's diagonal is real: LAPACK's Householder βs are)."""
    if _is_complex(m):
        u = np.triu(m, 1)
        re = np.real(m)
        return u + _h(u) + re * _eye_like(shape_of(m)[-1], re)
    return np.triu(m) + _mT(np.triu(m, 1))


def _is_complex(x):
    return np.dtype(_dtype(x)).kind == "c"


# --- numpy.linalg.qr --------------------------------------------------------------------------
# Complex A = QR: every ᵀ below is ᴴ (_h, a plain transpose for real values); R's diagonal is
# real, so Ω = QᴴQ̇ also holds the imaginary diagonal of Qᴴ Ȧ R⁻¹.
_QR_MODES = ("reduced", "complete", "r")


def _qr_check(mode):
    if mode not in _QR_MODES:
        raise MissingRuleError(
            f"numpy.linalg.qr(..., mode={mode!r}) has no derivative rule in mooncake_py (the "
            "'raw' Householder form is not a smooth matrix function); use mode='reduced', "
            "'complete' or 'r'.")


def _qr_factors(a, mode):
    """(output, Q₁, R₁, Q₂): NumPy's output for ``mode``, the thin factors and the extra
    columns of a complete Q (None unless mode='complete' with m > n)."""
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    if mode == "reduced":
        out = np.linalg.qr(a, "reduced")
        return out, out[0], out[1], None
    if mode == "r":
        q, r = np.linalg.qr(a, "reduced")
        return r, q, r, None
    out = np.linalg.qr(a, "complete")
    q, r = out
    if m > n:
        return out, q[..., :k], r[..., :k, :], q[..., k:]
    return out, q, r, None


def _qr_square_cotangent(q, r1, gq, gr1):
    """Ā of the square-or-tall part (R₁ square): (Q̄ + Q copyu(M)) R₁⁻ᵀ, M = R̄ R₁ᵀ − Qᵀ Q̄."""
    m = None if gr1 is None else np.matmul(gr1, _h(r1))
    if gq is not None:
        m = _addt(m, -np.matmul(_h(q), gq))
    left = np.matmul(q, _copyu(m))
    if gq is not None:
        left = left + gq
    return np.matmul(left, _h(_tri_inv(r1, lower=False)))


def _qr_cotangent(a, q1, r, q2, gq1, gr, gq2):
    m, n = shape_of(a)[-2:]
    if gq1 is None and gr is None and gq2 is None:
        return None
    if n > m:  # A = [X Y]: R₂ = Qᵀ Y, so Ȳ = Q R̄₂ and Q̄ gains Y R̄₂ᵀ
        y = a[..., :, m:]
        gr1 = None if gr is None else gr[..., :, :m]
        gy = None
        if gr is not None:
            gr2 = gr[..., :, m:]
            gy = np.matmul(q1, gr2)
            gq1 = _addt(gq1, np.matmul(y, _h(gr2)))
        if gq1 is None and gr1 is None:
            gx = np.zeros_like(gy)
        else:
            gx = _qr_square_cotangent(q1, r[..., :, :m], gq1, gr1)
        return np.concatenate([gx, gy if gy is not None else np.zeros_like(y)], axis=-1)
    if gq1 is None and gr is None:
        gq1 = np.zeros_like(q1)
    ga = _qr_square_cotangent(q1, r, gq1, gr)
    if gq2 is not None:  # Q̇₂ = −Q₁ R⁻ᵀ Ȧᵀ Q₂ is adjoint to −Q₂ Q̄₂ᵀ Q₁ R⁻ᵀ
        ga = ga - np.matmul(np.matmul(q2, np.matmul(_h(gq2), q1)), _h(_tri_inv(r, False)))
    return ga


@rrule(np.linalg.qr, needs=True)
def _qr(needs, a, mode="reduced"):
    _qr_check(mode)
    out, q1, r1, q2 = _qr_factors(a, mode)
    m, n = shape_of(a)[-2:]
    k = min(m, n)

    def pullback(g):
        if mode == "r":
            gq1, gr, gq2 = None, g, None
        else:
            gq, gr = g
            gq1, gq2 = gq, None
            if q2 is not None:
                if gq is not None:
                    gq1, gq2 = gq[..., :k], gq[..., k:]
                if gr is not None:
                    gr = gr[..., :k, :]  # the zero rows below R₁ are constant
        return _pad(needs, _qr_cotangent(a, q1, r1, q2, gq1, gr, gq2))
    return out, pullback


def _qr_square_tangents(q, r1, dx):
    """(Q̇, Ṙ₁) for lane-first Ẋ of the square-or-tall part, and Ẋ R₁⁻¹."""
    dxr = np.matmul(dx, _tri_inv(r1, lower=False))
    c = np.matmul(_h(q), dxr)
    low = np.tril(c, -1)
    c_omega = c - low + _h(low)  # C − Ω
    if _is_complex(c):  # Ω = QᴴQ̇ is skew-Hermitian: it takes C's imaginary diagonal too
        im = np.imag(c)
        c_omega = c_omega - 1j * (im * _eye_like(shape_of(c)[-1], im))
    return dxr - np.matmul(q, c_omega), np.matmul(c_omega, r1), dxr


@frule(np.linalg.qr, lanes=True)
def _qr_f(primals, tangents, **kw):
    da = tangents[0]

    def go(a, mode="reduced"):
        _qr_check(mode)
        out, q1, r1, q2 = _qr_factors(a, mode)
        m, n = shape_of(a)[-2:]
        if n > m:
            dq, dr1, _ = _qr_square_tangents(q1, r1[..., :, :m], da[..., :, :m])
            dr2 = np.matmul(_h(dq), a[..., :, m:]) + np.matmul(_h(q1), da[..., :, m:])
            dr = np.concatenate([dr1, dr2], axis=-1)
        else:
            dq, dr, dar = _qr_square_tangents(q1, r1, da)
            if q2 is not None:
                dq2 = -np.matmul(q1, _h(np.matmul(_h(q2), dar)))
                dq = np.concatenate([dq, dq2], axis=-1)
                dr = np.concatenate([dr, np.zeros_like(da[..., : m - n, :])], axis=-2)
        return out, dr if mode == "r" else (dq, dr)
    return go(*primals, **kw)


# --- numpy.linalg.eig, eigvals ----------------------------------------------------------------
# A real matrix may have complex eigenvalues: then w and V are complex. LAPACK scales each
# eigenvector to unit norm with its largest component real, a normalisation that is not
# holomorphic; so these rules handle complex values themselves (declared explicit, with
# cotangents for the inner product Re Σ conj(a)·b, as rules/complex.py sets out): the
# holomorphic part's adjoint uses conjugate transposes, and the normalisation
# N(W) = W − V Re diag(Vᴴ W) − i V Im(W_k)/V_k (k: each column's real component) is replaced
# by its adjoint N*(G) = G − V Re diag(Vᴴ G) − i e_k Im(diag(Vᴴ G))/V_k.
def _eig_f_matrix(w):
    d = np.expand_dims(w, -2) - np.expand_dims(w, -1)
    return (d != 0) / (d + (d == 0))  # 1/(λ_j − λ_i), 0 on the diagonal


def _h(x):
    """The conjugate transpose (the transpose for real x)."""
    return np.conjugate(_mT(x)) if _is_complex(x) else _mT(x)


def _phase_parts(v):
    """(one-hot of each column's real component k, V_k): LAPACK makes the largest one real."""
    k = np.argmax(np.abs(v), axis=-2)
    onehot = am.asarray(np.arange(shape_of(v)[-2])[:, None] == np.expand_dims(k, -2))
    vk = np.real(np.sum(v * onehot, axis=-2, keepdims=True))
    return onehot, vk


def _normalize_tangent(v, t):
    """N(T): the tangent of unit columns (with a real largest component, if complex)."""
    vht = np.sum((np.conjugate(v) if _is_complex(v) else v) * t, axis=-2, keepdims=True)
    if not _is_complex(v):
        return t - v * vht
    onehot, vk = _phase_parts(v)
    tk_im = np.imag(np.sum(t * onehot, axis=-2, keepdims=True))
    return t - v * np.real(vht) - 1j * v * (tk_im / vk)


def _normalize_cotangent(v, g):
    """N*(G), the adjoint of :func:`_normalize_tangent` for Re Σ conj(a)·b (N itself if real)."""
    if not _is_complex(v) and not _is_complex(g):
        return _normalize_tangent(v, g)
    vhg = np.sum(np.conjugate(v) * g, axis=-2, keepdims=True)
    onehot, vk = _phase_parts(v)
    return g - v * np.real(vhg) - 1j * onehot * (np.imag(vhg) / vk)


def _eig_cotangent(w, v, gw, gv):
    """Ā = V⁻ᴴ (diag(w̄) + conj(F) ∘ (Vᴴ N*(V̄))) Vᴴ."""
    inner = None
    if gw is not None:
        inner = np.expand_dims(gw, -2) * _eye_like(shape_of(v)[-1], v)
    if gv is not None:
        f = _eig_f_matrix(w)
        f = np.conjugate(f) if _is_complex(f) else f
        inner = _addt(inner, f * np.matmul(_h(v), _normalize_cotangent(v, gv)))
    if inner is None:
        return None
    return np.linalg.solve(_h(v), np.matmul(inner, _h(v)))


@rrule(np.linalg.eig, needs=True)
def _eig(needs, a):
    res = np.linalg.eig(a)
    w, v = res
    return res, lambda g: _pad(needs, _eig_cotangent(w, v, g[0], g[1]))


@rrule(np.linalg.eigvals, needs=True)
def _eigvals(needs, a):
    w, v = np.linalg.eig(a)
    return w, lambda g: _pad(needs, _eig_cotangent(w, v, g, None))


def _eig_tangents(w, v, da):
    p = np.matmul(np.linalg.solve(v, da), v)  # V⁻¹ Ȧ V (V broadcasts over the lanes)
    dw = np.einsum("...ii->...i", p)
    return dw, _normalize_tangent(v, np.matmul(v, _eig_f_matrix(w) * p))


@frule(np.linalg.eig, lanes=True)
def _eig_f(primals, tangents):
    res = np.linalg.eig(primals[0])
    return res, _eig_tangents(res[0], res[1], tangents[0])


@frule(np.linalg.eigvals, lanes=True)
def _eigvals_f(primals, tangents):
    w, v = np.linalg.eig(primals[0])
    return w, _eig_tangents(w, v, tangents[0])[0]


# --- numpy.linalg.lstsq ----------------------------------------------------------------------
# Complex: ᵀ → ᴴ (_h); the residuals ‖r‖² and singular values are real: ρ̇ = 2 Re Σ conj(r)·ṙ.
def _lstsq_solve(a, b, rcond):
    return np.linalg.lstsq(a, b, rcond=rcond)[0]


@rrule(np.linalg.lstsq, needs=True)
def _lstsq(needs, a, b, rcond=None):
    """Reverse rule of np.linalg.lstsq (2-D ``a``, full rank): the pseudo-inverse's derivative,
    with every A⁺ applied by lstsq itself (so the pullback is differentiable again)."""
    res = np.linalg.lstsq(a, b, rcond=rcond)
    x = res[0]
    m, n = shape_of(a)
    vec = len(shape_of(b)) == 1
    need = tuple(needs[:2]) + (False,) * (2 - len(needs))

    def pullback(gs):
        gx, grho, _, gs_ = gs
        ga = gb = None
        xm, bm = _cols(x, vec), _cols(b, vec)
        if gx is not None:
            gxm = _cols(gx, vec)
            gb = _lstsq_solve(_h(a), gxm, rcond)                 # A⁺ᵀ x̄
            ga = -np.matmul(gb, _h(xm))
            if m > n:
                r = bm - np.matmul(a, xm)
                ga = ga + np.matmul(r, _h(_lstsq_solve(a, gb, rcond)))
            elif m < n:
                y = _lstsq_solve(_h(a), xm, rcond)               # A⁺ᵀ x
                p = gxm - _lstsq_solve(a, np.matmul(a, gxm), rcond)
                ga = ga + np.matmul(y, _h(p))
        if grho is not None and shape_of(res[1])[0] > 0:
            r = bm - np.matmul(a, xm)
            rg = 2 * r * grho
            gb = _addt(gb, rg)
            ga = _addt(ga, -np.matmul(rg, _h(xm)))
        if gs_ is not None and need[0]:
            u, _, vh = np.linalg.svd(a, full_matrices=False)
            ga = _addt(ga, np.matmul(u * gs_, vh))
        if gb is not None:
            gb = _uncols(gb, vec)
        return _pad(needs, ga if need[0] else None, gb if need[1] else None)
    return res, pullback


@frule(np.linalg.lstsq)
def _lstsq_f(primals, tangents, **kw):
    da, db = _tan(tangents, 0), _tan(tangents, 1)

    def go(a, b, rcond=None):
        res = np.linalg.lstsq(a, b, rcond=rcond)
        x, rho, _rank, s = res
        m, n = shape_of(a)
        vec = len(shape_of(b)) == 1
        xm, bm = _cols(x, vec), _cols(b, vec)
        r = bm - np.matmul(a, xm)
        rhs = None if db is None else _cols(db, vec)
        if da is not None:
            rhs = _addt(rhs, -np.matmul(da, xm))
        dx = _lstsq_solve(a, rhs, rcond)
        drho = None
        if shape_of(rho)[0] > 0:
            drho = 2 * np.sum((np.real(np.conjugate(r) * rhs) if _is_complex(r) or
                               _is_complex(rhs) else r * rhs), axis=0)
        ds = None
        if da is not None:
            if m > n:  # + A⁺ A⁺ᵀ Ȧᵀ r
                dx = dx + _lstsq_solve(a, _lstsq_solve(_h(a), np.matmul(_h(da), r), rcond),
                                       rcond)
            elif m < n:  # + (I − A⁺ A) Ȧᵀ A⁺ᵀ x
                q = np.matmul(_h(da), _lstsq_solve(_h(a), xm, rcond))
                dx = dx + q - _lstsq_solve(a, np.matmul(a, q), rcond)
            u, _, vh = np.linalg.svd(a, full_matrices=False)
            ds = np.sum(np.conjugate(u) * np.matmul(da, _h(vh)), axis=-2)
            ds = np.real(ds) if _is_complex(ds) else ds
        else:
            ds = np.zeros_like(s)
        if drho is None:
            drho = np.zeros_like(rho)
        return res, (_uncols(dx, vec), drho, None, ds)
    return go(*primals, **kw)


# --- numpy.linalg.matrix_power, cond: by composition ----------------------------------------
@composite(np.linalg.matrix_power)
def _matrix_power(a, n):
    """Repeated squaring in NumPy's own order (so values match it); n < 0 inverts first."""
    if not isinstance(n, (int, np.integer)):
        raise TypeError("exponent must be an integer")
    if n == 0:
        return 0 * a + _eye_like(shape_of(a)[-1], a)
    if n < 0:
        a = np.linalg.inv(a)
        n = abs(n)
    if n == 1:
        return np.copy(a)
    if n == 2:
        return np.matmul(a, a)
    if n == 3:
        return np.matmul(np.matmul(a, a), a)
    z = result = None
    while n > 0:
        z = a if z is None else np.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else np.matmul(result, z)
    return result


@composite(np.linalg.cond)
def _cond(x, p=None):
    """σ_max/σ_min (p = None, 2; σ_min/σ_max for −2) from the singular values, else
    ‖x‖_p ‖x⁻¹‖_p."""
    if p is None or p == 2 or p == -2:
        s = np.linalg.svd(x, compute_uv=False)
        return s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    return (np.linalg.norm(x, p, axis=(-2, -1))
            * np.linalg.norm(np.linalg.inv(x), p, axis=(-2, -1)))


# --- the array-API spellings in np.linalg (NumPy 2) and tensorinv/tensorsolve: by composition --
def _compose(name, impl):
    fn = getattr(np.linalg, name, None)
    if fn is not None:
        composite(fn)(impl)


def _vector_norm(x, axis=None, keepdims=False, ord=2):
    """np.linalg.norm over the flattened ``axis`` (several axes are one vector, as NumPy's
    vector_norm has it)."""
    shape = shape_of(x)
    nd = len(shape)
    axes = tuple(range(nd)) if axis is None else (
        (int(axis) % nd,) if isinstance(axis, (int, np.integer)) else tuple(int(a) % nd
                                                                            for a in axis))
    rest = [i for i in range(nd) if i not in axes]
    moved = np.transpose(x, rest + list(axes))
    flat = np.reshape(moved, tuple(shape[i] for i in rest) + (-1,))
    y = np.linalg.norm(flat, ord, axis=-1)
    if keepdims:
        y = np.reshape(y, tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return y


def _tensorinv(a, ind=2):
    shape = shape_of(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    rows = int(np.prod(shape[:ind]))
    return np.reshape(np.linalg.inv(np.reshape(a, (rows, -1))), tuple(shape[ind:] + shape[:ind]))


def _tensorsolve(a, b, axes=None):
    nd = len(shape_of(a))
    if axes is not None:
        order = list(range(nd))
        for k in axes:
            order.remove(k)
            order.insert(nd, k)
        a = np.transpose(a, order)
    old = tuple(shape_of(a)[-(nd - len(shape_of(b))):])
    n = int(np.prod(old))
    x = np.linalg.solve(np.reshape(a, (n, n)), np.reshape(b, (-1,)))
    return np.reshape(x, old)


_compose("matrix_transpose", lambda x: np.swapaxes(x, -1, -2))
_compose("diagonal", lambda x, *, offset=0: np.diagonal(x, offset, -2, -1))
_compose("svdvals", lambda x: np.linalg.svd(x, compute_uv=False))
_compose("matrix_norm", lambda x, *, keepdims=False, ord="fro":
         np.linalg.norm(x, ord, axis=(-2, -1), keepdims=keepdims))
_compose("vector_norm", lambda x, *, axis=None, keepdims=False, ord=2:
         _vector_norm(x, axis, keepdims, ord))
_compose("vecdot", lambda x1, x2, *, axis=-1:
         np.sum((np.conjugate(x1) if _is_complex(x1) else x1) * x2, axis=axis))
_compose("cross", lambda x1, x2, *, axis=-1: np.cross(x1, x2, axis=axis))
_compose("tensorinv", _tensorinv)
_compose("tensorsolve", _tensorsolve)
zero_derivative(np.linalg.matrix_rank)


# --- scipy.linalg.expm ------------------------------------------------------------------------
def _host_sla(name, *xs):
    sla = _sla(*(xs + (None, None))[:2], name)
    if sla is None:  # pragma: no cover
        raise ImportError(f"{name} needs scipy")
    return sla


@primitive
def expm(A):
    """The matrix exponential, as ``scipy.linalg.expm`` (batched over leading axes),
    differentiable: the tangent is the Fréchet derivative, from ``expm([[A, Ȧ], [0, A]])``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[0.0, 1.0], [0.0, 0.0]])
        >>> mp.scipy.linalg.expm(A)
        array([[1., 1.],
               [0., 1.]])
        >>> float(mp.grad(lambda t: np.sum(mp.scipy.linalg.expm(t * A)))(1.0))
        1.0
    """
    return _host_sla("mp.scipy.linalg.expm", A).expm(A)


def _frechet(a, e, fn=None):
    """L(A, E) of the matrix function ``fn`` (default expm): the top right block of
    fn([[A, E], [0, A]]), true of every primary matrix function; ``e`` may have more leading
    (lane) axes than ``a``."""
    a = np.broadcast_to(a, shape_of(e)) if shape_of(a) != shape_of(e) else a
    z = np.zeros_like(a) if _dtype(a) == _dtype(e) else np.zeros_like(e)
    big = np.concatenate([np.concatenate([a, e], axis=-1), np.concatenate([z, a], axis=-1)],
                         axis=-2)
    n = shape_of(e)[-1]
    if fn is None:
        return expm(big)[..., :n, n:]
    with warnings.catch_warnings():
        # logm's error estimate on the block matrix (~1e-13) is noise to the caller, who did
        # not ask for this logm
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(big)[..., :n, n:]


@rrule(expm)
def _expm(A):
    y = expm(A)
    return y, lambda g: (_frechet(_mT(A), g),)


@frule(expm, lanes=True)
def _expm_f(primals, tangents):
    return expm(primals[0]), _frechet(primals[0], tangents[0])


@primitive
def logm(A, **kwargs):
    """The principal matrix logarithm, as ``scipy.linalg.logm`` (complex where a real matrix
    has negative eigenvalues), differentiable: the tangent is the Fréchet derivative, the top
    right block of ``logm([[A, Ȧ], [0, A]])``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: np.trace(mp.scipy.linalg.logm(a)))(np.diag([2.0, 4.0]))
        array([[0.5 , 0.  ],
               [0.  , 0.25]])
    """
    return _host_sla("mp.scipy.linalg.logm", A).logm(A, **kwargs)


@rrule(logm)
def _logm(A, **kwargs):
    y = logm(A, **kwargs)
    return y, lambda g: (_frechet(_mT(A), g, logm),)


@frule(logm, lanes=True)
def _logm_f(primals, tangents, **kwargs):
    return logm(primals[0], **kwargs), _frechet(primals[0], tangents[0], logm)


# --- scipy.linalg.solve_sylvester, sqrtm -----------------------------------------------------
@primitive
def solve_sylvester(a, b, q):
    """Solve ``a x + x b = q``, as ``scipy.linalg.solve_sylvester`` (batched over leading axes),
    differentiable in ``a``, ``b`` and ``q``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> a, b = np.diag([1.0, 2.0]), np.diag([3.0, 4.0])
        >>> mp.scipy.linalg.solve_sylvester(a, b, np.ones((2, 2)))
        array([[0.25      , 0.2       ],
               [0.2       , 0.16666667]])
    """
    return _host_sla("mp.scipy.linalg.solve_sylvester", a).solve_sylvester(a, b, q)


def _bcast_to(x, shape):
    return x if shape_of(x) == tuple(shape) else np.broadcast_to(x, shape)


@rrule(solve_sylvester, needs=True)
def _solve_sylvester(needs, a, b, q):
    x = solve_sylvester(a, b, q)

    def pullback(g):
        gq = solve_sylvester(_mT(a), _mT(b), g)
        return _pad(needs,
                    unbroadcast(-np.matmul(gq, _mT(x)), shape_of(a)) if needs[0] else None,
                    unbroadcast(-np.matmul(_mT(x), gq), shape_of(b))
                    if len(needs) > 1 and needs[1] else None,
                    unbroadcast(gq, shape_of(q)) if len(needs) > 2 and needs[2] else None)
    return x, pullback


@frule(solve_sylvester, lanes=True)
def _solve_sylvester_f(primals, tangents):
    a, b, q = primals
    da, db, dq = (_tan(tangents, i) for i in range(3))
    x = solve_sylvester(a, b, q)
    nd = len(shape_of(x))
    rhs = None if dq is None else align(dq, nd)
    if da is not None:
        rhs = _addt(rhs, -np.matmul(align(da, nd), x))
    if db is not None:
        rhs = _addt(rhs, -np.matmul(x, align(db, nd)))
    lanes = shape_of(rhs)[:-2]
    return x, solve_sylvester(_bcast_to(a, lanes + shape_of(a)[-2:]),
                              _bcast_to(b, lanes + shape_of(b)[-2:]), rhs)


@primitive
def sqrtm(A, **kwargs):
    """The principal matrix square root, as ``scipy.linalg.sqrtm``, differentiable where it is
    real: Ẋ solves X Ẋ + Ẋ X = Ȧ (a Sylvester equation).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[4.0, 0.0], [0.0, 9.0]])
        >>> mp.grad(lambda a: np.trace(mp.scipy.linalg.sqrtm(a)))(A)
        array([[0.25      , 0.        ],
               [0.        , 0.16666667]])
    """
    return _host_sla("mp.scipy.linalg.sqrtm", A).sqrtm(A, **kwargs)


@rrule(sqrtm)
def _sqrtm(A, **kwargs):
    x = sqrtm(A, **kwargs)
    return x, lambda g: (solve_sylvester(_mT(x), _mT(x), g),)


@frule(sqrtm, lanes=True)
def _sqrtm_f(primals, tangents, **kwargs):
    x = sqrtm(primals[0], **kwargs)
    xb = _bcast_to(x, shape_of(tangents[0]))
    return x, solve_sylvester(xb, xb, tangents[0])


# --- scipy.linalg.lu --------------------------------------------------------------------------
@primitive
def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """LU decomposition with partial pivoting, as ``scipy.linalg.lu`` (same signature and
    outputs: ``(p, l, u)``, ``(pl, u)`` with ``permute_l``, integer ``p`` with ``p_indices``),
    differentiable in ``a`` (the permutation is piecewise constant). Rectangular and batched
    inputs work; the leading min(m, n) square block must be nonsingular.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
        >>> p, l, u = mp.scipy.linalg.lu(a)
        >>> bool(np.allclose(p @ l @ u, a))
        True
        >>> g = mp.grad(lambda a: np.sum(mp.scipy.linalg.lu(a)[2]))(a)
    """
    return _host_sla("mp.scipy.linalg.lu", a).lu(a, permute_l=permute_l, overwrite_a=overwrite_a,
                                                 check_finite=check_finite, p_indices=p_indices)


def _lu_parts(a, permute_l, p_indices, check_finite):
    """(output, P, L, U): SciPy's output for the flags and the matrix factors."""
    p, l, u = lu(a, check_finite=check_finite)
    if permute_l:
        out = (np.matmul(p, l), u)
    elif p_indices:
        out = lu(a, p_indices=True, check_finite=check_finite)
    else:
        out = (p, l, u)
    return out, p, l, u


def _lu_cotangent(a, p, l, u, gl, gu):
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    l1, u1 = l[..., :k, :], u[..., :, :k]
    gl1 = None if gl is None else gl[..., :k, :]
    gu1 = None if gu is None else gu[..., :, :k]
    gt2 = None   # cotangent of the rest of Pᵀ A (rows below k, or columns right of k)
    u1inv = _tri_inv(u1, lower=False)
    l1inv = _tri_inv(l1, lower=True, unit=True)
    if m > n and gl is not None:   # L₂ = Ã₂ U⁻¹
        gl2 = gl[..., k:, :]
        gt2 = np.matmul(gl2, _mT(u1inv))
        gu1 = _addt(gu1, -np.matmul(_mT(l[..., k:, :]), gt2))
    if n > m and gu is not None:   # U₂ = L⁻¹ Ã₂
        gt2 = np.matmul(_mT(l1inv), gu[..., :, k:])
        gl1 = _addt(gl1, -np.matmul(gt2, _mT(u[..., :, k:])))
    inner = None
    if gl1 is not None:
        inner = np.tril(np.matmul(_mT(l1), gl1), -1)
    if gu1 is not None:
        inner = _addt(inner, np.triu(np.matmul(gu1, _mT(u1))))
    if inner is None:
        gt1 = np.zeros_like(a[..., :k, :k])
    else:
        gt1 = np.matmul(_mT(l1inv), np.matmul(inner, _mT(u1inv)))
    if m > n:
        gt = np.concatenate([gt1, gt2 if gt2 is not None else np.zeros_like(a[..., k:, :])], -2)
    elif n > m:
        gt = np.concatenate([gt1, gt2 if gt2 is not None else np.zeros_like(a[..., :, k:])], -1)
    else:
        gt = gt1
    return np.matmul(p, gt)


@rrule(lu, needs=True)
def _lu(needs, a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    out, p, l, u = _lu_parts(a, permute_l, p_indices, check_finite)

    def pullback(g):
        if permute_l:
            gpl, gu = g
            gl = None if gpl is None else np.matmul(_mT(p), gpl)
        else:
            _, gl, gu = g
        if gl is None and gu is None:
            return _pad(needs)
        return _pad(needs, _lu_cotangent(a, p, l, u, gl, gu))
    return out, pullback


@frule(lu, lanes=True)
def _lu_f(primals, tangents, **kw):
    da = tangents[0]

    def go(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
        out, p, l, u = _lu_parts(a, permute_l, p_indices, check_finite)
        m, n = shape_of(a)[-2:]
        k = min(m, n)
        dt = np.matmul(_mT(p), da)  # Pᵀ Ȧ
        l1, u1 = l[..., :k, :], u[..., :, :k]
        u1inv = _tri_inv(u1, lower=False)
        l1inv = _tri_inv(l1, lower=True, unit=True)
        f = np.matmul(l1inv, np.matmul(dt[..., :k, :k], u1inv))
        dl, du = np.matmul(l1, np.tril(f, -1)), np.matmul(np.triu(f), u1)
        if m > n:
            dl2 = np.matmul(dt[..., k:, :] - np.matmul(l[..., k:, :], du), u1inv)
            dl = np.concatenate([dl, dl2], axis=-2)
        elif n > m:
            du2 = np.matmul(l1inv, dt[..., :, k:] - np.matmul(dl, u[..., :, k:]))
            du = np.concatenate([du, du2], axis=-1)
        if permute_l:
            return out, (np.matmul(p, dl), du)
        return out, (None if p_indices else np.zeros_like(np.broadcast_to(p, shape_of(du)[:1] +
                                                                          shape_of(p))),
                     dl, du)
    return go(*primals, **kw)


# --- scipy.linalg.solve_banded ---------------------------------------------------------------
def _shift(v, d, axis):
    """``w[j] = v[j + d]`` along ``axis`` (zero where j + d falls outside)."""
    n = shape_of(v)[axis]
    if d == 0:
        return v
    d = max(-n, min(n, d))
    idx = [slice(None)] * len(shape_of(v))
    pad_shape = list(shape_of(v))
    pad_shape[axis] = abs(d)
    z = am.zeros(tuple(pad_shape), dtype=_dtype(v), like=v)
    if d > 0:
        idx[axis] = slice(d, None)
        return np.concatenate([v[tuple(idx)], z], axis=axis)
    idx[axis] = slice(None, n + d)
    return np.concatenate([z, v[tuple(idx)]], axis=axis)


def _band_matmul(ab, x, l, u):
    """A x for the band storage ``ab`` (A_ij = ab[u + i − j, j]) and column stack ``x``."""
    out = None
    for r in range(l + u + 1):
        d = r - u  # the diagonal i − j = d
        term = _shift(np.expand_dims(ab[..., r, :], -1) * x, -d, -2)
        out = _addt(out, term)
    return out


def _band_transpose(ab, l, u):
    """The band storage of Aᵀ, whose band is (u, l): row l + d holds ab[u − d, j + d]."""
    rows = [_shift(ab[..., u + l - r:u + l - r + 1, :], r - l, -1) for r in range(l + u + 1)]
    return np.concatenate(rows, axis=-2)


@primitive
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """Solve ``A x = b`` for a banded ``A`` in diagonal-ordered form, as
    ``scipy.linalg.solve_banded`` (``ab[u + i - j, j] == A[i, j]``), differentiable in ``ab``
    and ``b``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> ab = np.array([[0.0, 1.0, 1.0], [4.0, 4.0, 4.0], [1.0, 1.0, 0.0]])  # l = u = 1
        >>> x = mp.scipy.linalg.solve_banded((1, 1), ab, np.array([5.0, 6.0, 5.0]))
        >>> bool(np.allclose(x, 1.0))
        True
    """
    return _host_sla("mp.scipy.linalg.solve_banded", ab).solve_banded(
        l_and_u, ab, b, overwrite_ab=overwrite_ab, overwrite_b=overwrite_b,
        check_finite=check_finite)


@rrule(solve_banded, needs=True)
def _solve_banded(needs, l_and_u, ab, b, overwrite_ab=False, overwrite_b=False,
                  check_finite=True):
    l, u = (int(v) for v in l_and_u)
    x = solve_banded((l, u), ab, b, check_finite=check_finite)
    vec = len(shape_of(b)) == 1

    def pullback(g):
        gb = solve_banded((u, l), _band_transpose(ab, l, u), g, check_finite=False)
        gab = None
        if len(needs) > 1 and needs[1]:
            gbm, xm = _cols(gb, vec), _cols(x, vec)
            # Ā = −b̄ xᵀ on the band: ab̄[r, j] = −Σ_k b̄[j + r − u, k] x[j, k]
            gab = np.stack([-np.sum(_shift(gbm, r - u, -2) * xm, axis=-1)
                            for r in range(l + u + 1)], axis=-2)
        return _pad(needs, None, gab, gb if len(needs) > 2 and needs[2] else None)
    return x, pullback


@frule(solve_banded)
def _solve_banded_f(primals, tangents, **kw):
    dab, db = _tan(tangents, 1), _tan(tangents, 2)

    def go(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
        l, u = (int(v) for v in l_and_u)
        x = solve_banded((l, u), ab, b, check_finite=check_finite)
        vec = len(shape_of(b)) == 1
        rhs = None if db is None else _cols(db, vec)
        if dab is not None:
            rhs = _addt(rhs, -_band_matmul(dab, _cols(x, vec), l, u))
        return x, _uncols(solve_banded((l, u), ab, rhs, check_finite=False), vec)
    return go(*primals, **kw)


# eig and eigvals take and give complex values with the rules above (explicit: they conjugate
# where the inner product asks); every other rule here refuses complex values.

declare_complex(np.linalg.eig, holomorphic=False)
declare_complex(np.linalg.qr, holomorphic=False)
declare_complex(np.linalg.lstsq, holomorphic=False)
declare_complex(np.linalg.eigvals, holomorphic=False)
# Complex-differentiable (their rules are algebraic formulas; the tape conjugates around them).
# The square root of a real matrix with negative eigenvalues is complex: fine, it is the same
# analytic function. qr and lstsq (conjugate transposes) refuse complex values.
for _fn in (expm, logm, sqrtm, solve_sylvester, lu, solve_banded):
    declare_complex(_fn, holomorphic=True)
