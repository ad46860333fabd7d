"""BLAS paths of the Cholesky rules for plain float32/float64 NumPy matrices: the pullback's
cotangent (gradients), the tangent of the factor (``np.linalg.cholesky`` on duals) and the
tangent of the pullback's cotangent (``_cholesky_cotangent`` on duals, i.e. the Cholesky part
of every HVP).

Both are sequences of triangular products and solves with one factor ``L``. Written through the
general rules, each step is a lane-aware NumPy expression with its own temporaries, transposed
copies and symmetrisations; here each step is one BLAS call that writes into a buffer the
sequence owns (``overwrite_b``), scalings ride on BLAS's ``alpha``, and the few O(n²) passes left
are the masks and the final symmetrisations.

The tangents multiply by an explicit L⁻¹ (trtri) instead of solving: OpenBLAS's trmm costs
half a trsm at n ≈ 100-300, and an HVP computes L⁻¹ once, in the factor's tangent, and reuses
it in its reverse sweep (see ``_LAST_INVERSE``). The triangular inverse is as accurate as the
solves here, also for kernel matrices of condition ~1e11 (tests/test_cholesky_blas.py). Above
``CACHE_MAX_SIZE`` entries, where trsm runs as fast as trmm, the tangents solve again.

Layout: every matrix is a C-ordered NumPy array, which BLAS (Fortran) reads as its transpose
for free, so ``op(T) @ X`` is computed as ``Xᵀ op(T)ᵀ``. Functions return None where their
operands are not plain C-contiguous-capable float matrices of one dtype; the callers then take
their general path.
"""
import weakref

import numpy as np

from ..core.blas_threads import small as small_blas

# Below this many rows the general path stays: SciPy's per-call cost (~3 µs a routine) is then
# more than what the fused sequence saves.
MIN_N = 16

_ROUTINES = {}  # (name, dtype char) -> SciPy routine, None when SciPy is missing


def _routine(name, char):
    """SciPy's BLAS or LAPACK routine ``name`` for dtype char ``char`` ("f" or "d"), None
    without SciPy (imported on first use; linear_algebra's BLAS calls look up here too)."""
    key = (name, char)
    fn = _ROUTINES.get(key, False)
    if fn is False:
        try:
            from scipy.linalg import blas, lapack
        except ImportError:  # pragma: no cover
            fn = None
        else:
            prefixed = {"f": "s", "d": "d"}[char] + name
            fn = getattr(blas, prefixed, None) or getattr(lapack, prefixed, None)
        _ROUTINES[key] = fn
    return fn


def _plain(x, n, dt, lanes):
    """Whether ``x`` is a plain array of dtype ``dt`` shaped (n, n), or (k, n, n) if ``lanes``."""
    return type(x) is np.ndarray and x.dtype == dt and x.ndim == 2 + lanes \
        and x.shape[-2:] == (n, n)


