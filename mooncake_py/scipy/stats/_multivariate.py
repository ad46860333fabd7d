"""Multivariate distributions of the stats mirror: multivariate_normal, multivariate_t,
dirichlet and multinomial, with SciPy's signatures, parameter handling and output squeezing.

A dense covariance (or shape matrix) is factored by Cholesky (``np.linalg.cholesky`` and
``mp.linalg.solve_triangular`` have rules), so the log-density is differentiable in the
variate, the mean and every entry of the covariance, to second order. Scalar and 1-D (diagonal)
covariances never build a matrix.
"""
import numpy as np
import scipy.special as sc

from ...errors import MissingRuleError
from ...rules.broadcasting import shape_of
from ...rules.registry import stop_gradient
from ..linalg import solve_triangular
from ._base import LOG_2PI, LOG_PI, Distribution, Frozen, arr, no_rule, tracked

_NOT_PD = "When `allow_singular is False`, the input matrix must be symmetric positive definite."


def _plain(v):
    return np.asarray(stop_gradient(v))


def _size(v):
    return int(np.prod(shape_of(v), dtype=int))


def _params(center, cov, center_name, cov_name):
    """SciPy's ``_process_parameters``: (dim, center, cov), cov kept scalar, 1-D or 2-D."""
    if hasattr(cov, "whiten"):  # a scipy.stats.Covariance object
        raise MissingRuleError(
            f"A scipy.stats.Covariance object as `{cov_name}` works on plain arrays only; on "
            f"tracked values pass the covariance as an array (scalar, diagonal vector or "
            f"matrix).")
    cov = arr(cov)
    if center is None:
        dim = 1 if len(shape_of(cov)) < 2 else shape_of(cov)[0]
        center = 0.0
    else:
        center = arr(center)
        dim = _size(center)
    if dim == 1:
        if center is not None and not isinstance(center, float):
            center = np.reshape(center, (1,))
        if _size(cov) != 1:
            raise ValueError(f"Array '{cov_name}' must be a scalar, a vector of length 1 or a "
                             f"1 x 1 matrix when the dimension is 1; it has shape "
                             f"{shape_of(cov)}.")
        cov = np.reshape(cov, ())
    if not isinstance(center, float) and shape_of(center) != (dim,):
        raise ValueError(f"Array '{center_name}' must be a vector of length {dim}.")
    cs = shape_of(cov)
    if len(cs) > 2 or (len(cs) == 1 and cs != (dim,)) or (len(cs) == 2 and cs != (dim, dim)):
        raise ValueError(f"Array '{cov_name}' must be a scalar, a vector of length {dim} or a "
                         f"{dim} x {dim} matrix; it has shape {cs}.")
    return dim, center, cov


def _quantiles(x, dim):
    x = arr(x)
    nd = len(shape_of(x))
    if nd == 0:
        return np.reshape(x, (1,))
    if nd == 1:
        return np.reshape(x, (-1, 1) if dim == 1 else (1, -1))
    if shape_of(x)[-1] != dim:
        raise ValueError(f"The points x have {shape_of(x)[-1]} coordinates on their last axis; "
                         f"the distribution's dimension (from its mean/loc and covariance) is "
                         f"{dim}.")
    return x


def _maha_logdet(dev, cov, dim, allow_singular, public):
    """(Σ devᵀ cov⁻¹ dev over the last axis, log det cov), cov scalar, diagonal or dense."""
    nd = len(shape_of(cov))
    if nd < 2:
        if np.any(_plain(cov) <= 0):
            _singular(allow_singular, public)
        if nd == 0:
            return np.sum(dev * dev, axis=-1) / cov, dim * np.log(cov)
        return np.sum(dev * dev / cov, axis=-1), np.sum(np.log(cov))
    try:
        L = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError as e:
        _singular(allow_singular, public, e)
    lead = shape_of(dev)[:-1]
    z = solve_triangular(L, np.transpose(np.reshape(dev, (-1, dim))), lower=True)
    maha = np.reshape(np.sum(z * z, axis=0), lead)
    return maha, 2.0 * np.sum(np.log(np.diagonal(L)))


