"""Differentiable mirror of ``scipy.linalg``: same names, signatures and outputs.

Called on plain arrays each function goes straight to SciPy. Called on tracked or dual values
it uses rules (``lu``, ``expm``, ``sqrtm``, ``solve_sylvester``, ``solve_banded``,
``solve_triangular``, ``cho_solve``) or an implementation made of ruled NumPy calls (``solve``,
``inv``, ``det``, ``cholesky``, ``cho_factor``, ``qr``, ``eigh``, ``eigvalsh``), so gradients,
HVPs and Hessians flow. Leading axes are a batch, as in SciPy.

Where SciPy reads only one triangle of a matrix (``cholesky``, ``cho_factor``, ``eigh`` and
``solve``/``inv`` with ``assume_a='sym'``/``'pos'``), the derivative is with respect to the
entries read, as finite differences see it: the other triangle gets a zero cotangent, as with
NumPy's ``cholesky``/``eigh`` rules (docs/conventions.md). SciPy itself is
imported on first use. ``mooncake_py.linalg`` is this module.

Example:
    >>> import numpy as np
    >>> import mooncake_py as mp
    >>> from mooncake_py.scipy import linalg
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> mp.grad(lambda a: linalg.det(a))(A)
    array([[ 3., -1.],
           [-1.,  4.]])
"""
import numpy as np

from ..errors import MissingRuleError
from ..rules.broadcasting import shape_of
from ..rules.decompositions import expm, logm, lu, solve_banded, solve_sylvester, sqrtm
from ..rules.linear_algebra import _mT, _sla, cho_solve, solve_triangular
from ..rules.registry import composite, primitive, zero_derivative

__all__ = ["solve", "solve_triangular", "solve_banded", "solve_sylvester",
           "solve_continuous_lyapunov", "cholesky", "cho_factor", "cho_solve", "inv", "det",
           "qr", "lu", "lu_factor", "lu_solve", "eigh", "eigvalsh", "svd", "svdvals", "pinv",
           "norm", "expm", "logm", "sqrtm", "block_diag"]


def _scipy():
    sla = _sla()
    if sla is None:  # pragma: no cover
        raise ImportError("mooncake_py.scipy.linalg needs scipy")
    return sla


def _from_triangle(a, lower):
    """The symmetric matrix that ``a``'s lower (or upper) triangle stands for."""
    if lower:
        return np.tril(a) + _mT(np.tril(a, -1))
    return np.triu(a) + _mT(np.triu(a, 1))


_SYM = ("sym", "symmetric", "her", "hermitian", "pos", "positive definite")
_GEN = (None, "gen", "general", "banded")
_STRUCTURED = _SYM + _GEN + ("diagonal", "tridiagonal", "upper triangular", "lower triangular")


def _structured(a, assume_a, lower, fn):
    """The matrix SciPy's solver for ``assume_a`` actually reads from ``a``."""
    if assume_a not in _STRUCTURED:
        raise ValueError(f"{fn}: {assume_a!r} is not a recognized matrix structure")
    if assume_a in _SYM:
        return _from_triangle(a, lower)
    if assume_a == "diagonal":
        return np.tril(np.triu(a))
    if assume_a == "tridiagonal":
        return np.tril(np.triu(a, -1), 1)
    if assume_a == "upper triangular":
        return np.triu(a)
    if assume_a == "lower triangular":
        return np.tril(a)
    # None (SciPy detects a structure from the values) and 'banded': any perturbation of the
    # entries moves the detected structure to the general one, whose derivative this is.
    return a


# --- solve, inv, det --------------------------------------------------------------------------
@primitive
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
    """Solve ``a @ x = b`` (``a.T @ x = b`` with ``transposed``), as ``scipy.linalg.solve``;
    differentiable in ``a`` and ``b``. ``b`` is a vector when 1-D, else a (stack of) matrices.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
        >>> mp.grad(lambda b: np.sum(mp.scipy.linalg.solve(A, b, assume_a="pos")))(np.ones(2))
        array([0.4, 0.2])
    """
    return _scipy().solve(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                          check_finite=check_finite, assume_a=assume_a, transposed=transposed)


@composite(solve)
def _solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
           assume_a=None, transposed=False):
    m = _structured(a, assume_a, lower, "scipy.linalg.solve")
    return np.linalg.solve(_mT(m) if transposed else m, b)


