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
import ast
import math
import sys
from dataclasses import dataclass, field

import numpy as np

CONSTANTS = {
    "LN2": math.log(2.0),
    "LN10": math.log(10.0),
    "DEG2RAD": math.pi / 180.0,
    "RAD2DEG": 180.0 / math.pi,
    "TWO_OVER_SQRTPI": 2.0 / math.sqrt(math.pi),
    "INV_SQRT2PI": 1.0 / math.sqrt(2.0 * math.pi),
    "SQRT2PI": math.sqrt(2.0 * math.pi),
    "SQRTPI_OVER_2": math.sqrt(math.pi) / 2.0,
    "PI_OVER_2": math.pi / 2.0,
    "TWO_PI": 2.0 * math.pi,
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
    # Inputs with no derivative (an order, gammainc's shape): derivatives wrt them are written
    # "0" so that kernels generate, and the rules raise MissingRuleError when one is asked for.
    constant: tuple = ()

    def __hash__(self):
        return id(self)


def _np_vocabulary():
    """The vocabulary's meaning on NumPy arrays (the composition path and the test oracle)."""
    ns = dict(CONSTANTS)
    for n in ["sin", "cos", "tan", "exp", "exp2", "expm1", "log", "log1p", "sqrt", "cbrt", "sinh", "cosh", "tanh", "floor", "trunc", "sign", "abs"]:
        ns[n] = getattr(np, n)
    ns.update(pow=np.power, select=_select, div=_div)
    return ns  # the scipy.special names join when the scipy section loads (load_scipy)


def _select(cond, p, q):
    """``np.where``, without its ufunc cost when the condition is one Python/NumPy bool (a
    constant exponent: ``x**2`` in a scalar loop); the operands then broadcast where used."""
    if type(cond) is bool or type(cond) is np.bool_:
        return p if cond else q
    return np.where(cond, p, q)


def _div(p, q):
    """``p / q`` with NumPy's semantics (±inf or nan, and a RuntimeWarning) also when both are
    Python numbers, where ``/`` would raise ZeroDivisionError."""
    try:
        return p / q
    except ZeroDivisionError:
        return np.true_divide(p, q)


NP_VOCABULARY = _np_vocabulary()
# rules/special.py's differentiable polygamma (trigamma and tetragamma of the scipy section call
# it, so that their own derivatives exist): special.py sets it when it loads, since it imports
# this module and this module cannot import it.
POLYGAMMA = [None]


class _DivAsCall(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            return ast.Call(ast.Name("div", ast.Load()), [node.left, node.right], [])
        return node


def numpy_division(expr):
    """``expr`` (table text or an ``ast`` expression) as source with every ``/`` spelled
    ``div(p, q)``: Python numbers reach these expressions (``x / 0.0``), and they must divide
    as NumPy does, never raise.

    Example:
        >>> numpy_division("-y/b")
        'div(-y, b)'
    """
    tree = ast.parse(expr if isinstance(expr, str) else ast.unparse(expr), mode="eval")
    return ast.unparse(ast.fix_missing_locations(_DivAsCall().visit(tree)))


def _compile_np(expr, nin):
    """A NumPy function ``(a[, b], y) -> value`` for one expression."""
    params = "a, y" if nin == 1 else "a, b, y"
    # named so that a NumPy warning raised in it is seen as the library's (core/fp_warnings.py)
    code = compile(f"lambda {params}: {numpy_division(expr)}", "<mooncake_py derivative table>",
                   "eval")
    return eval(code, dict(NP_VOCABULARY))


TABLE = {}


def _entry(ufunc, value, d1, d2, name=None, constant=()):
    d1, d2 = tuple(d1), tuple(d2)
    nin = len(d1)
    assert len(d2) == (1 if nin == 1 else 3), ufunc
    e = Entry(name or ufunc.__name__, ufunc, value, d1, d2, nin,
              tuple(_compile_np(s, nin) for s in d1), tuple(_compile_np(s, nin) for s in d2),
              tuple(constant))
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
# √(z−1)·√(z+1), not √(z²−1): the latter is arccosh's derivative negated on half of the
# complex plane; on the reals (a ≥ 1) both are the same number.
_entry(np.arccosh, "acosh(a)", ["1/(sqrt(a-1)*sqrt(a+1))"],
       ["-a/((a*a-1)*(sqrt(a-1)*sqrt(a+1)))"])
_entry(np.arctanh, "atanh(a)", ["1/(1-a*a)"], ["2*a/((1-a*a)*(1-a*a))"])
_entry(np.deg2rad, "a*DEG2RAD", ["DEG2RAD"], ["0"])
_entry(np.rad2deg, "a*RAD2DEG", ["RAD2DEG"], ["0"])
_entry(np.radians, "a*DEG2RAD", ["DEG2RAD"], ["0"], name="radians")
_entry(np.degrees, "a*RAD2DEG", ["RAD2DEG"], ["0"], name="degrees")

# --- binary ops:  ufunc,      value,   (∂y/∂a, ∂y/∂b),   (∂²y/∂a², ∂²y/∂a∂b, ∂²y/∂b²)
_entry(np.add, "a+b", ["1", "1"], ["0", "0", "0"])
_entry(np.subtract, "a-b", ["1", "-1"], ["0", "0", "0"])
_entry(np.multiply, "a*b", ["b", "a"], ["0", "1", "0"])
_entry(np.true_divide, "a/b", ["1/b", "-y/b"], ["0", "-1/(b*b)", "2*y/(b*b)"])
# Conventions at a = 0 (docs/conventions.md): an exponent whose coefficient vanishes (b = 0 in
# b·a^(b-1), b = 0 or 1 in b(b-1)·a^(b-2)) gets a harmless exponent instead, so 0·0^(-1) never
# makes a nan; ∂/∂b reads log(a) as 0 at a = 0, as JAX does (0^b is constant for b > 0).
_POW_D1 = ["b*pow(a,select(b==0,1,b-1))", "y*log(select(a==0,1,a))"]
_POW_D2 = ["b*(b-1)*pow(a,select(b==0,2,select(b==1,2,b-2)))",
           "pow(a,b-1)*(1+b*log(select(a==0,1,a)))",
           "y*log(select(a==0,1,a))*log(select(a==0,1,a))"]
_entry(np.power, "pow(a,b)", _POW_D1, _POW_D2)
_entry(np.float_power, "pow(a,b)", _POW_D1, _POW_D2)
_entry(np.arctan2, "atan2(a,b)", ["b/(a*a+b*b)", "-a/(a*a+b*b)"],
       ["-2*a*b/((a*a+b*b)*(a*a+b*b))", "(a*a-b*b)/((a*a+b*b)*(a*a+b*b))",
        "2*a*b/((a*a+b*b)*(a*a+b*b))"])
# at a = b = 0 the gradient is 0, as for np.linalg.norm (a/y = 0/0 otherwise); the second
# derivatives stay 0/0 = nan there: the curvature of a cone's tip is unbounded.
_entry(np.hypot, "hypot(a,b)", ["a/select(y==0,1,y)", "b/select(y==0,1,y)"],
       ["b*b/(y*y*y)", "-a*b/(y*y*y)", "a*a/(y*y*y)"])
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

BY_UFUNC = {e.ufunc: e for e in TABLE.values()}


# --- scipy.special --------------------------------------------------------------------------
# Registered on first need (load_scipy), so that ``import mooncake_py`` does not import scipy:
# by the mooncake_py.scipy.special module, or on a rule miss for a scipy.special ufunc (whoever
# calls one has imported scipy.special already). Derivatives of special functions are written
# with special functions that are themselves entries (Bessel recurrences, polygamma(n+1) for
# polygamma(n)), so nested derivatives of any order stay inside the table.
SCIPY_UFUNCS = frozenset(
    ["expit", "logit", "log_expit", "erf", "erfc", "erfinv", "erfcinv", "ndtr", "log_ndtr", "ndtri", "gammaln", "loggamma", "psi", "digamma", "gamma", "rgamma", "i0", "i1", "i0e", "i1e", "j0", "j1", "y0", "y1", "entr", "xlogy", "xlog1py", "betaln", "beta", "rel_entr", "kl_div", "gammainc", "gammaincc", "iv", "ive", "kv", "jv", "yv", "yn"])
"""The scipy.special ufuncs the table covers (re-exported by mooncake_py.scipy.special)."""

SCIPY_RULED_UFUNCS = frozenset(["betainc", "gammasgn"])
"""scipy.special ufuncs with rules of their own (betainc: three inputs) or none (gammasgn: zero
derivative), registered when the scipy section loads; re-exported by mooncake_py.scipy.special
too."""

# Inputs without a derivative, by scipy's parameter name: an order, or gammainc's shape (its
# derivative in the shape has no cheap accurate closed form).
_CONSTANT_PARAMS = {"gammainc": "a", "gammaincc": "a", "iv": "v", "ive": "v", "kv": "v",
                    "jv": "v", "yv": "v", "yn": "n"}

_SCIPY = []   # [scipy.special or None] once loaded
_ON_NEW = []  # callbacks registering rules for new entries (rules and dual layers)
_ON_LOAD = []  # callbacks registering rules of scipy.special ufuncs outside the table


def on_scipy_load(register):
    """Call ``register(scipy.special)`` once the scipy section loads (now, if it has), for the
    rules of scipy.special ufuncs that are not table entries. Returns ``register``."""
    _ON_LOAD.append(register)
    if _SCIPY and _SCIPY[0] is not None:
        register(_SCIPY[0])
    return register


def on_new_entries(register):
    """Call ``register(entries)`` now for every entry, and again for entries added later (the
    scipy section). Returns ``register``."""
    _ON_NEW.append(register)
    register(list(TABLE.values()))
    return register


def constant_input_message(entry, k):
    """The MissingRuleError text for a derivative asked of ``entry``'s constant input ``k``."""
    param = _CONSTANT_PARAMS.get(entry.name, f"argument {k + 1}")
    return (f"scipy.special.{entry.name} has no derivative with respect to its argument "
            f"{param!r} (input {k + 1}): mooncake_py treats it as a constant. Pass a plain "
            f"number or array for {param!r}, or wrap it in mp.stop_gradient(...) if its "
            "derivative may be dropped.")


def load_scipy():
    """Import scipy.special and register the table's scipy.special section (once).

    Returns the module, or None without scipy.

    Example:
        >>> from mooncake_py.rules.derivative_table import load_scipy, TABLE
        >>> load_scipy().__name__, "gammaln" in TABLE
        ('scipy.special', True)
    """
    if _SCIPY:
        return _SCIPY[0]
    try:
        import scipy.special as sps
    except ImportError:  # pragma: no cover - scipy is a dependency of the test setup only
        _SCIPY.append(None)
        return None
    NP_VOCABULARY.update(
        erf=sps.erf, erfc=sps.erfc, expit=sps.expit, digamma=sps.digamma, lgamma=sps.gammaln,
        trigamma=lambda a: POLYGAMMA[0](1, a), tetragamma=lambda a: POLYGAMMA[0](2, a),
        i0e=sps.i0e, i1e=sps.i1e, i0=sps.i0, i1=sps.i1, j0=sps.j0, j1=sps.j1, y0=sps.y0,
        y1=sps.y1, iv=sps.iv, ive=sps.ive, kv=sps.kv, jv=sps.jv, yv=sps.yv, yn=sps.yn)
    before = set(TABLE)
    _scipy_section(sps)
    new = [e for n, e in TABLE.items() if n not in before]
    BY_UFUNC.update((e.ufunc, e) for e in new)
    _SCIPY.append(sps)
    for register in _ON_NEW:
        register(new)
    for register in _ON_LOAD:
        register(sps)
    return sps


def load_for(fn):
    """On a rule miss: load the scipy section if ``fn`` is a scipy.special ufunc and it is not
    loaded yet. Returns whether it loaded (then look the rule up again)."""
    if _SCIPY or type(fn) is not np.ufunc:
        return False
    sps = sys.modules.get("scipy.special")
    if sps is None or getattr(sps, fn.__name__, None) is not fn:
        return False
    return load_scipy() is not None


def _scipy_section(sps):
    # --- unary: ufunc,   value,             (∂y/∂a,),              (∂²y/∂a²,)
    _entry(sps.expit, "1/(1+exp(-a))", ["y*(1-y)"], ["y*(1-y)*(1-2*y)"])
    _entry(sps.logit, "log(a/(1-a))", ["1/(a*(1-a))"], ["(2*a-1)/(a*a*(1-a)*(1-a))"])
    _entry(sps.log_expit, "log_expit(a)", ["expit(-a)"], ["-expit(a)*expit(-a)"])
    _entry(sps.erf, "erf(a)", ["TWO_OVER_SQRTPI*exp(-a*a)"], ["-2*a*TWO_OVER_SQRTPI*exp(-a*a)"])
    _entry(sps.erfc, "erfc(a)", ["-TWO_OVER_SQRTPI*exp(-a*a)"],
           ["2*a*TWO_OVER_SQRTPI*exp(-a*a)"])
    _entry(sps.erfinv, "erfinv(a)", ["SQRTPI_OVER_2*exp(y*y)"], ["PI_OVER_2*y*exp(2*y*y)"])
    _entry(sps.erfcinv, "erfcinv(a)", ["-SQRTPI_OVER_2*exp(y*y)"], ["PI_OVER_2*y*exp(2*y*y)"])
    _entry(sps.ndtr, "ndtr(a)", ["INV_SQRT2PI*exp(-0.5*a*a)"], ["-a*INV_SQRT2PI*exp(-0.5*a*a)"])
    _entry(sps.log_ndtr, "log_ndtr(a)", ["INV_SQRT2PI*exp(-0.5*a*a-y)"],
           ["-INV_SQRT2PI*exp(-0.5*a*a-y)*(a+INV_SQRT2PI*exp(-0.5*a*a-y))"])
    _entry(sps.ndtri, "ndtri(a)", ["SQRT2PI*exp(0.5*y*y)"], ["TWO_PI*y*exp(y*y)"])
    _entry(sps.gammaln, "lgamma(a)", ["digamma(a)"], ["trigamma(a)"])
    _entry(sps.loggamma, "loggamma(a)", ["digamma(a)"], ["trigamma(a)"])
    _entry(sps.digamma, "digamma(a)", ["trigamma(a)"], ["tetragamma(a)"])
    _entry(sps.gamma, "gamma(a)", ["y*digamma(a)"], ["y*(digamma(a)*digamma(a)+trigamma(a))"])
    _entry(sps.rgamma, "rgamma(a)", ["-y*digamma(a)"],
           ["y*(digamma(a)*digamma(a)-trigamma(a))"])
    _entry(sps.entr, "entr(a)", ["-log(a)-1"], ["-1/a"])
    # Bessel functions: I0' = I1, I1' = (I0 + I2)/2, J1' = (J0 - J2)/2, ...; the exponentially
    # scaled e^(-|a|)·I_v add -sign(a)·y per derivative.
    _entry(sps.i0, "i0(a)", ["i1(a)"], ["0.5*(y+iv(2,a))"])
    _entry(sps.i1, "i1(a)", ["0.5*(i0(a)+iv(2,a))"], ["0.25*(3*y+iv(3,a))"])
    _entry(sps.i0e, "i0e(a)", ["i1e(a)-sign(a)*y"],
           ["0.5*(y+ive(2,a))-2*sign(a)*i1e(a)+sign(a)*sign(a)*y"])
    _entry(sps.i1e, "i1e(a)", ["0.5*(i0e(a)+ive(2,a))-sign(a)*y"],
           ["0.75*y+0.25*ive(3,a)-sign(a)*(i0e(a)+ive(2,a))+sign(a)*sign(a)*y"])
    # J1' = J0 - J1/a (1/2 at 0) and Bessel's equation for the second derivatives keep these
    # four in CUDA's math library (j0 j1 y0 y1), so they get GPU kernels
    _entry(sps.j0, "j0(a)", ["-j1(a)"], ["select(a==0, 0.5, j1(a)/select(a==0, 1, a))-y"])
    _entry(sps.j1, "j1(a)", ["j0(a)-select(a==0, 0.5, y/select(a==0, 1, a))"],
           ["select(a==0, 0, (2*y/select(a==0, 1, a)-j0(a))/select(a==0, 1, a))-y"])
    _entry(sps.y0, "y0(a)", ["-y1(a)"], ["y1(a)/a-y"])
    _entry(sps.y1, "y1(a)", ["y0(a)-y/a"], ["(2*y/a-y0(a))/a-y"])

    # --- binary: ufunc, value, (∂y/∂a, ∂y/∂b), (∂²y/∂a², ∂²y/∂a∂b, ∂²y/∂b²)
    # ∂/∂b is 0 all along a = 0, so ∂²/∂b² is too (not 0/0 = nan at b = 0, resp. b = -1, where
    # a stats log-density meets the edge of its support with a zero exponent)
    _entry(sps.xlogy, "xlogy(a,b)", ["log(b)", "select(a==0, 0.0, a/b)"],
           ["0", "1/b", "select(a==0, 0.0, -a/(b*b))"])
    _entry(sps.xlog1py, "xlog1py(a,b)", ["log1p(b)", "select(a==0, 0.0, a/(1+b))"],
           ["0", "1/(1+b)", "select(a==0, 0.0, -a/((1+b)*(1+b)))"])
    _entry(sps.betaln, "betaln(a,b)", ["digamma(a)-digamma(a+b)", "digamma(b)-digamma(a+b)"],
           ["trigamma(a)-trigamma(a+b)", "-trigamma(a+b)", "trigamma(b)-trigamma(a+b)"])
    _entry(sps.beta, "beta(a,b)", ["y*(digamma(a)-digamma(a+b))", "y*(digamma(b)-digamma(a+b))"],
           ["y*((digamma(a)-digamma(a+b))*(digamma(a)-digamma(a+b))+trigamma(a)-trigamma(a+b))",
            "y*((digamma(a)-digamma(a+b))*(digamma(b)-digamma(a+b))-trigamma(a+b))",
            "y*((digamma(b)-digamma(a+b))*(digamma(b)-digamma(a+b))+trigamma(b)-trigamma(a+b))"])
    _entry(sps.rel_entr, "rel_entr(a,b)", ["log(a/b)+1", "-a/b"], ["1/a", "-1/b", "a/(b*b)"])
    _entry(sps.kl_div, "kl_div(a,b)", ["log(a/b)", "1-a/b"], ["1/a", "-1/b", "a/(b*b)"])
    # regularised incomplete gamma P(a, x), Q(a, x): derivative in x only
    _entry(sps.gammainc, "gammainc(a,b)", ["0", "exp((a-1)*log(b)-b-lgamma(a))"],
           ["0", "0", "exp((a-1)*log(b)-b-lgamma(a))*((a-1)/b-1)"], constant=(0,))
    _entry(sps.gammaincc, "gammaincc(a,b)", ["0", "-exp((a-1)*log(b)-b-lgamma(a))"],
           ["0", "0", "-exp((a-1)*log(b)-b-lgamma(a))*((a-1)/b-1)"], constant=(0,))
    # Bessel functions of order a (a constant) in b
    _entry(sps.iv, "iv(a,b)", ["0", "0.5*(iv(a-1,b)+iv(a+1,b))"],
           ["0", "0", "0.25*(iv(a-2,b)+2*y+iv(a+2,b))"], constant=(0,))
    _entry(sps.ive, "ive(a,b)", ["0", "0.5*(ive(a-1,b)+ive(a+1,b))-sign(b)*y"],
           ["0", "0", ("0.25*(ive(a-2,b)+2*y+ive(a+2,b))-sign(b)*(ive(a-1,b)+ive(a+1,b))"
            "+sign(b)*sign(b)*y")], constant=(0,))
    _entry(sps.kv, "kv(a,b)", ["0", "-0.5*(kv(a-1,b)+kv(a+1,b))"],
           ["0", "0", "0.25*(kv(a-2,b)+2*y+kv(a+2,b))"], constant=(0,))
    _entry(sps.jv, "jv(a,b)", ["0", "0.5*(jv(a-1,b)-jv(a+1,b))"],
           ["0", "0", "0.25*(jv(a-2,b)-2*y+jv(a+2,b))"], constant=(0,))
    _entry(sps.yv, "yv(a,b)", ["0", "0.5*(yv(a-1,b)-yv(a+1,b))"],
           ["0", "0", "0.25*(yv(a-2,b)-2*y+yv(a+2,b))"], constant=(0,))
    # integer order n: Y_n' = (Y_{n-1} - Y_{n+1})/2, written with yv (any order, the same values)
    _entry(sps.yn, "yn(a,b)", ["0", "0.5*(yv(a-1,b)-yv(a+1,b))"],
           ["0", "0", "0.25*(yv(a-2,b)-2*y+yv(a+2,b))"], constant=(0,))