def _singular(allow_singular, public, cause=None):
    if allow_singular:
        raise MissingRuleError(
            f"mooncake_py.scipy.stats.{public} on tracked values needs a positive definite "
            f"covariance: it factors it by Cholesky, and the pseudo-determinant of a singular "
            f"one (allow_singular=True) has no rule. Add a small jitter to the diagonal, or "
            f"call it on plain arrays (SciPy's own).") from cause
    raise np.linalg.LinAlgError(
        f"{_NOT_PD} (mooncake_py.scipy.stats.{public}, differentiable path: the Cholesky "
        f"factorisation failed.)") from cause


def _psd(dev, cov, dim, public):
    """SciPy's ``_PSD`` (``allow_singular=True``) on a tracked covariance: ``(maha, log
    pdet, rank, outside)``, with ``maha`` None when ``dev`` is, and ``outside`` the mask of the
    points off the covariance's range (SciPy's ``-inf``), or None.

    The rank and the range come from the eigenvalues of the plain covariance, with SciPy's
    cutoff; at full rank this is the Cholesky path of :func:`_maha_logdet`. Below it, the
    covariance is taken on its range ``U`` (a constant basis): ``A = Uᵀ C U`` is positive
    definite, ``log pdet = log det A`` and ``maha = |L⁻¹ Uᵀ dev|²`` with ``L`` A's Cholesky
    factor. The derivatives are those along perturbations that keep the range (the only
    directions in which the pseudo-determinant is continuous): ``tr(C⁺ dC)`` for the log
    pseudo-determinant, and of every order along them. Only the lower triangle of a matrix
    is read, as SciPy's ``eigh(lower=True)`` does.
    """
    nd = len(shape_of(cov))
    c = _plain(cov)
    s = np.linalg.eigh(np.tril(c) + np.tril(c, -1).T)[0] if nd == 2 else \
        np.broadcast_to(c, (dim,))
    t = np.result_type(c, np.float32).char.lower()
    eps = {"f": 1e3, "d": 1e6}.get(t, 1e6) * np.finfo(t).eps * np.max(np.abs(s))
    if np.min(s) < -eps:
        raise ValueError("The input matrix must be symmetric positive semidefinite.")
    keep = s > eps
    rank = int(np.sum(keep))
    if rank == dim:
        maha, logdet = _maha_logdet(dev if dev is not None else np.zeros((1, dim)), cov, dim,
                                    False, public)
        return (maha if dev is not None else None), logdet, rank, None
    if rank == 0:  # a zero covariance: every point is off its (empty) range, as in SciPy
        lead = None if dev is None else shape_of(dev)[:-1]
        return (None if dev is None else np.zeros(lead)), 0.0, 0, \
            (None if dev is None else np.ones(lead, dtype=bool))
    if nd < 2:
        safe = np.where(keep, np.broadcast_to(cov, (dim,)) if nd else cov * np.ones(dim), 1.0)
        logdet = np.sum(np.where(keep, np.log(safe), 0.0))
        if dev is None:
            return None, logdet, rank, None
        maha = np.sum(np.where(keep, dev * dev / safe, 0.0), axis=-1)
        off = _plain(dev)[..., ~keep]
    else:
        _, u = np.linalg.eigh(np.tril(c) + np.tril(c, -1).T)
        ur = u[:, keep]
        sym = np.tril(cov) + np.transpose(np.tril(cov, -1))
        L = np.linalg.cholesky(np.transpose(ur) @ sym @ ur)
        logdet = 2.0 * np.sum(np.log(np.diagonal(L)))
        if dev is None:
            return None, logdet, rank, None
        lead = shape_of(dev)[:-1]
        z = solve_triangular(L, np.transpose(ur) @ np.transpose(np.reshape(dev, (-1, dim))),
                             lower=True)
        maha = np.reshape(np.sum(z * z, axis=0), lead)
        off = _plain(dev) @ u[:, ~keep]
    return maha, logdet, rank, np.linalg.norm(off, axis=-1) >= 1e3 * eps