class _Lower:
    """BLAS products and solves with one lower-triangular ``L`` (its upper triangle is not
    read), for C-ordered right-hand sides; results are C-ordered unless said otherwise."""
    __slots__ = ("f", "trmm", "trsm")

    def __init__(self, L, char):
        self.f = np.ascontiguousarray(L).T  # the Fortran matrix Lᵀ: upper triangular
        self.trmm, self.trsm = _routine("trmm", char), _routine("trsm", char)

    def t_times(self, x, alpha=1.0, mine=False):
        """``alpha Lᵀ x``; ``mine``: x is a fresh C-ordered buffer the result may overwrite."""
        # (Lᵀ x)ᵀ = xᵀ L: the Fortran xᵀ times (Lᵀ)ᵀ from the right
        return self.trmm(alpha, self.f, x.T, side=1, lower=0, trans_a=1,
                         overwrite_b=int(mine)).T

    def times(self, x, alpha=1.0, mine=False):
        """``alpha L x``."""
        return self.trmm(alpha, self.f, x.T, side=1, lower=0, trans_a=0,
                         overwrite_b=int(mine)).T

    def right_times(self, x, alpha=1.0, mine=False):
        """``alpha x L``."""
        return self.trmm(alpha, self.f, x.T, side=0, lower=0, trans_a=0,
                         overwrite_b=int(mine)).T

    def right_t_times(self, x, alpha=1.0, mine=False):
        """``alpha x Lᵀ``."""
        return self.trmm(alpha, self.f, x.T, side=0, lower=0, trans_a=1,
                         overwrite_b=int(mine)).T

    def solve(self, x, alpha=1.0, mine=False):
        """``alpha L⁻¹ x``."""
        # (L⁻¹ x)ᵀ = xᵀ L⁻ᵀ: right-sided, as below
        return self.trsm(alpha, self.f, x.T, side=1, lower=0, trans_a=0,
                         overwrite_b=int(mine)).T

    def t_solve(self, x, alpha=1.0, mine=False):
        """``alpha L⁻ᵀ x``."""
        # (L⁻ᵀ x)ᵀ = xᵀ L⁻¹: a right-sided solve, the fast side of OpenBLAS's trsm
        return self.trsm(alpha, self.f, x.T, side=1, lower=0, trans_a=1,
                         overwrite_b=int(mine)).T

    def solve_right(self, x, alpha=1.0):
        """``alpha x L⁻¹``, Fortran-ordered (as :meth:`solve_right_t`; a Fortran-ordered ``x``
        is overwritten)."""
        return self.trsm(alpha, self.f, np.asfortranarray(x), side=1, lower=0, trans_a=1,
                         overwrite_b=1)

    def solve_right_t(self, x, alpha=1.0):
        """``alpha x L⁻ᵀ``, Fortran-ordered: x is copied into Fortran order so that the solve
        is right-sided (a transposing copy costs less than OpenBLAS's left-sided trsm); a
        Fortran-ordered ``x`` is overwritten."""
        return self.trsm(alpha, self.f, np.asfortranarray(x), side=1, lower=0, trans_a=0,
                         overwrite_b=1)


def _lower_inverse(L, char):
    """L⁻¹ (C-ordered, lower) by LAPACK trtri, or None if it reports a zero diagonal."""
    inv, info = _routine("trtri", char)(np.ascontiguousarray(L).T, lower=0)
    return inv.T if info == 0 else None


# The inverse of the last factor whose tangent was taken: an HVP takes the factor's tangent in
# its forward pass and the cotangent's tangent, with the same L, in its reverse sweep; the
# second reuses the first one's trtri (a quarter of its BLAS time at n = 128). One entry:
# (weak reference to L, a copy of L's values, L⁻¹). It is used only for the very object it was
# made from and only while that still holds the copied values, so a factor written into in
# between (a tracked write, or a user's) gets a fresh inverse: the cache is never stale.
_LAST_INVERSE = [None]
# Factors above this many entries are not remembered (the copy and the inverse stay alive as
# long as the factor does).
CACHE_MAX_SIZE = 512 * 512


def _forget(ref):
    entry = _LAST_INVERSE[0]
    if entry is not None and entry[0] is ref:
        _LAST_INVERSE[0] = None


def _remember_inverse(L, inv):
    if L.size <= CACHE_MAX_SIZE:
        _LAST_INVERSE[0] = (weakref.ref(L, _forget), L.copy(), inv)


def _inverse(L, char):
    """L⁻¹: the remembered one if it was made from this very array and its values are
    unchanged, else by trtri (None for a zero diagonal)."""
    entry = _LAST_INVERSE[0]
    if entry is not None and entry[0]() is L and np.array_equal(entry[1], L):
        return entry[2]
    return _lower_inverse(L, char)


def _check(L, gL, dL, dg):
    """The dtype char when the cotangent's operands suit :func:`cotangent_and_tangent`."""
    if type(L) is not np.ndarray or L.ndim != 2:
        return None
    n, dt = L.shape[0], L.dtype
    if dt.char not in "fd" or L.shape[1] != n or n < MIN_N or not _plain(gL, n, dt, False):
        return None
    if L.size > CACHE_MAX_SIZE:  # (large: trsm is as fast as trmm, trtri would be extra)
        return None
    if dL is None and dg is None:
        return None
    if dL is not None and not _plain(dL, n, dt, True) or \
            dg is not None and not _plain(dg, n, dt, True):
        return None
    if dL is not None and dg is not None and dL.shape[0] != dg.shape[0]:
        return None
    return dt.char if _routine("trtri", dt.char) is not None else None