@primitive
def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """The inverse of a (stack of) square matrices, as ``scipy.linalg.inv``; differentiable.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: np.trace(mp.scipy.linalg.inv(a)))(np.eye(2) * 2)
        array([[-0.25, -0.  ],
               [-0.  , -0.25]])
    """
    return _scipy().inv(a, overwrite_a=overwrite_a, check_finite=check_finite,
                        assume_a=assume_a, lower=lower)


@composite(inv)
def _inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    return np.linalg.inv(_structured(a, assume_a, lower, "scipy.linalg.inv"))


@primitive
def det(a, overwrite_a=False, check_finite=True):
    """The determinant of a (stack of) square matrices, as ``scipy.linalg.det``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: mp.scipy.linalg.det(a))(np.diag([2.0, 3.0]))
        array([[3., 0.],
               [0., 2.]])
    """
    return _scipy().det(a, overwrite_a=overwrite_a, check_finite=check_finite)


@composite(det)
def _det(a, overwrite_a=False, check_finite=True):
    return np.linalg.det(a)


# --- Cholesky ---------------------------------------------------------------------------------
@primitive
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of a symmetric positive definite matrix, as
    ``scipy.linalg.cholesky``: **upper** ``U`` with ``a = U.T @ U`` by default (``lower=True``:
    ``L`` with ``a = L @ L.T``). Only that triangle of ``a`` is read; differentiable.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[4.0, 2.0], [2.0, 5.0]])
        >>> mp.scipy.linalg.cholesky(A)
        array([[2., 1.],
               [0., 2.]])
        >>> # log det(A) / 2; only the upper triangle is read, so it carries the whole gradient
        >>> mp.grad(lambda a: np.sum(np.log(np.diagonal(mp.scipy.linalg.cholesky(a)))))(A)
        array([[ 0.15625, -0.125  ],
               [ 0.     ,  0.125  ]])
    """
    return _scipy().cholesky(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)


@composite(cholesky)
def _cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    return np.linalg.cholesky(_from_triangle(a, lower), upper=not lower)


@primitive
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` for :func:`cho_solve`, as ``scipy.linalg.cho_factor``: ``c`` holds the
    Cholesky factor in its ``lower`` (default: upper) triangle and ``a``'s entries in the other.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import linalg
        >>> A = np.array([[4.0, 2.0], [2.0, 5.0]])
        >>> f = lambda a: np.sum(linalg.cho_solve(linalg.cho_factor(a), np.ones(2)))
        >>> bool(np.allclose(mp.grad(f)(A), mp.grad(lambda a: np.sum(linalg.solve(a, np.ones(2),
        ...                                                 assume_a="pos")))(A)))
        True
    """
    return _scipy().cho_factor(a, lower=lower, overwrite_a=overwrite_a,
                               check_finite=check_finite)


@composite(cho_factor)
def _cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    f = np.linalg.cholesky(_from_triangle(a, lower), upper=not lower)
    rest = np.triu(a, 1) if lower else np.tril(a, -1)
    return f + rest, lower


# --- QR ---------------------------------------------------------------------------------------
_QR_MODES = {"full": "complete", "economic": "reduced"}


@primitive
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """QR decomposition, as ``scipy.linalg.qr``: ``(Q, R)`` with ``mode='full'`` (Q square) or
    ``'economic'`` (Q with min(m, n) columns), ``(R,)`` with ``mode='r'``. Differentiable where
    the leading min(m, n) columns of ``a`` are independent (``pivoting=True`` and
    ``mode='raw'`` are not differentiated).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> a = np.array([[3.0, 1.0], [4.0, 2.0]])
        >>> mp.grad(lambda a: mp.scipy.linalg.qr(a, mode="r")[0][0, 0])(a).round(12)
        array([[-0.6,  0. ],
               [-0.8,  0. ]])
    """
    return _scipy().qr(a, overwrite_a=overwrite_a, lwork=lwork, mode=mode, pivoting=pivoting,
                       check_finite=check_finite)