def _squeeze(out):
    return np.squeeze(out)


class _MultivariateFrozen(Frozen):
    """A frozen multivariate distribution: each method receives the keywords it accepts."""

    def __init__(self, dist, kwds, seed):
        super().__init__(dist, (), kwds)
        self.seed = seed

    def _method(self, attr):
        import inspect
        fn = getattr(self.dist, attr)
        names = inspect.signature(fn).parameters
        kw = {k: v for k, v in self.kwds.items() if k in names}
        if "x" not in names:  # entropy(): the parameters only
            return lambda **more: fn(**kw, **more)
        return lambda x, **more: fn(x, **kw, **more)

    def __getattr__(self, attr):
        if attr.startswith("__") or attr in ("dist", "args", "kwds", "seed"):
            raise AttributeError(attr)
        if not attr.startswith("_") and callable(getattr(type(self.dist), attr, None)):
            return self._method(attr)
        if tracked(self.kwds):
            raise no_rule(f"{self.dist.name}(...)", attr)
        return getattr(self.dist.scipy(**self.kwds, seed=self.seed), attr)


class multivariate_normal_gen(Distribution):
    """Multivariate normal, ``multivariate_normal.logpdf(x, mean=None, cov=1,
    allow_singular=False)``: differentiable in ``x``, ``mean`` and ``cov`` (scalar, diagonal
    vector or full matrix, factored by Cholesky). ``cdf``/``logcdf`` (numerical integration)
    work on plain arrays only.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> C = np.array([[2.0, 0.5], [0.5, 1.0]])
        >>> g = mp.grad(lambda m: stats.multivariate_normal.logpdf(np.zeros(2), m, C))(np.ones(2))
        >>> bool(np.allclose(g, -np.linalg.solve(C, np.ones(2))))
        True
    """

    def __call__(self, mean=None, cov=1, allow_singular=False, seed=None):
        return _MultivariateFrozen(self, {"mean": mean, "cov": cov, "allow_singular": allow_singular},
                                   seed)

    def logpdf(self, x, mean=None, cov=1, allow_singular=False):
        """Log-density at ``x`` (last axis: the dimension); SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> f = lambda s: stats.multivariate_normal.logpdf([1.0, 1.0], np.zeros(2), s)
            >>> float(mp.grad(f)(1.0))   # cov = s·I: -d/(2s) + |x|²/(2s²)
            0.0
        """
        if not tracked(x, mean, cov):
            return self.scipy.logpdf(x, mean, cov, allow_singular)
        dim, mean, cov = _params(mean, cov, "mean", "cov")
        x = _quantiles(x, dim)
        if allow_singular:  # the pseudo-determinant and the range, as SciPy's _PSD
            maha, logdet, rank, outside = _psd(x - mean, cov, dim, "multivariate_normal.logpdf")
            out = -0.5 * (rank * LOG_2PI + logdet + maha)
            if outside is not None and np.any(outside):
                out = np.where(outside, -np.inf, out)
            return _squeeze(out)
        maha, logdet = _maha_logdet(x - mean, cov, dim, allow_singular,
                                    "multivariate_normal.logpdf")
        return _squeeze(-0.5 * (dim * LOG_2PI + logdet + maha))

    def entropy(self, mean=None, cov=1):
        """Differential entropy ``(rank·(1 + log 2π) + log pdet cov) / 2``; SciPy's signature
        (a singular covariance is allowed, as in SciPy: its pseudo-determinant and rank).

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> mp.grad(lambda C: stats.multivariate_normal.entropy(cov=C))(np.diag([2.0, 4.0]))
            array([[0.25 , 0.   ],
                   [0.   , 0.125]])
        """
        if not tracked(mean, cov):
            return self.scipy.entropy(mean, cov)
        dim, mean, cov = _params(mean, cov, "mean", "cov")
        _, logdet, rank, _ = _psd(None, cov, dim, "multivariate_normal.entropy")
        return 0.5 * (rank * (LOG_2PI + 1.0) + logdet)

    def pdf(self, x, mean=None, cov=1, allow_singular=False):
        """Density at ``x``; SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> f = lambda m: stats.multivariate_normal.pdf([0.0, 0.0], m)
            >>> mp.grad(f)(np.zeros(2))   # the peak
            array([0., 0.])
        """
        if not tracked(x, mean, cov):
            return self.scipy.pdf(x, mean, cov, allow_singular)
        return np.exp(self.logpdf(x, mean, cov, allow_singular))


