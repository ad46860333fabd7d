"""The derivative table: every elementwise op's value, first and second derivatives, written once.

Each entry holds scalar expressions in a small vocabulary that reads the same as Python
(``math``, for numba) and as CUDA C: function calls (``sin(a)``, ``pow(a, b)``,
``select(cond, p, q)``), ``+ - * /``, comparisons, float literals and the named constants below.
Inputs are ``a`` (and ``b`` for binary ops); ``y`` is the op's output, so a derivative may reuse
it (``exp: d1 = y``).

- unary entries: ``d1 = (∂y/∂a,)``, ``d2 = (∂²y/∂a²,)``
- binary entries: ``d1 = (∂y/∂a, ∂y/∂b)``, ``d2 = (∂²y/∂a², ∂²y/∂a∂b, ∂²y/∂b²)``

``"0"``, ``"1"`` and ``"-1"`` are recognised by the generators, so ``add`` costs no multiply.
From these strings :mod:`mooncake_py.rules.elementwise` builds the reverse rules, the forward
rules and the fused kernels (numba on CPU, CuPy on GPU) are generated from the very same text.
"""
import math
from dataclasses import dataclass, field

import numpy as np

try:  # scipy is optional: without it the scipy.special entries are simply absent
    import scipy.special as sps
except ImportError:  # pragma: no cover
    sps = None

CONSTANTS = {
    "LN2": math.log(2.0),
    "LN10": math.log(10.0),
    "DEG2RAD": math.pi / 180.0,
    "RAD2DEG": 180.0 / math.pi,
    "TWO_OVER_SQRTPI": 2.0 / math.sqrt(math.pi),
    "INV_SQRT2PI": 1.0 / math.sqrt(2.0 * math.pi),
}


@dataclass(frozen=True, eq=False)
class Entry:
    """One elementwise op: its ufunc, value expression and derivative expressions."""
    name: str
    ufunc: object
    value: str
    d1: tuple
    d2: tuple
    nin: int = 1
    np_d1: tuple = field(default=(), repr=False)
    np_d2: tuple = field(default=(), repr=False)

    def __hash__(self):
        return id(self)


def _np_vocabulary():
    """The vocabulary's meaning on NumPy arrays (the composition path and the test oracle)."""
    ns = dict(CONSTANTS)
    for n in ("sin cos tan exp exp2 expm1 log log1p sqrt cbrt sinh cosh tanh floor trunc "
              "sign abs").split():
        ns[n] = getattr(np, n)
    ns.update(pow=np.power, select=np.where)
    if sps is not None:
        ns.update(erf=sps.erf, erfc=sps.erfc, digamma=sps.digamma,
                  trigamma=lambda a: _special_of(a).polygamma(1, a),
                  tetragamma=lambda a: _special_of(a).polygamma(2, a))
    return ns


def _special_of(a):
    """scipy.special, or cupyx.scipy.special for device arrays (polygamma is no ufunc)."""
    from ..array_module import scipy_special
    return scipy_special(a)


NP_VOCABULARY = _np_vocabulary()


def _compile_np(expr, nin):
    """A NumPy function ``(a[, b], y) -> value`` for one expression."""
    params = "a, y" if nin == 1 else "a, b, y"
    return eval(f"lambda {params}: {expr}", dict(NP_VOCABULARY))


TABLE = {}


class _MissingModule:
    """Attribute access yields None, so table rows for an absent scipy register nothing."""
    def __getattr__(self, name):
        return None


_sps = sps if sps is not None else _MissingModule()


def _entry(ufunc, value, d1, d2, name=None):
    if ufunc is None:  # a scipy.special ufunc without scipy installed
        return None
    d1, d2 = tuple(d1), tuple(d2)
    nin = len(d1)
    assert len(d2) == (1 if nin == 1 else 3), ufunc
    e = Entry(name or ufunc.__name__, ufunc, value, d1, d2, nin,
              tuple(_compile_np(s, nin) for s in d1), tuple(_compile_np(s, nin) for s in d2))
    TABLE[e.name] = e
    return e


