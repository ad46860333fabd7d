"""The machinery shared by every distribution of the stats mirror: telling plain calls (which go
to SciPy) from tracked ones, binding SciPy's argument conventions, support and parameter masks,
and frozen distributions."""
import importlib
import math

import numpy as np

from ...core.dispatch import WRAPPER_TYPES
from ...errors import MissingRuleError
from ...rules.reductions import dtype_of
from ...rules.registry import stop_gradient

NAN, INF = float("nan"), float("inf")
LOG_PI = math.log(math.pi)
LOG_2PI = math.log(2 * math.pi)
LOG2 = math.log(2.0)
NORM_LOGC = 0.5 * math.log(2 * math.pi)   # log √(2π), the standard normal's normaliser


def scipy_stats():
    return importlib.import_module("scipy.stats")


def tracked(*trees):
    """Whether a tracked or dual value occurs anywhere in ``trees`` (lists, tuples, dicts)."""
    for t in trees:
        ty = type(t)
        if ty in WRAPPER_TYPES:
            return True
        if ty is list or ty is tuple:
            if tracked(*t):
                return True
        elif ty is dict and tracked(*t.values()):
            return True
    return False


def arr(v):
    """``v`` as something ``np.`` functions take: wrappers and Python numbers as they are (a
    Python number keeps a float32 computation float32), a list holding wrappers stacked."""
    ty = type(v)
    if ty in WRAPPER_TYPES or ty is float or ty is int:
        return v
    if (ty is list or ty is tuple) and tracked(v):
        return np.stack([arr(e) for e in v])
    return np.asarray(v)


def bind(where, names, defaults, args, kwds):
    """SciPy's ``_parse_args``: positional then keyword values for ``names``, with
    ``defaults``; the values in the order of ``names``."""
    if len(args) > len(names):
        raise TypeError(f"{where}() takes at most {len(names)} parameter(s) after the variate "
                        f"({', '.join(names)}); {len(args)} were given.")
    vals = dict(zip(names, args))
    for k, v in kwds.items():
        if k not in names:
            raise TypeError(f"{where}() got an unexpected keyword argument '{k}'; its "
                            f"parameters are {', '.join(names)}.")
        if k in vals:
            raise TypeError(f"{where}() got multiple values for argument '{k}'.")
        vals[k] = v
    missing = [n for n in names if n not in vals and n not in defaults]
    if missing:
        raise TypeError(f"{where}() missing required argument(s): {', '.join(missing)}.")
    return [arr(vals[n]) if n in vals else defaults[n] for n in names]


def checked(v, ok, safe):
    """(``v`` with ``safe`` where ``ok`` is False, ``ok``). The substitution keeps nan and inf
    out of the branch np.where does not take, where they would poison the derivative."""
    if np.all(ok):
        return v, ok
    if type(v) in (int, float):
        return safe, ok
    return np.where(ok, v, safe), ok


def log(v):
    """np.log, but a Python float for a Python number (np.log would give a float64 scalar,
    which turns a float32 computation into float64)."""
    return math.log(v) if type(v) in (int, float) else np.log(v)


def as_dtype_of(z, shapes):
    """Python-number shape parameters as scalars of ``z``'s float dtype: scipy.special ufuncs
    promote a Python float with a float32 array to float64, NumPy does not."""
    dt = dtype_of(z)
    if dt.kind != "f" or dt == np.float64:
        return shapes
    return [dt.type(s) if type(s) in (int, float) else s for s in shapes]


def masked(mask, v, safe):
    """``v`` where ``mask``, ``safe`` elsewhere (no-op when the mask is all True)."""
    return v if np.all(mask) else np.where(mask, v, safe)


def no_rule(qualname, method):
    return MissingRuleError(
        f"mooncake_py.scipy.stats.{qualname}.{method} was called on tracked or dual values but "
        f"has no differentiable implementation (the mirror covers logpdf, pdf, logcdf, cdf, "
        f"logsf and sf of continuous distributions; logpmf, pmf, logcdf and cdf of discrete "
        f"ones; logpdf/pdf or logpmf/pmf of multivariate ones). Call it on plain arrays (it "
        f"then runs SciPy's own), or write the quantity with np. calls on the differentiable "
        f"methods.")