class multivariate_t_gen(Distribution):
    """Multivariate t, ``multivariate_t.logpdf(x, loc=None, shape=1, df=1)``: differentiable
    in ``x``, ``loc``, ``shape`` and ``df`` (``df=np.inf`` is the normal, as in SciPy).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> f = lambda df: stats.multivariate_t.logpdf([0.4, 5.0], [0.0, 1.0], np.eye(2), df)
        >>> bool(np.isclose(mp.grad(f)(7.0), (f(7 + 1e-6) - f(7 - 1e-6)) / 2e-6))
        True
    """

    def __call__(self, loc=None, shape=1, df=1, allow_singular=False, seed=None):
        return _MultivariateFrozen(self, {"loc": loc, "shape": shape, "df": df,
                                              "allow_singular": allow_singular}, seed)

    def _logpdf(self, x, loc, shape, df, allow_singular):
        if loc is None and shape is None:
            loc, shape = 0.0, 1.0
        elif shape is None:
            shape = np.eye(_size(arr(loc)))
        dim, loc, shape = _params(loc, shape, "loc", "shape")
        if df is None:
            df = 1
        dfp = _plain(df)
        if dfp.ndim or dfp <= 0 or np.isnan(dfp):
            raise ValueError("'df' must be a scalar greater than zero (or np.inf); got "
                             f"{dfp!r}.")
        x = _quantiles(x, dim)
        maha, logdet = _maha_logdet(x - loc, shape, dim, allow_singular,
                                    "multivariate_t.logpdf")
        if np.isinf(dfp):
            return _squeeze(-0.5 * (dim * LOG_2PI + logdet + maha))
        half = 0.5 * (df + dim)
        out = (sc.gammaln(half) - sc.gammaln(0.5 * df) - dim / 2.0 * (np.log(df) + LOG_PI)
               - 0.5 * logdet - half * np.log1p(maha / df))
        return _squeeze(out)

    def logpdf(self, x, loc=None, shape=1, df=1):
        """Log-density at ``x``; SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> mp.grad(lambda l: stats.multivariate_t.logpdf([0.0, 0.0], l, df=3.0))(np.zeros(2))
            array([0., 0.])
        """
        if not tracked(x, loc, shape, df):
            return self.scipy.logpdf(x, loc, shape, df)
        return self._logpdf(x, loc, shape, df, False)

    def pdf(self, x, loc=None, shape=1, df=1, allow_singular=False):
        """Density at ``x``; SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> g = mp.grad(lambda x: stats.multivariate_t.pdf(x, np.zeros(2), df=3.0))(np.zeros(2))
            >>> bool(np.allclose(g, 0.0))
            True
        """
        if not tracked(x, loc, shape, df):
            return self.scipy.pdf(x, loc, shape, df, allow_singular)
        return np.exp(self._logpdf(x, loc, shape, df, allow_singular))


