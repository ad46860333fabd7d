"""Kernel source text from the derivative table: one intermediate form, three emitters.

The forward-mode work of an elementwise op is a short straight-line program per element, built
here from a :class:`~mooncake_py.rules.derivative_table.Entry`'s strings:

- the *frule* of the op: ``(a, ȧ[, b, ḃ]) -> (y, ẏ)`` with ``ẏ = ∂y/∂a·ȧ + ∂y/∂b·ḃ``;
- the frule of its *pullback* ``ew_pullback(entry, k, g, a[, b], y) = g·∂y/∂x_k``:
  ``(g, ġ, a, ȧ[, b, ḃ], y) -> (r, ṙ)`` with ``ṙ = ġ·∂y/∂x_k + g·Σ_j ∂²y/∂x_k∂x_j·ẋ_j``.

Only inputs that carry a tangent contribute terms (``x**c`` with a constant ``c`` never evaluates
``log(x)``, which is nan for ``x < 0``); the output's tangent is never needed because the table's
derivatives are total derivatives written in terms of ``y``'s primal.

A program (:class:`KernelIR`) is a list of statements whose right-hand sides are Python ``ast``
expressions in the table's vocabulary. Emitters turn it into:

- :func:`numpy_source`: whole-array Python (the NumPy-composition path and the test oracle);
- :func:`numba_source`: a loop over elements (and lanes) for ``numba.njit``;
- :func:`c_source`: CUDA C statements; :func:`cuda_kernel`: a whole CuPy ``ElementwiseKernel``
  (parameters, body, and the device definitions of calls CUDA lacks, :func:`c_preamble`).

:func:`hoist` moves calls that numba would evaluate with scalar libm (``exp``, ``tanh``,
``digamma``...) out of the loop, to be computed by NumPy's SIMD ufuncs (or scipy) beforehand;
the loop then fuses all the arithmetic. On these CPUs NumPy's ``tanh`` is ~10× faster than a
scalar libm call, so fusing a transcendental into the loop would be a loss, not a gain. A GPU
emitter keeps every call inline.

Example:
    >>> from mooncake_py.rules.derivative_table import TABLE
    >>> ir = frule_ir(TABLE["tanh"], (True,))
    >>> print(numpy_source(ir, "f", given=("y",)))  # doctest: +NORMALIZE_WHITESPACE
    def f(a, b, y, g, ta, tb, tg):
        d0 = 1 - y * y
        ty = d0 * ta
        return (ty,)
"""
import ast
import re
from dataclasses import dataclass
from typing import ClassVar

from ..rules.derivative_table import CONSTANTS, numpy_division

# Calls a CPU loop evaluates inline: exact or nearly free. Everything else is hoisted to NumPy.
CPU_INLINE = frozenset({"sqrt", "abs", "floor", "trunc", "sign", "select"})

# Constant exponents for which ``pow`` is specialised into multiplications/square roots.
SPECIAL_EXPONENTS = (0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5)

_HOISTED = re.compile(r"h\d+")

# In ``d2`` of a binary entry, the index of ∂²y/∂x_k∂x_j.
_D2_INDEX = ((0, 1), (1, 2))


@dataclass(frozen=True)
class Stmt:
    """``name = expr``. kind: "let" (a per-element temporary), "out" (a primal output) or
    "tout" (a tangent output, which may read lane-indexed tangent inputs)."""
    kind: str
    name: str
    expr: ast.expr


@dataclass(frozen=True)
class KernelIR:
    """A straight-line elementwise program. ``inputs``: primal input names (of a, b, y, g);
    ``tangents``: tangent input names (of ta, tb, tg); ``hoisted``: names of precomputed
    temporaries (after :func:`hoist`)."""
    name: str
    inputs: tuple
    tangents: tuple
    body: tuple
    hoisted: tuple = ()

    @property
    def outs(self):
        return tuple(s.name for s in self.body if s.kind == "out")

    @property
    def touts(self):
        return tuple(s.name for s in self.body if s.kind == "tout")


# --- expression helpers ---------------------------------------------------------------------
def parse(text):
    """The ``ast`` expression of a table string."""
    return ast.parse(text, mode="eval").body