def cotangent(L, gL, mask):
    """``Ā = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)`` (the Cholesky pullback, gradients) for a plain float
    factor ``L`` and cotangent ``gL`` of one dtype, by trmm and two trsm in owned buffers,
    ``mask`` as in :func:`cotangent_and_tangent`; None for other operands. The BLAS calls are
    those of the general path (the same numbers); sym's halving rides on a solve's alpha.

    Example:
        >>> L = np.linalg.cholesky(np.eye(20) * 4.0)
        >>> float(cotangent(L, np.eye(20), np.tri(20) - np.eye(20) / 2)[0, 0])
        0.25
    """
    if type(L) is not np.ndarray or L.ndim != 2:
        return None
    n, dt = L.shape[0], L.dtype
    if dt.char not in "fd" or L.shape[1] != n or n < MIN_N or not _plain(gL, n, dt, False) \
            or _routine("trsm", dt.char) is None:
        return None
    with small_blas(L, lib="scipy"):
        lo = _Lower(L, dt.char)
        p = lo.t_times(gL)
        p *= mask
        s = lo.solve_right(lo.t_solve(p, mine=True), 0.5)
        return np.add(s, s.T, out=np.empty((n, n), dt))


def factor(a):
    """``np.linalg.cholesky(a)`` for a plain float32/float64 matrix of :data:`MIN_N` to
    :data:`CACHE_MAX_SIZE` entries, by SciPy's LAPACK potrf on a copy; None for other operands
    and wherever NumPy's own call must decide (a matrix potrf finds not positive definite, or a
    factor with a non-finite diagonal), so that NumPy's errors and results stay NumPy's.

    NumPy's call costs twice the factorisation at n = 128 (~100 µs against potrf's ~50: it
    copies into and out of its own Fortran layout); here the C-ordered copy is read in place as
    the Fortran upper factor's storage (the upper triangle of aᵀ is the lower triangle of a,
    which NumPy reads), so the result lands in C order. Its values agree with NumPy's to
    rounding (another LAPACK build, the transposed variant of one algorithm), not bitwise.

    Example:
        >>> float(factor(np.eye(20) * 4.0)[3, 3])
        2.0
    """
    if type(a) is not np.ndarray or a.ndim != 2:
        return None
    n, dt = a.shape[0], a.dtype
    if n < MIN_N or a.shape[1] != n or dt.char not in "fd" or a.size > CACHE_MAX_SIZE:
        return None
    potrf = _routine("potrf", dt.char)
    if potrf is None:
        return None
    buf = a.copy()
    with small_blas(a, lib="scipy"):
        # clean=1: the wrapper zeroes the other triangle (what lay above the diagonal: a's own
        # entries) in the loop that follows potrf, where a masked copy afterwards is one more
        # pass over n² entries (~7 µs at n = 128, more once the matrix has left the cache)
        c, info = potrf(buf.T, lower=0, clean=1, overwrite_a=1)
    L = c.T
    if info != 0 or not np.isfinite(np.diagonal(L)).all():
        return None
    return L


# Factors above this many rows take the blocked pullback (:func:`lower_cotangent`); its
# diagonal blocks of at most this many rows take the formula of :func:`cotangent`.
BLOCK = 64

_MASKS = {}  # Φ's masks by (n, dtype), read-only: rebuilding one costs as much as a small solve


def phi_mask(n, dt):
    """The host mask of Φ (the lower triangle, its diagonal halved) for n×n of dtype ``dt``,
    made once and read-only.

    Example:
        >>> phi_mask(2, np.dtype(np.float64))
        array([[0.5, 0. ],
               [1. , 0.5]])
    """
    key = (n, dt)
    m = _MASKS.get(key)
    if m is None:
        m = np.tri(n, dtype=dt) - np.eye(n, dtype=dt) / 2
        m.flags.writeable = False
        _MASKS[key] = m
    return m


