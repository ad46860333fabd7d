"""Differentiable mirror of ``scipy.linalg``: same names, signatures and outputs.

Called on plain arrays each function goes straight to SciPy. Called on tracked or dual values
it uses rules (``lu``, ``expm``, ``sqrtm``, ``solve_sylvester``, ``solve_banded``,
``solve_triangular``, ``cho_solve``) or an implementation made of ruled NumPy calls (``solve``,
``inv``, ``det``, ``cholesky``, ``cho_factor``, ``qr``, ``eigh``, ``eigvalsh``), so gradients,
HVPs and Hessians flow. Leading axes are a batch, as in SciPy.

Where SciPy reads only one triangle of a matrix (``cholesky``, ``cho_factor``, ``eigh`` and
``solve``/``inv`` with ``assume_a='sym'``/``'pos'``), the derivative is with respect to the
entries read, as finite differences see it: the other triangle gets a zero cotangent. On
symmetric directions it agrees with NumPy's rules (symmetric cotangents). SciPy itself is
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
from ..rules.registry import primitive, composite, zero_derivative
from ..rules.broadcasting import shape_of
from ..rules.linear_algebra import solve_triangular, cho_solve, _mT, _sla
from ..rules.decompositions import lu, expm, sqrtm, solve_sylvester, solve_banded

__all__ = ["solve", "solve_triangular", "solve_banded", "solve_sylvester", "cholesky",
           "cho_factor", "cho_solve", "inv", "det", "qr", "lu", "eigh", "eigvalsh", "expm",
           "sqrtm"]


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
    w_s, v_s = _scipy().eigh(a, b, lower=lower, subset_by_index=subset_by_index, driver=driver)
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