def _const(node):
    """The float value of a constant node (literal or named constant), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const(node.operand)
        return None if v is None else -v
    return None


def _num(v):
    v = float(v)
    if v < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-v))
    return ast.Constant(int(v) if v.is_integer() and abs(v) < 2 ** 31 else v)


def _call(fn, *args):
    return ast.Call(ast.Name(fn, ast.Load()), list(args), [])


def _name(n):
    return ast.Name(n, ast.Load())


def mul(x, y):
    """``x*y`` with the exact simplifications ±1·y and 0·y = 0 (a derivative term that vanishes
    identically is dropped, so 0·inf never produces a nan)."""
    cx, cy = _const(x), _const(y)
    if cx == 0 or cy == 0:
        return _num(0)
    if cx == 1:
        return y
    if cy == 1:
        return x
    if cx == -1:
        return ast.UnaryOp(ast.USub(), y)
    if cy == -1:
        return ast.UnaryOp(ast.USub(), x)
    if cx is not None and cy is not None:
        return _num(cx * cy)
    return ast.BinOp(x, ast.Mult(), y)


def add(terms):
    """The sum of the non-zero ``terms`` (None when there is none)."""
    terms = [t for t in terms if t is not None and _const(t) != 0]
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = ast.BinOp(out, ast.Add(), t)
    return out


class _Specialise(ast.NodeTransformer):
    """Substitute constants for names, fold constant arithmetic, and expand ``pow`` with a small
    constant exponent into multiplications (``pow(a, 2) -> a*a``)."""

    def __init__(self, values):
        self.values = values

    def visit_Name(self, node):
        if node.id in self.values:
            return _num(self.values[node.id])
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        l, r = _const(node.left), _const(node.right)
        if l is not None and r is not None:
            ops = {ast.Add: lambda: l + r, ast.Sub: lambda: l - r, ast.Mult: lambda: l * r,
                   ast.Div: lambda: l / r if r else None}
            f = ops.get(type(node.op))
            v = f() if f else None
            if v is not None:
                return _num(v)
        if isinstance(node.op, ast.Mult):
            return mul(node.left, node.right)
        if isinstance(node.op, (ast.Add, ast.Sub)) and r == 0:
            return node.left
        if isinstance(node.op, ast.Add) and l == 0:
            return node.right
        if isinstance(node.op, ast.Sub) and l == 0:
            return ast.UnaryOp(ast.USub(), node.right)
        if isinstance(node.op, ast.Div) and r == 1:
            return node.left
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        v = _const(node.operand)
        if isinstance(node.op, ast.USub) and v is not None:
            return _num(-v)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        l = _const(node.left)
        r = _const(node.comparators[0]) if len(node.comparators) == 1 else None
        if l is not None and r is not None:
            op = {ast.Eq: l == r, ast.NotEq: l != r, ast.Lt: l < r, ast.Gt: l > r,
                  ast.LtE: l <= r, ast.GtE: l >= r}.get(type(node.ops[0]))
            if op is not None:
                return ast.Constant(bool(op))
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "select" and len(node.args) == 3 \
                and isinstance(node.args[0], ast.Constant) and type(node.args[0].value) is bool:
            return node.args[1] if node.args[0].value else node.args[2]
        if isinstance(node.func, ast.Name) and node.func.id == "pow" and len(node.args) == 2:
            x, c = node.args[0], _const(node.args[1])
            if c == 0:
                return _num(1)
            if c == 1:
                return x
            if c == 2:
                return ast.BinOp(x, ast.Mult(), x)
            if c == 3:
                return ast.BinOp(ast.BinOp(x, ast.Mult(), x), ast.Mult(), x)
            if c == -1:
                return ast.BinOp(_num(1), ast.Div(), x)
            if c == -2:
                return ast.BinOp(_num(1), ast.Div(), ast.BinOp(x, ast.Mult(), x))
            if c == 0.5:
                return _call("sqrt", x)
            if c == -0.5:
                return ast.BinOp(_num(1), ast.Div(), _call("sqrt", x))
        return node


def specialise(expr, values=None):
    """``expr`` with ``values`` substituted and constants folded (a new tree)."""
    tree = parse(ast.unparse(expr)) if isinstance(expr, ast.AST) else parse(expr)
    return ast.fix_missing_locations(_Specialise(values or {}).visit(tree))


def free_names(expr):
    """Variable names an expression reads (function names excluded)."""
    calls = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and id(n) not in calls
            and n.id not in CONSTANTS and not _HOISTED.fullmatch(n.id)}


def is_exact(expr):
    """Whether ``expr`` is a single correctly-rounded operation (or a copy) of its inputs, so
    that computing it inside a loop gives the very bits NumPy's ufunc gives."""
    def leaf(n):
        return isinstance(n, ast.Name) or _const(n) is not None
    if leaf(expr):
        return True
    if isinstance(expr, ast.UnaryOp):
        return leaf(expr.operand)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return leaf(expr.left) and leaf(expr.right)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return expr.func.id in ("sqrt", "abs") and len(expr.args) == 1 and leaf(expr.args[0])
    return False