@composite(qr)
def _qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    if pivoting or mode not in ("full", "economic", "r"):
        raise MissingRuleError(
            f"scipy.linalg.qr(..., mode={mode!r}, pivoting={pivoting}) is not differentiated "
            "by mooncake_py; use mode='full', 'economic' or 'r' without pivoting.")
    batched = len(shape_of(a)) > 2  # SciPy's batched qr returns a list, or R alone for 'r'
    if mode == "r":
        r = np.linalg.qr(a, "complete")[1]
        return r if batched else (r,)
    q, r = np.linalg.qr(a, _QR_MODES[mode])
    return [q, r] if batched else (q, r)


# --- eigh -------------------------------------------------------------------------------------
@zero_derivative
def _eigh_signs(v, a, b, lower, subset_by_index, driver):
    """±1 per column: the signs that turn NumPy's eigenvectors into SciPy's (their drivers
    differ), computed on the values (a constant). SciPy's signs are LAPACK's choice and may
    jump under tiny perturbations; differentiate functions that do not see them."""
    _w_s, v_s = _scipy().eigh(a, b, lower=lower, subset_by_index=subset_by_index, driver=driver)
    s = np.sign(np.sum(v * v_s, axis=-2, keepdims=True))
    return np.where(s == 0, 1.0, s).astype(v.dtype)


def _subset(x, subset_by_index, axis):
    if subset_by_index is None:
        return x
    lo, hi = (int(i) for i in subset_by_index)
    idx = [slice(None)] * len(shape_of(x))
    idx[axis] = slice(lo, hi + 1)
    return x[tuple(idx)]


@primitive
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix, or of the generalized
    problem ``a v = w b v`` (``type=1``), as ``scipy.linalg.eigh``. Differentiable in ``a``
    and ``b`` for distinct eigenvalues; ``subset_by_index=[lo, hi]`` and ``eigvals_only`` too.
    Only the ``lower`` (default) triangle is read.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> A = np.array([[2.0, 1.0], [1.0, 2.0]])
        >>> mp.grad(lambda a: mp.scipy.linalg.eigh(a, eigvals_only=True)[1])(A)
        array([[0.5, 0. ],
               [1. , 0.5]])
    """
    return _scipy().eigh(a, b, lower=lower, eigvals_only=eigvals_only, overwrite_a=overwrite_a,
                         overwrite_b=overwrite_b, type=type, check_finite=check_finite,
                         subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                         driver=driver)


@composite(eigh)
def _eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
          type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    if subset_by_value is not None or type != 1:
        raise MissingRuleError("scipy.linalg.eigh: subset_by_value and type=2, 3 are not "
                               "differentiated by mooncake_py; use subset_by_index.")
    m = _from_triangle(a, lower)
    if b is not None:
        # a v = w b v with b = L Lᵀ: the symmetric problem C u = w u, C = L⁻¹ a L⁻ᵀ, v = L⁻ᵀ u.
        fl = np.linalg.cholesky(_from_triangle(b, lower))
        z = solve_triangular(fl, m, lower=True)
        m = solve_triangular(fl, _mT(z), lower=True)
        m = (m + _mT(m)) / 2
    if eigvals_only:
        return _subset(np.linalg.eigvalsh(m), subset_by_index, -1)
    w, v = np.linalg.eigh(m)
    if b is not None:
        v = solve_triangular(fl, v, trans=1, lower=True)
    w, v = _subset(w, subset_by_index, -1), _subset(v, subset_by_index, -1)
    v = v * _eigh_signs(v, a, b, lower, subset_by_index, driver)
    return [w, v] if len(shape_of(a)) > 2 else (w, v)  # SciPy's batched eigh returns a list


def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,
             check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """The eigenvalues of :func:`eigh` alone, as ``scipy.linalg.eigvalsh``.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import linalg
        >>> linalg.eigvalsh(np.array([[2.0, 1.0], [1.0, 2.0]]))
        array([1., 3.])
    """
    return eigh(a, b, lower=lower, eigvals_only=True, overwrite_a=overwrite_a,
                overwrite_b=overwrite_b, type=type, check_finite=check_finite,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value, driver=driver)


# --- lu_factor, lu_solve ----------------------------------------------------------------------
@zero_derivative
def _lu_piv(a):
    """LAPACK's pivot indices of ``a``'s LU factorisation (piecewise constant)."""
    return _scipy().lu_factor(a)[1]


def _perm_from_piv(piv):
    """The row order ``perm`` with ``a[perm] = L U``, from LAPACK's sequence of swaps."""
    perm = np.arange(len(piv))
    for i, p in enumerate(np.asarray(piv)):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


