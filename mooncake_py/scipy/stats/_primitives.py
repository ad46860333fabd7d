"""Private elementwise primitives behind the stats mirror: scipy.special functions that have no
rule in the derivative table, each with the derivatives that have a practical closed form, and
guards in front of the table's incomplete gamma functions.

Their values come from scipy.special (so they equal SciPy's to the last bit); their derivatives
are written with ruled ``np.``/scipy.special calls, so the pullbacks run on dual numbers and
second order works. A derivative with no practical closed form (the incomplete gamma/beta
functions in their shape parameters, Student's t CDF in ``df``) raises MissingRuleError naming
the public function and the parameter, at record time, rather than returning a wrong number.
"""
import numpy as np
import scipy.special as sc

from ...errors import MissingRuleError
from ...rules.broadcasting import shape_of, unbroadcast
from ...rules.registry import _has_wrapper, frule, primitive, rrule
from ...rules.special import beta_density


def _refuse(public, param, why):
    return MissingRuleError(
        f"mooncake_py.scipy.stats.{public} has no derivative with respect to `{param}`: {why} "
        f"Its derivative in the other arguments works. If `{param}` is a constant here, pass it "
        f"as a plain array (or wrap it in mp.stop_gradient); otherwise this function cannot be "
        f"differentiated in `{param}` yet.")


def _elementwise(value, derivs):
    """A primitive ``value(*args)`` whose partial derivative in argument ``i`` is
    ``derivs[i](*args)`` (``np.`` calls), or, where ``derivs[i]`` is a ``(public, param, why)``
    tuple, a refusal with MissingRuleError."""
    prim = primitive(value)

    def check(wanted):
        for i, w in enumerate(wanted):
            if w and not callable(derivs[i]):
                raise _refuse(*derivs[i])

    @rrule(prim, needs=True)
    def _(needs, *args):
        check(needs)
        y = prim(*args)

        def pullback(g):
            return tuple(unbroadcast(g * derivs[i](*args), shape_of(a)) if n else None
                         for i, (n, a) in enumerate(zip(needs, args)))
        return y, pullback

    @frule(prim)
    def _(primals, tangents):
        check([t is not None for t in tangents])
        y = prim(*primals)
        dy = None
        for i, t in enumerate(tangents):
            if t is not None:
                term = derivs[i](*primals) * t
                dy = term if dy is None else dy + term
        return y, None if dy is None else np.broadcast_to(dy, shape_of(y))
    return prim


# log poch(df/2, 1/2) = log Γ((df+1)/2) - log Γ(df/2), as scipy's t.logpdf computes it (accurate
# for large df, where the gammaln difference cancels).
log_poch_half = _elementwise(lambda h: np.log(sc.poch(h, 0.5)),
                             (lambda h: sc.digamma(h + 0.5) - sc.digamma(h),))


_INCOMPLETE = "the derivative of the regularized incomplete {} function in its shape parameter " \
              "has no practical closed form."

def _gamma_refusal(public, param="a"):
    return (f"{public}.cdf (and sf, logcdf, logsf)", param, _INCOMPLETE.format("gamma"))


def incomplete_gamma(public, param="a"):
    """(P, Q) = scipy.special's (gammainc, gammaincc), whose rules are the derivative table's,
    behind a guard whose shape-parameter refusal names ``public`` and ``param``."""
    refusal = _gamma_refusal(public, param)

    def guarded(fn):
        # the table refuses a tracked shape too, but in scipy.special's words: the user called
        # a stats function and should read its name and parameter
        def call(a, x):
            if _has_wrapper((a,), {}):
                raise _refuse(*refusal)
            return fn(a, x)
        return call
    return guarded(sc.gammainc), guarded(sc.gammaincc)


gammainc, gammaincc = incomplete_gamma("gamma")


def _beta_density(a, b, x):
    return beta_density(sc, a, b, x)


def incomplete_beta(public, a_name="a", b_name="b"):
    """(I, 1 - I) = (betainc, betaincc) as primitives whose shape-parameter refusals name
    ``public`` and the parameters ``a_name``, ``b_name``; ∂/∂x is ± the beta density."""
    where = f"{public}.cdf (and sf, logcdf, logsf)"
    why = _INCOMPLETE.format("beta")
    ra, rb = (where, a_name, why), (where, b_name, why)
    return (_elementwise(lambda a, b, x: sc.betainc(a, b, x),
                         (ra, rb, lambda a, b, x: _beta_density(a, b, x))),
            _elementwise(lambda a, b, x: sc.betaincc(a, b, x),
                         (ra, rb, lambda a, b, x: -_beta_density(a, b, x))))


betainc, betaincc = incomplete_beta("beta")


def t_logpdf_std(x, df):
    """Standard Student t log-density, as scipy's t._logpdf writes it for finite df."""
    return (log_poch_half(0.5 * df) - 0.5 * (np.log(df) + float(np.log(np.pi)))
            - (df + 1) / 2 * np.log1p(x * x / df))


# Student's t CDF: ∂/∂x is the t density.
stdtr = _elementwise(lambda df, x: sc.stdtr(df, x),
                     (("t.cdf (and sf, logcdf, logsf)", "df",
                       "the derivative of Student's t CDF in df has no practical closed form."),
                      lambda df, x: np.exp(t_logpdf_std(x, df))))

# Poisson CDF Q(k+1, mu) at integer k: ∂/∂mu = -pmf(k; mu). k is a constant (a count).
pdtr = _elementwise(lambda k, mu: sc.pdtr(k, mu),
                    (("poisson.cdf", "k", ("the CDF of a discrete distribution is piecewise "
                                          "constant in k.")),
                     lambda k, mu: -np.exp(sc.xlogy(k, mu) - mu - sc.gammaln(k + 1.0))))

def _count(n):
    # bdtr's float-n loop is deprecated (it warns even for integral values); n is integral here
    return np.asarray(n).astype(np.int64)


# Binomial CDF I_{1-p}(n-k, k+1) = 1 - I_p(k+1, n-k) at integer k < n: ∂/∂p is minus the
# Beta(k+1, n-k) density at p, (n-k)·C(n,k)·p^k·(1-p)^(n-k-1).
bdtr = _elementwise(lambda k, n, p: sc.bdtr(k, _count(n), p),
                    (("binom.cdf", "k", ("the CDF of a discrete distribution is piecewise "
                                        "constant in k.")),
                     ("binom.cdf", "n", "n is a count (integer-valued)."),  # refused earlier
                     lambda k, n, p: -_beta_density(k + 1.0, n - k, p)))