# Calls whose value stays finite wherever their arguments are finite: a derivative built only
# from these, + - * and constants cannot be inf or nan at a finite point.
_FINITE_CALLS = frozenset({"abs", "sign", "select", "floor", "trunc", "sin", "cos", "max", "min"})


def may_be_nonfinite(expr):
    """Whether a derivative expression can be inf/nan at finite inputs (a division, ``log``,
    ``pow``, ``sqrt``...): such a partial must never multiply a zero tangent, since the
    partial of one operand would then poison the derivative along the other.

    Example:
        >>> may_be_nonfinite(parse("2*a*b")), may_be_nonfinite(parse("0.5/y"))
        (False, True)
    """
    for n in ast.walk(expr):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.Pow)):
            return True
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name)
                                            and n.func.id in _FINITE_CALLS):
            return True
    return False


def tangent_product(d, t, guard):
    """``d·t``; with ``guard``, 0 where the tangent ``t`` is 0 whatever ``d`` is: a direction
    (a jvp's, or a Hessian lane) that does not move an element must not pick up its infinite
    or undefined partial. So ``jvp(lambda x: np.sum(x / 0.0))`` along e₀ is inf, as the
    gradient says, not inf + 0·inf = nan; a lane moving only ``x`` in ``x**y`` at x < 0 does
    not see ``∂/∂y = nan``; and a Hessian lane j sees no nan from another element's pole.

    Example:
        >>> ast.unparse(tangent_product(parse("1/b"), parse("ta"), True))
        'select(ta == 0, 0, 1 / b * ta)'
    """
    p = mul(d, t)
    if not guard or _const(p) is not None:
        return p
    return _call("select", ast.Compare(t, [ast.Eq()], [_num(0)]), _num(0), p)


# --- building programs from table entries ---------------------------------------------------
def _operands(entry):
    return ("a",) if entry.nin == 1 else ("a", "b")


def _values(const_b):
    return {} if const_b is None else {"b": const_b}


def frule_ir(entry, present, const_b=None):
    """The frule program of ``entry``; ``present[j]``: whether operand j carries a tangent.
    ``const_b``: a constant second operand to specialise on (see :data:`SPECIAL_EXPONENTS`)."""
    vals = _values(const_b)
    ops = _operands(entry)
    value = specialise(entry.value, vals)
    body = [Stmt("out", "y", value)]
    terms = []
    for j, (x, has) in enumerate(zip(ops, present)):
        if not has:
            continue
        d = specialise(entry.d1[j], vals)
        guard = may_be_nonfinite(d)
        if _const(d) is None:
            body.append(Stmt("let", f"d{j}", d))
            d = _name(f"d{j}")
        terms.append(tangent_product(d, _name("t" + x), guard))
    ty = add(terms)
    if ty is not None:
        body.append(Stmt("tout", "ty", ty))
    return make_ir(f"{entry.name}_frule", body)


def pullback_ir(entry, k, present, const_b=None):
    """The frule program of ``ew_pullback(entry, k, g, *xs)``: ``present`` = (ġ, ȧ[, ḃ]) flags."""
    vals = _values(const_b)
    ops = _operands(entry)
    body = []
    d = specialise(entry.d1[k], vals)
    d_risky = may_be_nonfinite(d)
    if _const(d) is None:
        body.append(Stmt("let", "d", d))
        d = _name("d")
    # r keeps g's shape even when the derivative vanishes identically (x**0)
    r = ast.BinOp(_name("g"), ast.Mult(), d) if _const(d) == 0 else mul(_name("g"), d)
    body.append(Stmt("out", "r", r))
    inner = []
    for j, (x, has) in enumerate(zip(ops, present[1:])):
        if not has:
            continue
        e = specialise(entry.d2[0] if entry.nin == 1 else entry.d2[_D2_INDEX[k][j]], vals)
        if _const(e) == 0:
            continue
        guard = may_be_nonfinite(e)
        if _const(e) is None:
            body.append(Stmt("let", f"e{j}", e))
            e = _name(f"e{j}")
        inner.append(tangent_product(e, _name("t" + x), guard))
    terms = [tangent_product(d, _name("tg"), d_risky) if present[0] else None]
    s = add(inner)
    if s is not None:
        terms.append(mul(_name("g"), s))
    tr = add(terms)
    if tr is not None:
        body.append(Stmt("tout", "tr", tr))
    return make_ir(f"{entry.name}_pullback{k}", body)