class dirichlet_gen(Distribution):
    """Dirichlet, ``dirichlet.logpdf(x, alpha)`` with SciPy's convention: the components of
    ``x`` run along its *first* axis (``x`` is ``(K,)`` or ``(K, n)``, or has ``K - 1``
    components and the last is ``1 - sum``). Differentiable in ``x`` and ``alpha``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> x = np.array([0.2, 0.3, 0.5])
        >>> g = mp.grad(lambda a: stats.dirichlet.logpdf(x, a))(np.ones(3))
        >>> bool(np.allclose(g, np.log(x) + 1.5))   # log x - digamma(1) + digamma(3)
        True
    """

    def __call__(self, alpha, seed=None):
        return _MultivariateFrozen(self, {"alpha": alpha}, seed)

    def _logpdf(self, x, alpha):
        alpha, x = arr(alpha), arr(x)
        a = _plain(alpha)
        if np.min(a) <= 0:
            raise ValueError("All parameters must be greater than 0")
        if a.ndim != 1:
            raise ValueError("Parameter vector 'a' must be one dimensional, "
                             f"but a.shape = {a.shape}.")
        xs = shape_of(x)
        K = a.shape[0]
        if xs[0] + 1 != K and xs[0] != K:
            raise ValueError("Vector 'x' must have either the same number of entries as, or "
                             f"one entry fewer than, parameter vector 'a', but alpha.shape = "
                             f"{a.shape} and x.shape = {xs}.")
        if xs[0] != K:
            if len(xs) > 2:
                raise ValueError("The input must be one dimensional or a two dimensional "
                                 "matrix containing the entries.")
            last = 1 - np.sum(x, axis=0)
            x = np.concatenate([x, np.reshape(last, (1,) + xs[1:])])
        xp = _plain(x)
        if np.min(xp) < 0:
            raise ValueError("Each entry in 'x' must be greater than or equal to zero.")
        if np.max(xp) > 1:
            raise ValueError("Each entry in 'x' must be smaller or equal one.")
        alow = np.reshape(a < 1, (K,) + (1,) * (xp.ndim - 1))
        if np.any((xp == 0) & alow):
            raise ValueError("Each entry in 'x' must be greater than zero if its alpha is "
                             "less than one.")
        if (np.abs(np.sum(xp, 0) - 1.0) > 10e-10).any():
            raise ValueError("The input vector 'x' must lie within the normal simplex. but "
                             f"np.sum(x, 0) = {np.sum(xp, 0)}.")
        lnb = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
        am1 = np.reshape(alpha - 1, (K,) + (1,) * (len(shape_of(x)) - 1))
        return _squeeze(-lnb + np.sum(sc.xlogy(am1, x), axis=0))

    def logpdf(self, x, alpha):
        """Log-density at ``x``; SciPy's signature and axis convention.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> f = lambda x: stats.dirichlet.logpdf(x, [2.0, 2.0, 2.0])   # K - 1 components
            >>> mp.grad(f)(np.full(2, 0.25))   # 1/x_i - 1/(1 - x_1 - x_2)
            array([2., 2.])
        """
        if not tracked(x, alpha):
            return self.scipy.logpdf(x, alpha)
        return self._logpdf(x, alpha)

    def pdf(self, x, alpha):
        """Density at ``x``; SciPy's signature and axis convention.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> x = np.array([0.2, 0.3, 0.5])
            >>> round(float(mp.grad(lambda a: stats.dirichlet.pdf(x, a))(np.ones(3))[2]), 6)
            1.613706
        """
        if not tracked(x, alpha):
            return self.scipy.pdf(x, alpha)
        return np.exp(self._logpdf(x, alpha))


