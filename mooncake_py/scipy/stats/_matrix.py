"""Matrix-variate distributions of the stats mirror: wishart and invwishart, with SciPy's
signatures and layout. Both the quantiles and the scale are factored by (batched) Cholesky, so
the log-density is differentiable in ``x``, ``df`` and ``scale``, to second order."""
import numpy as np

from ...rules.broadcasting import shape_of
from ..linalg import solve_triangular
from ..special import multigammaln
from ._base import LOG2, Distribution, arr, tracked
from ._multivariate import _MultivariateFrozen, _plain, _squeeze


def _wishart_params(df, scale):
    scale = arr(1.0 if scale is None else scale)
    nd = len(shape_of(scale))
    if nd == 0:
        scale = np.reshape(scale, (1, 1))
    elif nd == 1:
        scale = scale[:, None] * np.eye(shape_of(scale)[0])
    elif nd == 2 and shape_of(scale)[0] != shape_of(scale)[1]:
        raise ValueError("Array 'scale' must be square if it is two dimensional, but "
                         f"scale.scale = {shape_of(scale)}.")
    elif nd > 2:
        raise ValueError(f"Array 'scale' must be at most two-dimensional, but scale.ndim = "
                         f"{nd}")
    dim = shape_of(scale)[0]
    if df is None:
        df = dim
    elif np.ndim(_plain(df)) != 0:
        raise ValueError("Degrees of freedom must be a scalar.")
    elif _plain(df) <= dim - 1:
        raise ValueError("Degrees of freedom must be greater than the dimension of scale "
                         "matrix minus 1.")
    return dim, df, scale


def _wishart_quantiles(x, dim):
    """SciPy's layout, ``(dim, dim, n)`` with the samples on the last axis, returned as the
    stack ``(n, dim, dim)``."""
    x = arr(x)
    nd = len(shape_of(x))
    if nd == 0:
        x = x * np.eye(dim)[:, :, None]
    elif nd == 1:
        x = (np.reshape(x, (1, 1, -1)) if dim == 1
             else (x[:, None] * np.eye(shape_of(x)[0]))[:, :, None])
    elif nd == 2:
        if shape_of(x)[0] != shape_of(x)[1]:
            raise ValueError("Quantiles must be square if they are two dimensional, but "
                             f"x.shape = {shape_of(x)}.")
        x = x[:, :, None]
    elif nd == 3:
        if shape_of(x)[0] != shape_of(x)[1]:
            raise ValueError("Quantiles must be square in the first two dimensions if they "
                             f"are three dimensional, but x.shape = {shape_of(x)}.")
    else:
        raise ValueError("Quantiles must be at most two-dimensional with an additional "
                         f"dimension for multiple components, but x.ndim = {nd}")
    if shape_of(x)[:2] != (dim, dim):
        raise ValueError("Quantiles have incompatible dimensions: should be "
                         f"{(dim, dim)}, got {shape_of(x)[:2]}.")
    return np.moveaxis(x, -1, 0)


def _chol_logdet(a):
    L = np.linalg.cholesky(a)
    return L, 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


class wishart_gen(Distribution):
    """Wishart, ``wishart.logpdf(x, df, scale)`` with SciPy's layout (``x`` is ``(dim, dim)``
    or ``(dim, dim, n)``, samples on the last axis): differentiable in ``x``, ``df`` and
    ``scale`` (both factored by Cholesky).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> f = lambda s: stats.wishart.logpdf(np.eye(2), 3.0, s * np.eye(2))
        >>> float(mp.grad(f)(1.0))   # -df·dim/(2s) + tr(x)/(2s²)
        -2.0
    """

    def __call__(self, df=None, scale=None, seed=None):
        return _MultivariateFrozen(self, {"df": df, "scale": scale}, seed)

    def _logpdf(self, x, df, scale):
        dim, df, scale = _wishart_params(df, scale)
        xs = _wishart_quantiles(x, dim)
        C, log_det_scale = _chol_logdet(scale)
        Lx, log_det_x = _chol_logdet(xs)
        # tr(scale⁻¹ x) = |C⁻¹ Lx|² with scale = C Cᵀ, x = Lx Lxᵀ
        tr = np.sum(solve_triangular(C, Lx, lower=True) ** 2, axis=(-2, -1))
        out = ((0.5 * (df - dim - 1) * log_det_x - 0.5 * tr)
               - (0.5 * df * dim * LOG2 + 0.5 * df * log_det_scale
                  + multigammaln(0.5 * df, dim)))
        return _squeeze(out)

    def logpdf(self, x, df, scale):
        """Log-density at ``x``; SciPy's signature and layout.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> g = mp.grad(lambda x: stats.wishart.logpdf(x, 4.0, np.eye(2)))(np.eye(2))
            >>> g   # (df - dim - 1)/2·x⁻¹ - scale⁻¹/2
            array([[0., 0.],
                   [0., 0.]])
        """
        if not tracked(x, df, scale):
            return self.scipy.logpdf(x, df, scale)
        return self._logpdf(x, df, scale)

    def pdf(self, x, df, scale):
        """Density at ``x``; SciPy's signature and layout.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> g = mp.grad(lambda x: stats.wishart.pdf(x, 4.0, np.eye(2)))(np.eye(2))
            >>> bool(np.allclose(g, 0.0))
            True
        """
        if not tracked(x, df, scale):
            return self.scipy.pdf(x, df, scale)
        return np.exp(self._logpdf(x, df, scale))


class invwishart_gen(wishart_gen):
    """Inverse Wishart, ``invwishart.logpdf(x, df, scale)`` with SciPy's layout:
    differentiable in ``x``, ``df`` and ``scale``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> f = lambda s: stats.invwishart.logpdf(np.eye(2), 3.0, s * np.eye(2))
        >>> float(mp.grad(f)(1.0))   # df·dim/(2s) - tr(x⁻¹)/2
        2.0
    """

    def _logpdf(self, x, df, scale):
        dim, df, scale = _wishart_params(df, scale)
        xs = _wishart_quantiles(x, dim)
        C, log_det_scale = _chol_logdet(scale)
        Lx, log_det_x = _chol_logdet(xs)
        # tr(scale x⁻¹) = |Lx⁻¹ C|²
        tr = np.sum(solve_triangular(Lx, np.broadcast_to(C, shape_of(Lx)), lower=True) ** 2,
                    axis=(-2, -1))
        out = ((0.5 * df * log_det_scale - 0.5 * tr)
               - (0.5 * df * dim * LOG2 + 0.5 * (df + dim + 1) * log_det_x)
               - multigammaln(0.5 * df, dim))
        return _squeeze(out)


wishart = wishart_gen("wishart")
invwishart = invwishart_gen("invwishart")