class Distribution:
    """Base of every mirrored distribution: methods not mirrored forward to SciPy on plain
    arguments and raise MissingRuleError on tracked ones."""
    name = None

    def __init__(self, name):
        self.name = name

    @property
    def scipy(self):
        return getattr(scipy_stats(), self.name)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        target = getattr(self.scipy, attr)
        if not callable(target):
            return target

        def forward(*args, **kwds):
            if tracked(args, kwds):
                raise no_rule(self.name, attr)
            return target(*args, **kwds)
        forward.__name__ = attr
        return forward

    def __repr__(self):
        return (f"<mooncake_py.scipy.stats.{self.name}: differentiable mirror of "
                f"scipy.stats.{self.name}>")

    def __call__(self, *args, **kwds):
        return Frozen(self, args, kwds)


class Frozen:
    """A distribution with its parameters fixed, as ``scipy.stats.norm(loc, scale)``; the
    parameters may be tracked (differentiable)."""

    def __init__(self, dist, args, kwds):
        self.dist, self.args, self.kwds = dist, args, kwds

    def _method(self, attr):
        fn = getattr(self.dist, attr)
        return lambda x: fn(x, *self.args, **self.kwds)

    def __getattr__(self, attr):
        if attr.startswith("__") or attr in ("dist", "args", "kwds"):
            raise AttributeError(attr)
        if not attr.startswith("_") and callable(getattr(type(self.dist), attr, None)):
            return self._method(attr)
        if tracked(self.args, self.kwds):
            raise no_rule(f"{self.dist.name}(...)", attr)
        return getattr(self.dist.scipy(*self.args, **self.kwds), attr)

    def __repr__(self):
        return f"<frozen mooncake_py.scipy.stats.{self.dist.name}>"