# --- unary ops:   ufunc,      value,        (∂y/∂a,),                      (∂²y/∂a²,)
_entry(np.negative, "-a", ["-1"], ["0"])
_entry(np.positive, "a", ["1"], ["0"])
_entry(np.square, "a*a", ["2*a"], ["2"])
_entry(np.sqrt, "sqrt(a)", ["0.5/y"], ["-0.25/(y*a)"])
_entry(np.cbrt, "cbrt(a)", ["1/(3*y*y)"], ["-2/(9*y*y*y*y*y)"])
_entry(np.reciprocal, "1/a", ["-y*y"], ["2*y*y*y"])
_entry(np.absolute, "abs(a)", ["sign(a)"], ["0"])
_entry(np.fabs, "abs(a)", ["sign(a)"], ["0"])
_entry(np.exp, "exp(a)", ["y"], ["y"])
_entry(np.exp2, "exp2(a)", ["LN2*y"], ["LN2*LN2*y"])
_entry(np.expm1, "expm1(a)", ["y+1"], ["y+1"])
_entry(np.log, "log(a)", ["1/a"], ["-1/(a*a)"])
_entry(np.log2, "log(a)/LN2", ["1/(a*LN2)"], ["-1/(a*a*LN2)"])
_entry(np.log10, "log(a)/LN10", ["1/(a*LN10)"], ["-1/(a*a*LN10)"])
_entry(np.log1p, "log1p(a)", ["1/(1+a)"], ["-1/((1+a)*(1+a))"])
_entry(np.sin, "sin(a)", ["cos(a)"], ["-y"])
_entry(np.cos, "cos(a)", ["-sin(a)"], ["-y"])
_entry(np.tan, "tan(a)", ["1+y*y"], ["2*y*(1+y*y)"])
_entry(np.arcsin, "asin(a)", ["1/sqrt(1-a*a)"], ["a/((1-a*a)*sqrt(1-a*a))"])
_entry(np.arccos, "acos(a)", ["-1/sqrt(1-a*a)"], ["-a/((1-a*a)*sqrt(1-a*a))"])
_entry(np.arctan, "atan(a)", ["1/(1+a*a)"], ["-2*a/((1+a*a)*(1+a*a))"])
_entry(np.sinh, "sinh(a)", ["cosh(a)"], ["y"])
_entry(np.cosh, "cosh(a)", ["sinh(a)"], ["y"])
_entry(np.tanh, "tanh(a)", ["1-y*y"], ["-2*y*(1-y*y)"])
_entry(np.arcsinh, "asinh(a)", ["1/sqrt(a*a+1)"], ["-a/((a*a+1)*sqrt(a*a+1))"])
_entry(np.arccosh, "acosh(a)", ["1/sqrt(a*a-1)"], ["-a/((a*a-1)*sqrt(a*a-1))"])
_entry(np.arctanh, "atanh(a)", ["1/(1-a*a)"], ["2*a/((1-a*a)*(1-a*a))"])
_entry(np.deg2rad, "a*DEG2RAD", ["DEG2RAD"], ["0"])
_entry(np.rad2deg, "a*RAD2DEG", ["RAD2DEG"], ["0"])
_entry(np.radians, "a*DEG2RAD", ["DEG2RAD"], ["0"], name="radians")
_entry(np.degrees, "a*RAD2DEG", ["RAD2DEG"], ["0"], name="degrees")
_entry(_sps.expit, "1/(1+exp(-a))", ["y*(1-y)"], ["y*(1-y)*(1-2*y)"])
_entry(_sps.logit, "log(a/(1-a))", ["1/(a*(1-a))"], ["(2*a-1)/(a*a*(1-a)*(1-a))"])
_entry(_sps.erf, "erf(a)", ["TWO_OVER_SQRTPI*exp(-a*a)"], ["-2*a*TWO_OVER_SQRTPI*exp(-a*a)"])
_entry(_sps.erfc, "erfc(a)", ["-TWO_OVER_SQRTPI*exp(-a*a)"], ["2*a*TWO_OVER_SQRTPI*exp(-a*a)"])
_entry(_sps.gammaln, "lgamma(a)", ["digamma(a)"], ["trigamma(a)"])
_entry(_sps.digamma, "digamma(a)", ["trigamma(a)"], ["tetragamma(a)"])
_entry(_sps.ndtr, "ndtr(a)", ["INV_SQRT2PI*exp(-0.5*a*a)"], ["-a*INV_SQRT2PI*exp(-0.5*a*a)"])
_entry(_sps.log_ndtr, "log_ndtr(a)", ["INV_SQRT2PI*exp(-0.5*a*a-y)"],
       ["-INV_SQRT2PI*exp(-0.5*a*a-y)*(a+INV_SQRT2PI*exp(-0.5*a*a-y))"])