_PRIMAL_NAMES = ("a", "b", "y", "g")
_TANGENT_NAMES = ("ta", "tb", "tg")


def make_ir(name, body, hoisted=()):
    """A :class:`KernelIR` whose inputs are the names its statements read before defining."""
    defined, read = set(), set()
    for s in body:
        read |= free_names(s.expr) - defined
        defined.add(s.name)
    return KernelIR(name, tuple(n for n in _PRIMAL_NAMES if n in read),
                    tuple(n for n in _TANGENT_NAMES if n in read), tuple(body), tuple(hoisted))


def drop_out(ir, name):
    """``ir`` with primal output ``name`` removed, so that it is read as an input instead (NumPy
    computes it: the composition path, or a value a loop could not reproduce bit for bit)."""
    return make_ir(ir.name, [s for s in ir.body if not (s.kind == "out" and s.name == name)],
                   ir.hoisted)


def hoist(ir, inline=CPU_INLINE):
    """Move every call not in ``inline`` out of the per-element statements.

    Returns ``(hoisted, new_ir)``: ``hoisted`` is a tuple of ``(name, expr)`` to evaluate on
    whole arrays first (they read only primal inputs), ``new_ir`` reads them as inputs ``h0``...
    An output statement whose value would need a hoisted call (``y = tanh(a)``) is dropped and
    ``y`` becomes an input: NumPy computes it.
    """
    found = {}

    class _H(ast.NodeTransformer):
        def visit_Call(self, node):
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if fn in inline:
                self.generic_visit(node)
                return node
            key = ast.dump(node)
            if key not in found:
                found[key] = (f"h{len(found)}", node)
            return _name(found[key][0])

    if any(s.kind == "out" and s.name == "y" and not is_exact(s.expr) for s in ir.body):
        ir = drop_out(ir, "y")
    body = []
    for s in ir.body:
        e = _H().visit(parse(ast.unparse(s.expr)))
        body.append(Stmt(s.kind, s.name, ast.fix_missing_locations(e)))
    hoisted = tuple((n, e) for n, e in found.values())
    if "y" not in ir.inputs and any("y" in free_names(e) for _, e in hoisted):
        ir = drop_out(ir, "y")  # a hoisted value reads y: let NumPy compute y first
        return hoist(ir, inline)
    return hoisted, make_ir(ir.name, body, tuple(n for n, _ in hoisted))


def op_count(ir):
    """Arithmetic operations per element (binary, unary, comparisons, selects, inline calls):
    a program with at most one gains nothing from fusion over NumPy's single ufunc call."""
    return sum(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.IfExp))
               for s in ir.body for n in ast.walk(s.expr))


# --- emitters -------------------------------------------------------------------------------
def expr_source(expr):
    """Python source of an expression for whole-array NumPy evaluation: the vocabulary names
    unchanged, ``/`` spelled ``div(p, q)`` (NumPy's division, also for two Python numbers)."""
    return numpy_division(expr)


def numpy_source(ir, fname, given=()):
    """A whole-array Python function ``fname(a, b, y, g, ta, tb, tg)`` returning the tuple of the
    program's outputs (primal outputs not in ``given``, then tangent outputs). Run it with
    :data:`~mooncake_py.rules.derivative_table.NP_VOCABULARY` as globals."""
    lines = [f"def {fname}(a, b, y, g, ta, tb, tg):"]
    rets = []
    for s in ir.body:
        if s.kind == "out" and s.name in given:
            continue
        lines.append(f"    {s.name} = {expr_source(s.expr)}")
        if s.kind != "let":
            rets.append(s.name)
    lines.append(f"    return ({', '.join(rets)}{',' if rets else ''})")
    return "\n".join(lines)