def _refuse_batch(fn, a):
    if len(shape_of(a)) != 2:
        raise MissingRuleError(f"scipy.linalg.{fn} is differentiated for one matrix (2-D) only; "
                               "loop over the batch, or use scipy.linalg.solve.")


@primitive
def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)`` for :func:`lu_solve`, as ``scipy.linalg.lu_factor``: L's strict lower
    triangle and U in one matrix, and LAPACK's pivots. Differentiable in ``a`` (2-D).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import linalg
        >>> A = np.array([[1.0, 2.0], [3.0, 4.0]])
        >>> f = lambda a: np.sum(linalg.lu_solve(linalg.lu_factor(a), np.ones(2)))
        >>> bool(np.allclose(mp.grad(f)(A), mp.grad(lambda a: np.sum(np.linalg.solve(a,
        ...                                                          np.ones(2))))(A)))
        True
    """
    return _scipy().lu_factor(a, overwrite_a=overwrite_a, check_finite=check_finite)


@composite(lu_factor)
def _lu_factor(a, overwrite_a=False, check_finite=True):
    _refuse_batch("lu_factor", a)
    _, l, u = lu(a)
    return np.tril(l, -1) + u, _lu_piv(a)


@primitive
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` (``trans=1``: ``aᵀ x = b``) from :func:`lu_factor`'s output, as
    ``scipy.linalg.lu_solve``; differentiable in ``lu`` and ``b``.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import linalg
        >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
        >>> linalg.lu_solve(linalg.lu_factor(A), np.array([3.0, 4.0]))
        array([1., 1.])
    """
    return _scipy().lu_solve(lu_and_piv, b, trans=trans, overwrite_b=overwrite_b,
                             check_finite=check_finite)


@composite(lu_solve)
def _lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    c, piv = lu_and_piv
    _refuse_batch("lu_solve", c)
    perm = _perm_from_piv(piv)
    unit = {"lower": True, "unit_diagonal": True}  # L: c's strict lower triangle and ones
    if trans in (0, "N"):
        return solve_triangular(c, solve_triangular(c, b[perm], **unit))
    y = solve_triangular(c, solve_triangular(c, b, trans=1), trans=1, **unit)
    return y[np.argsort(perm)]


# --- svd, svdvals, pinv, norm -----------------------------------------------------------------
@primitive
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
        lapack_driver="gesdd"):
    """Singular value decomposition, as ``scipy.linalg.svd``; differentiated through
    ``np.linalg.svd``'s rule (the same LAPACK driver, gesdd; ``lapack_driver='gesvd'`` is
    differentiated too, through gesdd's factors with SciPy's signs).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: mp.scipy.linalg.svd(a, compute_uv=False)[0])(np.diag([3.0, 1.0]))
        array([[1., 0.],
               [0., 0.]])
    """
    return _scipy().svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                        overwrite_a=overwrite_a, check_finite=check_finite,
                        lapack_driver=lapack_driver)


@zero_derivative
def _svd_signs(u, a, full_matrices, lapack_driver):
    """±1 per column of U turning NumPy's (gesdd) factors into SciPy's for ``lapack_driver``."""
    u_s = _scipy().svd(a, full_matrices=full_matrices, lapack_driver=lapack_driver)[0]
    sg = np.sign(np.sum(u * u_s, axis=-2, keepdims=True))
    return np.where(sg == 0, 1.0, sg).astype(u.dtype)


@composite(svd)
def _svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
         lapack_driver="gesdd"):
    if not compute_uv:
        return np.linalg.svd(a, compute_uv=False)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    if lapack_driver != "gesdd":
        sg = _svd_signs(u, a, full_matrices, lapack_driver)
        k = shape_of(s)[-1]
        u = u * sg
        vh = vh * np.swapaxes(sg[..., :k], -1, -2) if shape_of(vh)[-2] == k else np.concatenate(
            [vh[..., :k, :] * np.swapaxes(sg[..., :k], -1, -2), vh[..., k:, :]], axis=-2)
    return u, s, vh