def lower_cotangent(L, gL):
    """``Ā = M ∘ sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)``, the cotangent of the lower triangle of A that the
    factorisation reads (M: 2 below the diagonal, 1 on it, 0 above; what
    ``_plain_cholesky_cotangent`` returns), for a plain float factor ``L`` of more than
    :data:`BLOCK` rows and a cotangent ``gL`` of its dtype (upper triangle not read); None for
    other operands, which take :func:`cotangent`.

    The formula's products and solves, skipping what is known to be zero: with L and L̄ split
    in 2 x 2 blocks, P = Φ(Lᵀ L̄) is lower triangular, so only its three lower blocks are
    formed (P₁₁ = Φ(L₁₁ᵀ L̄₁₁ + L₂₁ᵀ L̄₂₁), P₂₁ = L₂₂ᵀ L̄₂₁, P₂₂ = Φ(L₂₂ᵀ L̄₂₂)), and Q = P L⁻¹
    is lower triangular too, solved by blocks (Q₂₂ = P₂₂ L₂₂⁻¹, Q₂₁ = (P₂₁ - Q₂₂ L₂₁) L₁₁⁻¹,
    Q₁₁ = P₁₁ L₁₁⁻¹: block substitution, as a triangular solve runs it). Then Z = L⁻ᵀ Q by one
    solve and Ā = Φ(Z + Zᵀ) (Φ's halved diagonal is M's 1). 1.7n³ flops against the whole
    matrices' 3n³ (at n = 128 one thread: ~245 against ~315 µs). Against a long-double
    reference the error is that of the formula on well-conditioned factors and 2-4x it on
    kernel matrices of condition 1e4-1e9 (solving from the right first, which Q's triangle
    needs, is what costs the factor: the formula's own solves in that order measure the same),
    the bound the L⁻¹ tangents of :func:`cotangent_and_tangent` keep too.

    (Reversing the factorisation by blocks, rev(L₁₁, L̄₁₁ - Ā₂₁ᵀ L₂₁) after the trailing block,
    costs 1.4n³ but forms intermediates as large as the product of the blocks' condition
    numbers: 1e-6 relative error where the formula has 1e-12 on a kernel matrix with 1e-9
    noise. Not used.)

    Example:
        >>> L = np.linalg.cholesky(np.eye(80) * 4.0)
        >>> a = lower_cotangent(L, np.eye(80))
        >>> float(a[0, 0]), float(a[79, 79]), float(abs(a).sum())
        (0.25, 0.25, 20.0)
    """
    if type(L) is not np.ndarray or type(gL) is not np.ndarray or L.ndim != 2:
        return None
    n, dt = L.shape[0], L.dtype
    if n <= BLOCK or L.shape[1] != n or dt.char not in "fd" or gL.dtype != dt \
            or gL.shape != (n, n) or _routine("trsm", dt.char) is None:
        return None
    char, h = dt.char, n // 2
    with small_blas(L, lib="scipy"):
        l21 = L[h:, :h]
        g21 = gL[h:, :h]
        lo11, lo22 = _Lower(L[:h, :h], char), _Lower(L[h:, h:], char)
        p11 = lo11.t_times(gL[:h, :h])
        p11 += np.matmul(l21.T, g21)
        p11 *= phi_mask(h, dt)
        p22 = lo22.t_times(gL[h:, h:])
        p22 *= phi_mask(n - h, dt)
        q = np.empty((n, n), dt)
        q[:h, h:] = 0
        q22 = lo22.solve_right(p22)
        q[h:, h:] = q22
        p21 = lo22.t_times(g21)
        p21 -= np.matmul(q22, l21)
        q[h:, :h] = lo11.solve_right(p21)
        q[:h, :h] = lo11.solve_right(p11)
        z = _Lower(L, char).t_solve(q, mine=True)
        out = np.add(z, z.T, out=np.empty((n, n), dt))
        out *= phi_mask(n, dt)
    return out