def numpy_source_given(ir, fname, params, given, returns):
    """A Python function ``fname(*params)`` running the statements of ``ir`` except those that
    define a name in ``given`` (those arrive as parameters: a value computed earlier, to be
    reused), returning the names in ``returns``. The statements run are
    :func:`numpy_source`'s, in its order, so every value is computed the same way.

    Example:
        >>> from mooncake_py.rules.derivative_table import TABLE
        >>> ir = pullback_ir(TABLE["sin"], 0, (True, True))
        >>> print(numpy_source_given(ir, "f", ("d", "a", "y", "g", "ta", "tg"), ("d",),
        ...                          ("r", "tr")))  # doctest: +NORMALIZE_WHITESPACE
        def f(d, a, y, g, ta, tg):
            r = g * d
            e0 = -y
            tr = d * tg + g * (e0 * ta)
            return (r, tr,)
    """
    lines = [f"def {fname}({', '.join(params)}):"]
    for s in ir.body:
        if s.name not in given:
            lines.append(f"    {s.name} = {expr_source(s.expr)}")
    lines.append(f"    return ({', '.join(returns)}{',' if returns else ''})")
    return "\n".join(lines)


def let_source(ir, name):
    """The source of the expression ``ir`` binds to the temporary ``name``, or None."""
    for s in ir.body:
        if s.kind == "let" and s.name == name:
            return expr_source(s.expr)
    return None


class _ToNumba(ast.NodeTransformer):
    """Vocabulary -> numba-compilable Python: ``select`` to a conditional expression, cheap
    calls to their NumPy scalar forms, literals and named constants cast to the kernel dtype."""
    _FUNCS: ClassVar[dict] = {"sqrt": "np.sqrt", "abs": "np.abs", "floor": "np.floor", "trunc": "np.trunc",
              "sign": "np.sign"}

    def visit_Call(self, node):
        self.generic_visit(node)
        fn = node.func.id
        if fn == "select":
            c, p, q = node.args
            return ast.IfExp(c, p, q)
        if fn not in self._FUNCS:
            raise ValueError(f"{fn}() cannot be evaluated inside a CPU kernel; hoist it")
        node.func = parse(self._FUNCS[fn])
        return node

    def visit_Constant(self, node):
        return _call("_F", ast.Constant(float(node.value)))

    def visit_Name(self, node):
        if node.id in CONSTANTS:
            return _call("_F", ast.Constant(CONSTANTS[node.id]))
        return node


def numba_source(ir, fname, scalars=frozenset(), dtype="float64"):
    """Source of a module defining ``fname``, an ``@numba.njit(cache=True)`` loop kernel.

    Signature: ``fname(n, k, <inputs>, <hoisted>, <tangents>, <outputs>)``. Array inputs are
    1-D of length n (names upper-cased), inputs in ``scalars`` are plain numbers (their
    tangents arrays of shape (k,)), tangents of array inputs are (k, n), primal outputs (n,) and
    tangent outputs (k, n). Lane 0 is computed in the same pass as the primal outputs.
    """
    def conv(e):
        return ast.unparse(ast.fix_missing_locations(_ToNumba().visit(parse(ast.unparse(e)))))

    prim = list(ir.inputs) + list(ir.hoisted)
    params = ["n", "k"]
    params += [p if p in scalars else p.upper() for p in prim]
    params += [t.upper() for t in ir.tangents]
    params += [s.name.upper() for s in ir.body if s.kind != "let"]
    loads = [f"{p} = {p.upper()}[i]" for p in prim if p not in scalars]

    def tload(t, lane):
        src = t[1:]
        return f"{t} = {t.upper()}[{lane}]" if src in scalars else f"{t} = {t.upper()}[{lane}, i]"

    def body(lane, first):
        out = list(loads) + [tload(t, lane) for t in ir.tangents]
        for s in ir.body:
            if s.kind == "out":
                out.append(f"{s.name} = {conv(s.expr)}" if first
                           else f"{s.name} = {s.name.upper()}[i]")
                if first:
                    out.append(f"{s.name.upper()}[i] = {s.name}")
            elif s.kind == "let":
                out.append(f"{s.name} = {conv(s.expr)}")
            else:
                out.append(f"{s.name.upper()}[{lane}, i] = {conv(s.expr)}")
        return out

    src = ["import numpy as np", "import numba", f"_F = np.{dtype}", "",
           "@numba.njit(cache=True, nogil=True, error_model='numpy', boundscheck=False)",
           f"def {fname}({', '.join(params)}):",
           "    for i in range(n):"]
    src += ["        " + line for line in body(0, True)]
    if ir.touts:
        src += ["    for l in range(1, k):", "        for i in range(n):"]
        src += ["            " + line for line in body("l", False)]
    return "\n".join(src) + "\n"


_C_FUNCS = {"abs": "fabs", "pow": "pow", "asin": "asin", "acos": "acos", "atan": "atan",
            "atan2": "atan2", "max": "fmax", "min": "fmin"}