# --- binary ops:  ufunc,      value,   (∂y/∂a, ∂y/∂b),   (∂²y/∂a², ∂²y/∂a∂b, ∂²y/∂b²)
_entry(np.add, "a+b", ["1", "1"], ["0", "0", "0"])
_entry(np.subtract, "a-b", ["1", "-1"], ["0", "0", "0"])
_entry(np.multiply, "a*b", ["b", "a"], ["0", "1", "0"])
_entry(np.true_divide, "a/b", ["1/b", "-y/b"], ["0", "-1/(b*b)", "2*y/(b*b)"])
_entry(np.power, "pow(a,b)", ["b*pow(a,b-1)", "y*log(a)"],
       ["b*(b-1)*pow(a,b-2)", "pow(a,b-1)*(1+b*log(a))", "y*log(a)*log(a)"])
_entry(np.float_power, "pow(a,b)", ["b*pow(a,b-1)", "y*log(a)"],
       ["b*(b-1)*pow(a,b-2)", "pow(a,b-1)*(1+b*log(a))", "y*log(a)*log(a)"])
_entry(np.arctan2, "atan2(a,b)", ["b/(a*a+b*b)", "-a/(a*a+b*b)"],
       ["-2*a*b/((a*a+b*b)*(a*a+b*b))", "(a*a-b*b)/((a*a+b*b)*(a*a+b*b))",
        "2*a*b/((a*a+b*b)*(a*a+b*b))"])
_entry(np.hypot, "hypot(a,b)", ["a/y", "b/y"], ["b*b/(y*y*y)", "-a*b/(y*y*y)", "a*a/(y*y*y)"])
_entry(np.maximum, "max(a,b)", ["select(a>b, 1.0, select(a==b, 0.5, 0.0))",
                                "select(b>a, 1.0, select(a==b, 0.5, 0.0))"], ["0", "0", "0"])
_entry(np.minimum, "min(a,b)", ["select(a<b, 1.0, select(a==b, 0.5, 0.0))",
                                "select(b<a, 1.0, select(a==b, 0.5, 0.0))"], ["0", "0", "0"])
_entry(np.fmax, "fmax(a,b)", ["select(a>b, 1.0, select(a==b, 0.5, select(b!=b, 1.0, 0.0)))",
                              "select(b>a, 1.0, select(a==b, 0.5, select(a!=a, 1.0, 0.0)))"],
       ["0", "0", "0"])
_entry(np.fmin, "fmin(a,b)", ["select(a<b, 1.0, select(a==b, 0.5, select(b!=b, 1.0, 0.0)))",
                              "select(b<a, 1.0, select(a==b, 0.5, select(a!=a, 1.0, 0.0)))"],
       ["0", "0", "0"])
_entry(np.logaddexp, "logaddexp(a,b)", ["exp(a-y)", "exp(b-y)"],
       ["exp(a-y)*exp(b-y)", "-exp(a-y)*exp(b-y)", "exp(a-y)*exp(b-y)"])
_entry(np.logaddexp2, "logaddexp2(a,b)", ["exp2(a-y)", "exp2(b-y)"],
       ["LN2*exp2(a-y)*exp2(b-y)", "-LN2*exp2(a-y)*exp2(b-y)", "LN2*exp2(a-y)*exp2(b-y)"])
_entry(np.remainder, "a-floor(a/b)*b", ["1", "-floor(a/b)"], ["0", "0", "0"])
_entry(np.fmod, "fmod(a,b)", ["1", "-trunc(a/b)"], ["0", "0", "0"])
_entry(_sps.xlogy, "xlogy(a,b)", ["log(b)", "select(a==0, 0.0, a/b)"], ["0", "1/b", "-a/(b*b)"])

BY_UFUNC = {e.ufunc: e for e in TABLE.values()}