@primitive
def svdvals(a, overwrite_a=False, check_finite=True):
    """The singular values, as ``scipy.linalg.svdvals``; differentiable (U diag(s̄) Vᵀ).

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import linalg
        >>> linalg.svdvals(np.diag([1.0, 3.0]))
        array([3., 1.])
    """
    return _scipy().svdvals(a, overwrite_a=overwrite_a, check_finite=check_finite)


@composite(svdvals)
def _svdvals(a, overwrite_a=False, check_finite=True):
    return np.linalg.svd(a, compute_uv=False)


@primitive
def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    """The Moore-Penrose pseudo-inverse, as ``scipy.linalg.pinv`` (singular values above
    ``atol + rtol·σ_max`` kept); differentiable where the rank does not change.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: np.sum(mp.scipy.linalg.pinv(a)))(np.array([[2.0], [0.0]]))
        array([[-0.25],
               [ 0.25]])
    """
    return _scipy().pinv(a, atol=atol, rtol=rtol, return_rank=return_rank,
                         check_finite=check_finite)


@composite(pinv)
def _pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    m, n = shape_of(a)[-2:]
    atol = 0.0 if atol is None else atol
    if rtol is None:
        rtol = max(m, n) * np.finfo(s.dtype).eps if atol == 0 else 0.0
    smax = np.max(s, axis=-1, keepdims=True)
    keep = s > atol + rtol * smax        # comparisons carry no tangent: the cutoff is constant
    s_inv = np.where(keep, 1 / np.where(keep, s, 1), 0)
    b = np.matmul(_mT(vh) * np.expand_dims(s_inv, -2), _mT(u))
    if return_rank:
        return b, np.sum(keep, axis=-1)
    return b


@primitive
def norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    """A vector or matrix norm, as ``scipy.linalg.norm``: ``np.linalg.norm``'s rule, every
    ``ord`` (``fro``, ``nuc``, ±1, ±2, ±inf; vector p).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda a: mp.scipy.linalg.norm(a, "nuc"))(np.diag([2.0, -1.0]))
        array([[ 1.,  0.],
               [ 0., -1.]])
    """
    return _scipy().norm(a, ord=ord, axis=axis, keepdims=keepdims, check_finite=check_finite)


@composite(norm)
def _norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    return np.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims)


# --- Lyapunov, block_diag ---------------------------------------------------------------------
@primitive
def solve_continuous_lyapunov(a, q):
    """Solve ``a x + x aᴴ = q``, as ``scipy.linalg.solve_continuous_lyapunov``; differentiable
    in ``a`` and ``q`` (a Sylvester equation with b = aᴴ).

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import linalg
        >>> linalg.solve_continuous_lyapunov(np.diag([-1.0, -2.0]), -np.eye(2))
        array([[0.5 , 0.  ],
               [0.  , 0.25]])
    """
    return _scipy().solve_continuous_lyapunov(a, q)


@composite(solve_continuous_lyapunov)
def _solve_continuous_lyapunov(a, q):
    return solve_sylvester(a, np.conjugate(_mT(a)), q)


@primitive
def block_diag(*arrs):
    """The block-diagonal matrix of the given arrays, as ``scipy.linalg.block_diag``
    (scalars and 1-D arrays are single rows); differentiable in every block.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import linalg
        >>> linalg.block_diag(np.ones((1, 2)), 2.0)
        array([[1., 1., 0.],
               [0., 0., 2.]])
    """
    return _scipy().block_diag(*arrs)


@composite(block_diag)
def _block_diag(*arrs):
    if not arrs:
        return _scipy().block_diag()
    mats = [np.reshape(a, (1, -1)) if len(shape_of(a)) < 2 else a for a in arrs]
    if any(len(shape_of(m)) > 2 for m in mats):
        raise ValueError("arguments in the following positions have dimension greater than 2")
    cols = sum(shape_of(m)[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        r, c = shape_of(m)
        dt = np.result_type(*[getattr(x, "dtype", np.float64) for x in mats])
        pieces = [p for p in (np.zeros((r, left), dt), m, np.zeros((r, cols - left - c), dt))
                  if p.shape[1] or p is m]
        rows.append(np.concatenate(pieces, axis=1) if len(pieces) > 1 else m)
        left += c
    return np.concatenate(rows, axis=0)