# Vocabulary calls with no CUDA math-library counterpart: emitted as ``mc_<name>`` calls, whose
# device definitions :func:`c_preamble` supplies.
C_MISSING = frozenset({"digamma", "trigamma", "tetragamma", "ndtr", "log_ndtr", "logaddexp",
                       "logaddexp2", "xlogy"})
# The CUDA math functions (and operators' helpers) a generated body may call; anything else it
# calls must come from the preamble.
C_MATH = frozenset({"sin", "cos", "tan", "exp", "exp2", "expm1", "log", "log1p", "sqrt", "cbrt",
                    "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2", "asinh", "acosh",
                    "atanh", "floor", "trunc", "fabs", "pow", "hypot", "fmod", "fmax", "fmin",
                    "erf", "erfc", "lgamma", "j0", "j1", "y0", "y1"})


_HAS_CUDA = {}


def has_cuda(entry):
    """Whether every function ``entry``'s expressions call has a CUDA spelling (the math library
    or a ``mc_*`` definition of :func:`c_preamble`). Entries that call others (the Bessel
    functions, erfinv, betaln ...) get no GPU kernel: on a device their NumPy composition runs.

    Example:
        >>> from mooncake_py.rules.derivative_table import TABLE, load_scipy
        >>> _ = load_scipy()
        >>> has_cuda(TABLE["tanh"]), has_cuda(TABLE["j0"]), has_cuda(TABLE["jv"])
        (True, True, False)
    """
    ok = _HAS_CUDA.get(entry)
    if ok is None:
        calls = set()
        for text in (entry.value,) + entry.d1 + entry.d2:
            calls |= {n.func.id for n in ast.walk(parse(text)) if isinstance(n, ast.Call)}
        ok = _HAS_CUDA[entry] = all(
            fn in ("select", "sign") or fn in C_MISSING or _C_FUNCS.get(fn, fn) in C_MATH
            for fn in calls)
    return ok


def c_expr(expr, ctype=None):
    """CUDA C text of an expression: ``select`` as ``?:``, every operation parenthesised, calls
    in :data:`C_MISSING` as ``mc_<name>``. Literals are doubles, or, with ``ctype``, cast to it
    (``T(0.5)``) so that a float32 kernel computes in float32 as NumPy does."""
    def lit(v):
        return f"{ctype}({v!r})" if ctype else repr(v)

    def emit(e):
        if isinstance(e, ast.Constant):
            return lit(float(e.value))
        if isinstance(e, ast.Name):
            return lit(CONSTANTS[e.id]) if e.id in CONSTANTS else e.id
        if isinstance(e, ast.UnaryOp):
            return f"(-{emit(e.operand)})"
        if isinstance(e, ast.BinOp):
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(e.op)]
            return f"({emit(e.left)} {op} {emit(e.right)})"
        if isinstance(e, ast.Compare):
            op = {ast.Gt: ">", ast.Lt: "<", ast.GtE: ">=", ast.LtE: "<=", ast.Eq: "==",
                  ast.NotEq: "!="}[type(e.ops[0])]
            return f"({emit(e.left)} {op} {emit(e.comparators[0])})"
        if isinstance(e, ast.Call):
            fn = e.func.id
            args = [emit(a) for a in e.args]
            if fn == "select":
                return f"({args[0]} ? {args[1]} : {args[2]})"
            if fn == "sign":
                zero = lit(0.0)
                return f"(({args[0]} > {zero}) - ({args[0]} < {zero}))"
            if fn in C_MISSING:
                return f"mc_{fn}({', '.join(args)})"
            return f"{_C_FUNCS.get(fn, fn)}({', '.join(args)})"
        raise ValueError(f"cannot emit {ast.dump(e)} as C")
    return emit(expr)


def c_source(ir, ctype="T"):
    """CUDA C statements of a program for one element and one lane (an ``ElementwiseKernel``
    body: inputs and outputs are the kernel's parameter names)."""
    lines = []
    for s in ir.body:
        prefix = f"{ctype} " if s.kind == "let" else ""
        lines.append(f"{prefix}{s.name} = {c_expr(s.expr, ctype)};")
    return "\n".join(lines)


def c_calls(ir):
    """Names of the functions a program calls, as the emitted C spells them."""
    out = set()
    for s in ir.body:
        for n in ast.walk(s.expr):
            if isinstance(n, ast.Call) and n.func.id not in ("select", "sign"):
                fn = n.func.id
                out.add(f"mc_{fn}" if fn in C_MISSING else _C_FUNCS.get(fn, fn))
    return out