class multinomial_gen(Distribution):
    """Multinomial, ``multinomial.logpmf(x, n, p)``: differentiable in the probabilities ``p``
    (last axis); the counts ``x`` and ``n`` carry no derivative. As SciPy does, a row of ``p``
    that does not sum to 1 has its last entry replaced by ``1 - sum(others)`` (with SciPy's
    FutureWarning), so the derivative in that entry is then zero.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> p = np.array([0.2, 0.3, 0.5])
        >>> mp.grad(lambda p: stats.multinomial.logpmf([1, 2, 3], 6, p))(p)   # x / p
        array([5.        , 6.66666667, 6.        ])
    """

    def __call__(self, n, p, seed=None):
        return _MultivariateFrozen(self, {"n": n, "p": p}, seed)

    def _logpmf(self, x, n, p):
        if tracked(n):
            raise MissingRuleError(
                "mooncake_py.scipy.stats.multinomial has no derivative with respect to `n`: "
                "it is a count. Pass it as a plain number or array (or wrap it in "
                "mp.stop_gradient); the derivative in p works.")
        p = arr(p)
        pp = np.asarray(_plain(p), dtype=float)
        eps = np.finfo(np.result_type(pp, np.float32)).eps * 10
        adjust = np.abs(1 - pp.sum(axis=-1)) > eps
        if np.any(adjust):
            import warnings
            warnings.warn(
                f"Some rows of `p` do not sum to 1.0 within tolerance of {eps=}. Currently, "
                f"the last element of these rows is adjusted to compensate, but this condition "
                f"will produce NaNs beginning in SciPy 1.18.0. Please ensure that rows of `p` "
                f"sum to 1.0 to avoid futher disruption.", FutureWarning, stacklevel=3)
            last = np.where(adjust, 1.0 - np.sum(p[..., :-1], axis=-1), p[..., -1])
            p = np.concatenate([p[..., :-1], last[..., None]], axis=-1)
            pp = np.asarray(_plain(p), dtype=float)
        bad_p = np.any(pp < 0, axis=-1) | np.any(pp > 1, axis=-1)
        n = np.array(_plain(n), dtype=int)
        bad_np = (n < 0) | bad_p
        xp = np.asarray(_plain(arr(x)))
        xx = np.asarray(xp, dtype=int)
        if xx.ndim == 0:
            raise ValueError("x must be an array.")
        if xx.size != 0 and not xx.shape[-1] == pp.shape[-1]:
            raise ValueError(f"Size of each quantile should be size of p: received "
                             f"{xx.shape[-1]}, but expected {pp.shape[-1]}.")
        bad_x = np.any(xx != xp, axis=-1) | np.any(xx < 0, axis=-1) | (np.sum(xx, axis=-1) != n)
        with np.errstate(invalid="ignore"):
            out = sc.gammaln(n + 1) + np.sum(sc.xlogy(xx, p) - sc.gammaln(xx + 1), axis=-1)
        bad_x = bad_x | np.zeros(bad_np.shape, dtype=bool)
        bad_np = bad_np | np.zeros(bad_x.shape, dtype=bool)
        if np.any(bad_x):
            out = np.where(bad_x, -np.inf, out)
        return np.where(bad_np, np.nan, out) if np.any(bad_np) else out

    def logpmf(self, x, n, p):
        """Log of the probability mass at the counts ``x``; SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> mp.grad(lambda p: stats.multinomial.logpmf([2, 2], 4, p))(np.array([0.5, 0.5]))
            array([4., 4.])
        """
        if not tracked(x, n, p):
            return self.scipy.logpmf(x, n, p)
        return self._logpmf(x, n, p)

    def pmf(self, x, n, p):
        """Probability mass at the counts ``x``; SciPy's signature.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> mp.grad(lambda p: stats.multinomial.pmf([1, 0], 1, p))(np.array([0.5, 0.5]))
            array([1., 0.])
        """
        if not tracked(x, n, p):
            return self.scipy.pmf(x, n, p)
        return np.exp(self._logpmf(x, n, p))


multivariate_normal = multivariate_normal_gen("multivariate_normal")
multivariate_t = multivariate_t_gen("multivariate_t")
dirichlet = dirichlet_gen("dirichlet")
multinomial = multinomial_gen("multinomial")