class Univariate(Distribution):
    """A continuous distribution written in standard coordinates ``z = (x - loc) / scale``.

    Subclasses set ``_shape_names``, ``_std_support`` (the support in standard
    coordinates), ``_safe_z`` (a point inside it) and define ``_logpdf``, ``_cdf``, ``_sf`` (and
    ``_pdf``, ``_logcdf``, ``_logsf`` where SciPy computes them otherwise than its defaults),
    written with ruled calls.
    """
    _shape_names = ()
    _std_support = (-INF, INF)
    _safe_z = 0.0
    _open_density = False   # SciPy evaluates the density on the closed support unless set

    def _shape_ok(self, name, v):
        return v > 0

    def _shapes_ok(self, shapes):
        """Per-parameter checks, with a safe value for each failing one; a subclass whose
        check involves several parameters at once overrides this."""
        valid = True
        safe = []
        for n, s in zip(self._shape_names, shapes):
            s, ok = checked(s, self._shape_ok(n, s), 1.0)
            safe.append(s)
            valid = valid & ok
        return safe, valid

    def _support_of(self, shapes):
        """(lo, hi, a point strictly inside) in standard coordinates."""
        lo, hi = self._std_support
        return lo, hi, self._safe_z

    def _params(self, method, args, kwds):
        names = self._shape_names + ("loc", "scale")
        vals = bind(f"{self.name}.{method}", names, {"loc": 0, "scale": 1}, args, kwds)
        *shapes, loc, scale = vals
        safe, valid = self._shapes_ok(shapes)
        scale, ok = checked(scale, scale > 0, 1.0)
        return safe, loc, scale, valid & ok

    def _density(self, method, x, args, kwds):
        shapes, loc, scale, valid = self._params(method, args, kwds)
        z = (arr(x) - loc) / scale
        shapes = as_dtype_of(z, shapes)
        lo, hi, safe_z = self._support_of(shapes)
        if self._open_density:
            inside = (z > lo) & (z < hi) & valid
        else:
            inside = (z >= lo) & (z <= hi) & valid
        zs = masked(inside, z, safe_z)
        if method == "logpdf":
            val, fill = self._logpdf(zs, *shapes) - log(scale), -INF
        else:
            val, fill = self._pdf(zs, *shapes) / scale, 0.0
        out = masked(inside, val, fill)
        bad = ~np.asarray(valid) | np.isnan(z)
        return np.where(bad, NAN, out) if np.any(bad) else out

    def _cumulative(self, method, x, args, kwds):
        shapes, loc, scale, valid = self._params(method, args, kwds)
        z = (arr(x) - loc) / scale
        shapes = as_dtype_of(z, shapes)
        lo, hi, safe_z = self._support_of(shapes)
        inside = (z > lo) & (z < hi) & valid
        zs = masked(inside, z, safe_z)
        # the value at or beyond the support's end: cdf 1 above it, sf 1 below it
        full = ((z >= hi) if method in ("cdf", "logcdf") else (z <= lo)) & valid
        val = getattr(self, "_" + method)(zs, *shapes)
        one, zero = (0.0, -INF) if method.startswith("log") else (1.0, 0.0)
        out = masked(inside, val, np.where(full, one, zero))
        bad = ~np.asarray(valid) | np.isnan(z)
        return np.where(bad, NAN, out) if np.any(bad) else out

    def _pdf(self, z, *shapes):
        return np.exp(self._logpdf(z, *shapes))

    def _sf(self, z, *shapes):
        return 1.0 - self._cdf(z, *shapes)

    def _median(self, *shapes):
        """The standard median (plain): SciPy's log-CDF and log-SF switch formulas there."""
        return self.scipy.ppf(0.5, *[np.asarray(stop_gradient(s)) for s in shapes])

    def _logcdf(self, z, *shapes):
        # SciPy: log(cdf) below the median, log1p(-sf) above, where each is accurate. Each
        # branch sees only its own side's z: the other side's value may be log(0).
        med = self._median(*shapes)
        return self._switch(z < med, z, med, lambda v: np.log(self._cdf(v, *shapes)),
                            lambda v: np.log1p(-self._sf(v, *shapes)))

    def _logsf(self, z, *shapes):
        med = self._median(*shapes)
        return self._switch(z > med, z, med, lambda v: np.log(self._sf(v, *shapes)),
                            lambda v: np.log1p(-self._cdf(v, *shapes)))

    @staticmethod
    def _switch(cond, z, med, f, g):
        with np.errstate(divide="ignore"):   # a tail's cdf (or sf) may underflow to 0
            if np.all(cond):
                return f(z)
            if not np.any(cond):
                return g(z)
            return np.where(cond, f(np.where(cond, z, med)), g(np.where(cond, med, z)))

    def logpdf(self, x, *args, **kwds):
        """Log of the probability density at ``x``; SciPy's signature (shape parameters
        positional or by name, then ``loc``, ``scale``).

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda a: stats.gamma.logpdf(2.0, a, scale=2.0))(1.0))   # -digamma(1)
            0.5772156649015329
        """
        if not tracked(x, args, kwds):
            return self.scipy.logpdf(x, *args, **kwds)
        return self._density("logpdf", x, args, kwds)

    def pdf(self, x, *args, **kwds):
        """Probability density at ``x``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda x: stats.norm.pdf(x))(1.0))   # -x·φ(x)
            -0.24197072451914337
        """
        if not tracked(x, args, kwds):
            return self.scipy.pdf(x, *args, **kwds)
        return self._density("pdf", x, args, kwds)

    def cdf(self, x, *args, **kwds):
        """Cumulative distribution function at ``x``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda x: stats.expon.cdf(x))(1.0))   # the density e^-x
            0.36787944117144233
        """
        if not tracked(x, args, kwds):
            return self.scipy.cdf(x, *args, **kwds)
        return self._cumulative("cdf", x, args, kwds)

    def logcdf(self, x, *args, **kwds):
        """Log of the cumulative distribution function at ``x``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda x: stats.logistic.logcdf(x))(0.0))
            0.5
        """
        if not tracked(x, args, kwds):
            return self.scipy.logcdf(x, *args, **kwds)
        return self._cumulative("logcdf", x, args, kwds)

    def sf(self, x, *args, **kwds):
        """Survival function ``1 - cdf`` at ``x``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda x: stats.expon.sf(x))(1.0))
            -0.36787944117144233
        """
        if not tracked(x, args, kwds):
            return self.scipy.sf(x, *args, **kwds)
        return self._cumulative("sf", x, args, kwds)

    def logsf(self, x, *args, **kwds):
        """Log of the survival function at ``x``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda s: stats.expon.logsf(3.0, scale=s))(1.5))   # x/s²
            1.3333333333333333
        """
        if not tracked(x, args, kwds):
            return self.scipy.logsf(x, *args, **kwds)
        return self._cumulative("logsf", x, args, kwds)