# --- device definitions of the vocabulary's non-CUDA functions ----------------------------------
# Plain C++ on purpose (no CUDA intrinsics): with ``__device__`` defined away the very same text
# compiles on the host, which is how the tests check it without a GPU. The gamma-family and
# log_ndtr compute in double and round once (they are rare, memory-bound work on a GPU either way).
_C_DEFS = {
    "mc_inf": """
__device__ inline double mc_inf() { double z = 0.0; return 1.0 / z; }
""",
    "mc_logaddexp": """
template <typename T> __device__ T mc_logaddexp(T a, T b) {
    if (a == b) return a + T(0.6931471805599453);  /* also +-inf: no inf - inf */
    T m = a > b ? a : b;
    T d = a > b ? b - a : a - b;  /* -|a - b|, nan when either is nan */
    return m + log1p(exp(d));
}
""",
    "mc_logaddexp2": """
template <typename T> __device__ T mc_logaddexp2(T a, T b) {
    if (a == b) return a + T(1.0);
    T m = a > b ? a : b;
    T d = a > b ? b - a : a - b;
    return m + log1p(exp2(d)) * T(1.4426950408889634);
}
""",
    "mc_xlogy": """
template <typename T> __device__ T mc_xlogy(T a, T b) {
    return (a == T(0.0) && !isnan(b)) ? T(0.0) : a * log(b);
}
""",
    "mc_ndtr": """
template <typename T> __device__ T mc_ndtr(T a) {
    return T(0.5) * erfc(a * T(-0.7071067811865476));
}
""",
    "mc_log_ndtr": """
template <typename T> __device__ T mc_log_ndtr(T x) {
    double a = (double)x;
    if (a >= 0.0) return (T)log1p(-0.5 * erfc(a * 0.7071067811865476));
    if (a > -20.0) return (T)log(0.5 * erfc(-a * 0.7071067811865476));
    /* log of the asymptotic series of Mills' ratio, where erfc underflows */
    double r = 1.0 / (a * a);
    double s = 1.0 - r * (1.0 - 3.0 * r * (1.0 - 5.0 * r * (1.0 - 7.0 * r * (1.0 - 9.0 * r))));
    return (T)(-0.5 * a * a - log(-a) - 0.9189385332046728 + log(s));
}
""",
    "mc_digamma": """
__device__ inline double mc_digamma_d(double x) {
    if (isnan(x)) return x;
    if (x == mc_inf()) return x;
    double r = 0.0;
    if (x <= 0.0) {
        if (x == floor(x)) return x == 0.0 ? -1.0 / x : mc_inf() - mc_inf();  /* -+inf at -+0 */
        /* reflection: psi(x) = psi(1 - x) - pi / tan(pi x); tan has period 1: reduce first */
        r = -3.141592653589793 / tan(3.141592653589793 * (x - rint(x)));
        x = 1.0 - x;
    }
    while (x < 10.0) { r -= 1.0 / x; x += 1.0; }
    double t = 1.0 / (x * x);
    return r + log(x) - 0.5 / x - t * (1.0 / 12 - t * (1.0 / 120 - t * (1.0 / 252 - t * (
        1.0 / 240 - t * (1.0 / 132 - t * (691.0 / 32760 - t / 12))))));
}
template <typename T> __device__ T mc_digamma(T x) { return (T)mc_digamma_d((double)x); }
""",
    "mc_trigamma": """
__device__ inline double mc_trigamma_d(double x) {
    if (isnan(x)) return x;
    if (x == mc_inf()) return 0.0;
    double r = 0.0;
    if (x <= 0.0) {
        if (x == floor(x)) return mc_inf();
        /* reflection: psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x) */
        double s = sin(3.141592653589793 * (x - rint(x)));
        return 9.869604401089358 / (s * s) - mc_trigamma_d(1.0 - x);
    }
    while (x < 10.0) { r += 1.0 / (x * x); x += 1.0; }
    double t = 1.0 / x, t2 = t * t;
    return r + t + 0.5 * t2 + t * t2 * (1.0 / 6 - t2 * (1.0 / 30 - t2 * (1.0 / 42 - t2 * (
        1.0 / 30 - t2 * (5.0 / 66 - t2 * (691.0 / 2730 - t2 * 7.0 / 6))))));
}
template <typename T> __device__ T mc_trigamma(T x) { return (T)mc_trigamma_d((double)x); }
""",
    "mc_tetragamma": """
__device__ inline double mc_tetragamma_d(double x) {
    if (isnan(x)) return x;
    if (x == mc_inf()) return -0.0;
    double r = 0.0;
    if (x <= 0.0) {
        if (x == floor(x)) return -mc_inf();
        /* reflection: psi2(x) = psi2(1 - x) - 2 pi^3 cos(pi x) / sin^3(pi x) */
        double u = 3.141592653589793 * (x - rint(x));
        double s = sin(u);
        r = -62.01255336059963 * cos(u) / (s * s * s);
        x = 1.0 - x;
    }
    while (x < 10.0) { r -= 2.0 / (x * x * x); x += 1.0; }
    double t = 1.0 / x, t2 = t * t;
    return r - t2 * (1.0 + t + t2 * (0.5 - t2 * (1.0 / 6 - t2 * (1.0 / 6 - t2 * (
        0.3 - t2 * (5.0 / 6 - t2 * (691.0 / 210 - t2 * 17.5)))))));
}
template <typename T> __device__ T mc_tetragamma(T x) { return (T)mc_tetragamma_d((double)x); }
""",
}
# What each definition calls from the others (emitted first).
_C_DEPS = {"mc_digamma": ("mc_inf",), "mc_trigamma": ("mc_inf",), "mc_tetragamma": ("mc_inf",)}