def cotangent_and_tangent(L, gL, dL, dg, mask):
    """``(Ā, Ā̇)`` of ``Ā = sym(L⁻ᵀ P L⁻¹)``, ``P = Φ(Lᵀ L̄)``, for lane-first tangents ``dL``
    (lower triangle read) and ``dg`` of ``L`` and ``gL`` = L̄ (either may be None), with
    ``mask`` = Φ's lower-triangle mask with halved diagonal; None where the operands are not
    plain float matrices of one dtype.

    With Ṗ = Φ(L̇ᵀ L̄ + Lᵀ L̄̇):  Ā̇ = sym((L⁻ᵀ Ṗ - 2 Ā L̇) L⁻¹).
    The four solves multiply by L⁻¹ (one trtri, then trmm at half the cost of a trsm each:
    ~0.8x the sequence's time at n = 128); the explicit triangular inverse is as accurate
    as the solves here, also for factors of kernel matrices with condition ~1e11 (tested).

    Example:
        >>> L = np.linalg.cholesky(np.eye(20) * 4.0)
        >>> mask = np.tri(20) - np.eye(20) / 2
        >>> abar, t = cotangent_and_tangent(L, np.eye(20), None, np.eye(20)[None], mask)
        >>> float(abar[0, 0]), float(t[0, 0, 0])
        (0.25, 0.25)
    """
    char = _check(L, gL, dL, dg)
    if char is None:
        return None
    with small_blas(L, lib="scipy"):
        inv = _inverse(L, char)
        if inv is None:
            return None
        lo, li = _Lower(L, char), _Lower(inv, char)
        p = lo.t_times(gL)
        p *= mask
        s = li.right_times(li.t_times(p, mine=True), 0.5, mine=True)
        abar = np.add(s, s.T, out=np.empty_like(s, order="C"))  # sym(S): ½ rode on alpha
        k = (dL if dL is not None else dg).shape[0]
        out = np.empty((k,) + L.shape, L.dtype)
        for i in range(k):
            dp = None if dL is None else _Lower(dL[i], char).t_times(gL)
            if dg is not None:
                t = lo.t_times(dg[i])
                dp = t if dp is None else np.add(dp, t, out=dp)
            dp *= mask
            y = li.t_times(dp, mine=True)
            if dL is not None:
                y += _Lower(dL[i], char).right_times(abar, -2.0)
            z = li.right_times(y, 0.5, mine=True)
            np.add(z, z.T, out=out[i])
    return abar, out


def factor_tangent(L, da, mask):
    """L̇ = L Φ(L⁻¹ sym(Ȧ) L⁻ᵀ) for the lower Cholesky factor ``L`` of A and a lane-first
    tangent ``da`` of A, ``mask`` as in :func:`cotangent_and_tangent`; None for operands that
    are not plain float matrices of one dtype.

    sym(Ȧ) is not formed: L⁻¹ sym(Ȧ) L⁻ᵀ = sym(L⁻¹ Ȧ L⁻ᵀ), whose halving rides on a solve's
    alpha, and whose lower triangle is all Φ keeps.

    Example:
        >>> L = np.linalg.cholesky(np.eye(20) * 4.0)
        >>> float(factor_tangent(L, np.eye(20)[None], np.tri(20) - np.eye(20) / 2)[0, 0, 0])
        0.25
    """
    if type(L) is not np.ndarray or L.ndim != 2:
        return None
    n, dt = L.shape[0], L.dtype
    if dt.char not in "fd" or L.shape[1] != n or n < MIN_N or not _plain(da, n, dt, True):
        return None
    char = dt.char
    if _routine("trtri", char) is None:
        return None
    with small_blas(L, lib="scipy"):
        lo, li = _Lower(L, char), None
        if L.size <= CACHE_MAX_SIZE:
            # by L⁻¹ (trtri + two trmm cost what two trsm do at these sizes), which the
            # cotangent's tangent of an HVP then reuses
            inv = _lower_inverse(L, char)
            if inv is None:
                return None
            _remember_inverse(L, inv)
            li = _Lower(inv, char)
        out = np.empty(da.shape, dt)
        for i in range(da.shape[0]):
            if li is not None:
                w = li.right_t_times(li.times(da[i]), 0.5, mine=True)  # ½ L⁻¹ Ȧ L⁻ᵀ
            else:
                w = lo.solve_right_t(lo.solve(da[i]), 0.5)
            z = np.add(w, w.T, out=out[i])
            z *= mask
            r = lo.times(z, mine=True)  # (in place: z is C-ordered, its transpose Fortran)
            if not np.shares_memory(r, z):
                z[...] = r
    return out