class Discrete(Distribution):
    """A discrete distribution; the variate ``k`` (and ``loc``) carry no derivative (the mass
    function is piecewise constant in them), the shape parameters do.

    Subclasses set ``_shape_names``, ``_shape_ok``, ``_support(*shapes)`` and define
    ``_logpmf`` and ``_cdf`` (of ``floor(k)``) with ruled calls.
    """
    _shape_names = ()

    def _params(self, method, k, args, kwds):
        names = self._shape_names + ("loc",)
        *shapes, loc = bind(f"{self.name}.{method}", names, {"loc": 0}, args, kwds)
        lo, hi = self._support(*shapes)
        valid = True
        safe = []
        for n, s in zip(self._shape_names, shapes):
            s, ok = checked(s, self._shape_ok(n, s), self._safe(n))
            safe.append(s)
            valid = valid & ok
        k = np.asarray(stop_gradient(arr(k)) - stop_gradient(loc), dtype=float)
        return k, safe, lo, hi, np.asarray(valid)

    def _safe(self, name):
        return 0.5

    def _mass(self, method, k, args, kwds):
        k, shapes, lo, hi, valid = self._params(method, k, args, kwds)
        inside = (k >= lo) & (k <= hi) & (np.floor(k) == k) & valid
        ks = np.where(inside, k, 0.0)
        if method == "logpmf":
            val, fill = self._logpmf(ks, *shapes), -INF
        else:
            val, fill = np.clip(np.exp(self._logpmf(ks, *shapes)), 0.0, 1.0), 0.0
        out = np.where(inside, val, fill)
        bad = ~valid | np.isnan(k)
        return np.where(bad, NAN, out) if np.any(bad) else out

    def _cumulative(self, method, k, args, kwds):
        k, shapes, lo, hi, valid = self._params(method, k, args, kwds)
        above = k >= hi
        bad = ~valid | np.isnan(k)
        inside = (k >= lo) & (k < hi) & valid
        ks = np.where(inside & np.isfinite(k), np.floor(k), 0.0)
        cdf = np.clip(self._cdf(ks, *shapes), 0.0, 1.0)
        if method == "cdf":
            inside = inside & np.isfinite(k)
            # SciPy's order: 1 above the support, then nan for bad input, then the values.
            rest = np.where(bad, NAN, np.where(above, 1.0, 0.0))
            return np.where(inside, cdf, rest)
        val = self._logcdf(ks, *shapes)
        # logcdf: nan for bad input first, then 0 above the support (SciPy's order).
        rest = np.where(above, 0.0, np.where(bad, NAN, -INF))
        return np.where(inside, val, rest)

    def _logcdf(self, k, *shapes):
        with np.errstate(divide="ignore"):
            return np.log(self._cdf(k, *shapes))

    def logpmf(self, k, *args, **kwds):
        """Log of the probability mass at ``k``; SciPy's signature (shape parameters, then
        ``loc``).

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda mu: stats.poisson.logpmf(4, mu))(2.0))   # k/mu - 1
            1.0
        """
        if not tracked(k, args, kwds):
            return self.scipy.logpmf(k, *args, **kwds)
        return self._mass("logpmf", k, args, kwds)

    def pmf(self, k, *args, **kwds):
        """Probability mass at ``k``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda p: stats.bernoulli.pmf(1, p))(0.3))
            1.0
        """
        if not tracked(k, args, kwds):
            return self.scipy.pmf(k, *args, **kwds)
        return self._mass("pmf", k, args, kwds)

    def cdf(self, k, *args, **kwds):
        """Cumulative distribution function at ``k``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda p: stats.bernoulli.cdf(0, p))(0.3))   # d(1 - p)/dp
            -1.0
        """
        if not tracked(k, args, kwds):
            return self.scipy.cdf(k, *args, **kwds)
        return self._cumulative("cdf", k, args, kwds)

    def logcdf(self, k, *args, **kwds):
        """Log of the cumulative distribution function at ``k``; SciPy's signature.

        Example:
            >>> import mooncake_py as mp
            >>> from mooncake_py.scipy import stats
            >>> float(mp.grad(lambda p: stats.bernoulli.logcdf(0, p))(0.5))   # -1/(1 - p)
            -2.0
        """
        if not tracked(k, args, kwds):
            return self.scipy.logcdf(k, *args, **kwds)
        return self._cumulative("logcdf", k, args, kwds)