def c_preamble(calls):
    """Device definitions of the ``mc_*`` functions among ``calls`` (see :func:`c_calls`), in
    dependency order; "" when none is needed."""
    order = []
    for name in sorted(c for c in calls if c in _C_DEFS):
        for dep in _C_DEPS.get(name, ()) + (name,):
            if dep not in order:
                order.append(dep)
    return "".join(_C_DEFS[n] for n in order)


@dataclass(frozen=True)
class CudaKernel:
    """The arguments of a CuPy ``ElementwiseKernel(in_params, out_params, operation, name,
    preamble=preamble)`` for one program, and the order of its arguments.

    ``inputs``: names of the input parameters, in call order; ``outputs``: ``(name, raw)`` of the
    output parameters, in call order (the caller allocates all of them). Output parameters are
    the program's output names prefixed with ``out_``.
    """
    name: str
    in_params: str
    out_params: str
    operation: str
    preamble: str
    inputs: tuple
    outputs: tuple


def cuda_kernel(ir, name, lanes=False, ctype="T"):
    """The CuPy ``ElementwiseKernel`` of a program (see :class:`CudaKernel`).

    Every parameter has the placeholder type ``T``, so one kernel serves float32 and float64
    (CuPy compiles it per dtype on first use). Without ``lanes`` the kernel runs over the
    output's shape and writes every output element by element. With ``lanes`` the tangent
    outputs carry a leading lane axis, the iteration runs over ``(k,) + shape``, and the primal
    outputs (shape ``shape``, C-contiguous) are ``raw`` parameters written by the first lane
    only: index ``i`` below their size is element ``i`` of lane 0.

    Example:
        >>> from mooncake_py.rules.derivative_table import TABLE
        >>> k = cuda_kernel(frule_ir(TABLE["sin"], (True,)), "sin_frule")
        >>> k.in_params, k.out_params
        ('T a, T ta', 'T out_y, T out_ty')
        >>> print(k.operation)
        T y = sin(a);
        out_y = y;
        T d0 = cos(a);
        out_ty = (d0 * ta);
    """
    ins = tuple(ir.inputs) + tuple(ir.tangents)
    outs, lines = [], []
    for s in ir.body:
        text = c_expr(s.expr, ctype)
        if s.kind == "let":
            lines.append(f"{ctype} {s.name} = {text};")
        elif s.kind == "out":
            raw = bool(lanes)
            outs.append((f"out_{s.name}", raw))
            lines.append(f"{ctype} {s.name} = {text};")
            lines.append(f"if (i < out_{s.name}.size()) out_{s.name}[i] = {s.name};" if raw
                         else f"out_{s.name} = {s.name};")
        else:
            outs.append((f"out_{s.name}", False))
            lines.append(f"out_{s.name} = {text};")
    return CudaKernel(
        name=name,
        in_params=", ".join(f"{ctype} {n}" for n in ins),
        out_params=", ".join(f"{'raw ' if raw else ''}{ctype} {n}" for n, raw in outs),
        operation="\n".join(lines),
        preamble=c_preamble(c_calls(ir)),
        inputs=ins,
        outputs=tuple(outs))
