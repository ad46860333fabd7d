"""Compiled replay: the scalar steps of a replay plan run by one numba kernel.

A plan (see replay.py) of a scalar loop is thousands of steps, each a few nanoseconds of
arithmetic wrapped in a microsecond of Python. Here such a plan is encoded as flat arrays
(an opcode, two operand nodes, a constant and the destination node per step) and run by one
interpreter kernel that does the forward pass, the guards and the reverse sweep in machine
code. The kernel is written out from the derivative table (the unary ops' forward calls and
derivative expressions, converted as codegen.py converts them for its CPU kernels) and is the
same for every plan: it compiles once (numba ``cache=True`` on a file in the kernel cache
directory, named by the hash of its source) and is then loaded from disk by later processes,
so a new plan (a branch flip, another function) costs an encoding pass, never a compile.
(Straight-line code specialised per plan would run a little faster per step, but LLVM's compile
time grows faster than linearly with function size: seconds per plan for these benchmarks.)

What is compiled: plans whose every step is an element read ``x[i]`` (or ``x[i, j]``) of a
float64 array argument, ``+ - * /`` and ``**`` (np.power; not ``x ** 0``) of float64 scalars
(with float or small int constants), a unary op of fastpath.py's list, a comparison of scalars whose result ``f`` branched on, or
``bool`` of a scalar. Other plans are *mixed* (:func:`mix_plan`): every run of at least
``MIN_SEGMENT`` such steps becomes a compiled segment (a forward and a reverse kernel call,
entered with the values it reads from outside, left with the values later steps read), and the
other steps (array ops, BLAS/LAPACK, reductions...) replay in Python between the segments;
a segment makes an np.stack / np.hstack of its scalars itself (:class:`_Segment`). Plans with no such run stay Python replay.

Hessian-vector products (``prepare_hvp_cache(compile=True)``): a plan recorded on dual
numbers, made only of the steps above, runs on a second kernel, forward-over-reverse: the
forward pass on (value, tangent) pairs, then the reverse sweep on cotangents that are duals or
plain numbers exactly as the tape sweeps them (the seed is a plain 1; ``+``/``-`` pass a
cotangent on; the other pullbacks are the frule programs of ``ew_pullback`` that
dual/elementwise.py generates from the table's first and second derivatives, here as scalar
statements). HVP plans that mix array steps with scalar runs are split into segments as
gradient plans are (``mp_dforward`` / ``mp_dreverse``).

Soundness: the encoded plan is the replay plan, step for step; the kernel evaluates its guards
(the comparisons, with the values recorded) in the same order and reports a failed one, which
is handled as a failed replay guard (the function is recorded again). The rule check of the
Python replay (a rule registered since the recording turns the plan off) and its argument
checks (float64 arrays of the recorded shapes) are made before each run. The derivatives are
the short paths' formulas (the table's, in the same floating-point operations); the results
equal a fresh recording except where numba's libm differs from NumPy's in the last bit of a
transcendental (sin, exp...), and except that a cotangent of -0.0 may come out as 0.0.
Each kernel is self-tested when loaded; a damaged cache entry is rebuilt, and a kernel that
still fails leaves every plan to the Python replay.
"""
import hashlib
import operator
import os
import sys
import tempfile
import threading
import time

import numpy as np

from ..dual import codegen, elementwise
from ..dual.dual_array import DualArray
from ..dual.kernels_cpu import kernel_dir
from ..rules.derivative_table import BY_UFUNC, CONSTANTS, TABLE
from ..rules.registry import RRULES
from ..tape import fastpath
from .lean import attach
from .plans import (
    _ALLOCATORS,
    _BIN,
    _CONST,
    _FRESH_LIKE,
    _GC_PAUSE_STEPS,
    _GUARD,
    _ITEM,
    _LIKE,
    _OBSERVE,
    _OP,
    _SEQ_T,
    _SLOT,
    _SUM,
    _UNARY,
    Plan,
    _Failed,
    _int_key,
    _made_node,
)
from .writes import _VIEW_WRITE, _WRITE

# Plans longer than this are not compiled: the kernel's work arrays (three floats per node)
# would cost more memory than the Python replay saves.
MAX_STEPS = 5_000_000

_F64 = np.float64
_F64_DT = np.dtype(np.float64)
_ARITH = {operator.add: 1, operator.sub: 2, operator.mul: 3, operator.truediv: 4}
_CMP = {np.greater: (">", 5), np.greater_equal: (">=", 6), np.less: ("<", 7),
        np.less_equal: ("<=", 8), np.equal: ("==", 9), np.not_equal: ("!=", 10)}
_TRUTH, _NEG, _UNARY0 = 11, 12, 16
# ``a ** b`` of float64 scalars (np.power); not among 1-4, whose operands every kernel loop
# reads alike, since its derivatives are the table's general ones
_POW = 14
# np.stack / np.hstack of scalars into a new 1-d array, in a segment (see _Segment): a spec
# (_STACK, ("q", operands), None, 0.0, node), each operand ("s", node) or ("c", number);
# the segment runs it as writes of the scalars into slots of a buffer it makes
_STACK = 15
_STACKS = (np.stack, np.hstack)
# Their rules as registered when this module loaded (not in fastpath._BUILTIN, which the
# recording paths consult): a rule registered since turns the segments' stacks off.
_STACK_RULES = {fn: RRULES.get(fn) for fn in _STACKS}
# A segment's write of an element it holds as a scalar slot (see _Segment): V[slot] = operand
_WRITE_OP = 13
_EXACT_INT = 2 ** 53  # ints a float64 holds exactly: NumPy converts them without rounding
# Numba spellings of the table's vocabulary calls that can appear in the unary entries below.
_NB_CALLS = {"sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "arctan",
             "log1p", "expm1", "abs", "pow"}


def table_unary_ops():
    """(ufunc, table name, d1 expression, d2 expression) for the scalar short path's unary ops
    whose derivatives the generated replays can spell (calls in ``_NB_CALLS`` only), in a
    fixed order (the kernels' opcodes follow it). The expressions are the table's ``d1``/``d2``
    strings, in terms of ``a`` (the input) and ``y`` (the output); :func:`spell` writes them out
    for a backend (numba here, Python floats in replay/source.py).

    Example:
        >>> ops = table_unary_ops()
        >>> [(name, d1) for _, name, d1, _ in ops][:2]
        [('sin', 'cos(a)'), ('cos', '-sin(a)')]
    """
    import ast
    out = []
    for name in fastpath._UNARY_NAMES:
        e = TABLE.get(name)
        if e is None or e.ufunc not in fastpath._UNARY or e.d1[0] == "-1":
            continue
        if all(_in_vocabulary(ast.parse(t, mode="eval")) for t in (e.d1[0], e.d2[0])):
            out.append((e.ufunc, name, e.d1[0], e.d2[0]))
    return out


def spell(expr, call, names):
    """The table expression ``expr`` as source for one backend: each call's function replaced
    by ``call(name)`` (a source string), each of ``a``/``y`` by ``names[...]``, and the table's
    named constants by their values.

    Example:
        >>> spell("cos(a) * y", lambda f: "np." + f, {"a": "ua", "y": "uy"})
        'np.cos(ua) * uy'
    """
    import ast

    class T(_renamer(names)):
        def visit_Call(self, node):
            self.generic_visit(node)
            node.func = ast.parse(call(node.func.id), mode="eval").body
            return node
    tree = ast.parse(expr, mode="eval")
    return ast.unparse(ast.fix_missing_locations(T().visit(tree)).body)


def _renamer(names):
    """An ast.NodeTransformer class replacing the table's named constants by their values and
    the variables in ``names`` by their new names (backends add their own visit_Call)."""
    import ast

    class Renamer(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in CONSTANTS:
                return ast.Constant(CONSTANTS[node.id])
            if node.id in names:
                return ast.Name(names[node.id], ast.Load())
            return node
    return Renamer


def _unary_ops():
    """(ufunc, forward source, d1 source, d2 source) for :func:`table_unary_ops`, as numba
    source in the kernels' names (``ua`` input, ``uy`` output)."""
    out = []
    names = {"a": "ua", "y": "uy"}
    for uf, name, d1, d2 in table_unary_ops():
        fwd = "ua * ua" if name == "square" else f"np.{name}(ua)"
        out.append((uf, fwd, spell(d1, _np_call, names), spell(d2, _np_call, names)))
    return out


def _np_call(name):
    return "np.power" if name == "pow" else "np." + name


def _pow_derivatives(call, names=None):
    """(∂y/∂a, ∂y/∂b) of ``a ** b`` as source for one backend (``a``, ``b``, ``y`` renamed by
    ``names``; ``av``, ``bv``, ``y`` by default): the table's np.power entry, whose selects
    guard a = 0 and b = 0 (docs/conventions.md)."""
    conv = _ProgramToNumba(call, names or {"a": "av", "b": "bv"})
    e = BY_UFUNC[np.power]
    return conv.expr(e.d1[0]), conv.expr(e.d1[1])


def const_exponent(b):
    """The constant exponent ``b`` (a float) that the dual layer specialises ``x ** b`` on, or
    None (elementwise._exponent, for the numbers a plan's constants are)."""
    return b if b in codegen.SPECIAL_EXPONENTS else None


def _in_vocabulary(tree):
    import ast
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.func.id not in _NB_CALLS:
            return False
        if isinstance(node, ast.Name) and node.id not in ("a", "y") and \
                node.id not in CONSTANTS and node.id not in _NB_CALLS:
            return False
    return True


def _acc(p, x, ind, xt=None):
    """Source adding cotangent ``x`` into node ``p`` as the tape's sweep does: the first
    contribution is stored, later ones added (so -0.0 and never-reached nodes come out as
    they do there). ``xt``: the cotangent's tangent (the HVP kernel), kept alongside."""
    if xt is None:
        return [f"{ind}if R[{p}]:", f"{ind}    ADJ[{p}] += {x}", f"{ind}else:",
                f"{ind}    ADJ[{p}] = {x}", f"{ind}    R[{p}] = True"]
    return [f"{ind}if R[{p}]:", f"{ind}    ADJ[{p}] += {x}", f"{ind}    ADT[{p}] += {xt}",
            f"{ind}else:", f"{ind}    ADJ[{p}] = {x}", f"{ind}    ADT[{p}] = {xt}",
            f"{ind}    R[{p}] = True"]


_HEADER = ["import numpy as np", "import numba", ""]
_JIT = "@numba.njit(cache=True, nogil=True, error_model='numpy', boundscheck=False)"


def _forward_lines(fail, writes=False):
    """The gradient kernels' forward loop over the steps (values into ``V``); ``fail``: the
    statement that ends the kernel when a guard does not hold; ``writes``: with the segments'
    element writes (:data:`_WRITE_OP`)."""
    unary = _unary_ops()
    i1, i2, i3 = " " * 12, " " * 16, " " * 20
    src = ["    m = OP.shape[0]",
           "    for s in range(m):",
           "        op = OP[s]",
           "        a = A[s]",
           "        b = B[s]",
           "        if op == 0:",
           f"{i1}V[D[s]] = X[a]",
           "        elif op <= 10:",
           f"{i1}av = V[a] if a >= 0 else C[s]",
           f"{i1}bv = V[b] if b >= 0 else C[s]"]
    for sym, code in [("+", 1), ("-", 2), ("*", 3), ("/", 4)]:
        src += [f"{i1}{'if' if code == 1 else 'elif'} op == {code}:", f"{i2}V[D[s]] = av {sym} bv"]
    for sym, code in sorted(_CMP.values(), key=lambda t: t[1]):
        src += [f"{i1}elif op == {code}:", f"{i2}if (av {sym} bv) != (D[s] == 1):",
                f"{i3}{fail}"]
    src += [f"        elif op == {_TRUTH}:", f"{i1}if (V[a] != 0.0) != (D[s] == 1):",
            f"{i2}{fail}",
            f"        elif op == {_NEG}:", f"{i1}V[D[s]] = -V[a]"]
    src += [f"        elif op == {_POW}:", f"{i1}av = V[a] if a >= 0 else C[s]",
            f"{i1}bv = V[b] if b >= 0 else C[s]", f"{i1}V[D[s]] = np.power(av, bv)"]
    if writes:
        src += [f"        elif op == {_WRITE_OP}:", f"{i1}V[D[s]] = V[a] if a >= 0 else C[s]"]
    for k, (_, fwd, _, _) in enumerate(unary):
        src += [f"        elif op == {_UNARY0 + k}:", f"{i1}ua = V[a]", f"{i1}V[D[s]] = {fwd}"]
    return src


def _reverse_lines(writes=False):
    """The gradient kernels' reverse sweep over the steps (cotangents ``ADJ``, reached flags
    ``R``, seeded by the caller's lines), adding the inputs' cotangents into ``G``. A write
    (``writes``) passes its slot's cotangent to the value written and zeroes it, as the tape's
    write pullback splits a buffer's cotangent."""
    unary = _unary_ops()
    i1, i2 = " " * 12, " " * 16
    src = ["    for s in range(m - 1, -1, -1):",
           "        op = OP[s]",
           f"        if (op >= 5 and op <= {_TRUTH}) or not R[D[s]]:",
           "            continue",
           "        d = D[s]",
           "        g = ADJ[d]",
           "        a = A[s]",
           "        b = B[s]",
           "        if op == 0:",
           f"{i1}G[a] += g",
           "        elif op <= 4:",
           f"{i1}av = V[a] if a >= 0 else C[s]",
           f"{i1}bv = V[b] if b >= 0 else C[s]",
           f"{i1}if op == 1:", f"{i2}ga = g", f"{i2}gb = g",
           f"{i1}elif op == 2:", f"{i2}ga = g", f"{i2}gb = -g",
           f"{i1}elif op == 3:", f"{i2}ga = g * bv", f"{i2}gb = g * av",
           f"{i1}else:", f"{i2}ga = g * (1 / bv)", f"{i2}gb = g * (-V[d] / bv)",
           f"{i1}if a >= 0:"] + _acc("a", "ga", i2) + [f"{i1}if b >= 0:"] + _acc("b", "gb", i2)
    src += [f"        elif op == {_NEG}:"] + _acc("a", "-g", i1)
    da, db = _pow_derivatives(_np_call)
    src += [f"        elif op == {_POW}:", f"{i1}av = V[a] if a >= 0 else C[s]",
            f"{i1}bv = V[b] if b >= 0 else C[s]", f"{i1}y = V[d]", f"{i1}if a >= 0:"] + \
        _acc("a", f"g * ({da})", i2) + [f"{i1}if b >= 0:"] + _acc("b", f"g * ({db})", i2)
    if writes:
        src += [f"        elif op == {_WRITE_OP}:", f"{i1}if a >= 0:"] + _acc("a", "g", i2) + \
            [f"{i1}ADJ[d] = 0.0"]
    for k, (_, _, der, _) in enumerate(unary):
        src += [f"        elif op == {_UNARY0 + k}:", f"{i1}uy = V[d]",
                f"{i1}ua = V[a]"] + _acc("a", f"g * ({der})", i1)
    return src


def kernel_source():
    """The interpreter kernel's module source (see the module docstring).

    Example:
        >>> "def mp_replay(" in kernel_source()
        True
    """
    src = _HEADER + [_JIT, "def mp_replay(OP, A, B, C, D, X, n, ynode, nx):",
                     "    V = np.empty(n)"] + \
        _forward_lines("return False, 0.0, np.zeros(nx)") + \
        ["    G = np.zeros(nx)",
         "    ADJ = np.empty(n)",
         "    R = np.zeros(n, dtype=np.bool_)",
         "    ADJ[ynode] = 1.0",
         "    R[ynode] = True"] + _reverse_lines() + ["    return True, V[ynode], G", ""]
    return "\n".join(src)


def segment_kernel_source():
    """The mixed plans' kernels (see :func:`mix_plan`): ``mp_forward`` runs a segment's steps
    on the values ``X`` it reads from outside and returns all its values; ``mp_reverse`` takes
    them back with the cotangents that the steps after the segment gave some of its nodes
    (``SN``: nodes, ``SV``: cotangents) and returns the cotangents of ``X``. The statements
    are the gradient kernel's.

    Example:
        >>> "def mp_reverse(" in segment_kernel_source()
        True
    """
    src = _HEADER + [_JIT, "def mp_forward(OP, A, B, C, D, X, n):", "    V = np.empty(n)"] + \
        _forward_lines("return False, V", True) + ["    return True, V", "", "",
                                             _JIT, "def mp_reverse(OP, A, B, C, D, V, SN, SV, nx):",
                                             "    n = V.shape[0]",
                                             "    m = OP.shape[0]",
                                             "    G = np.zeros(nx)",
                                             "    ADJ = np.empty(n)",
                                             "    R = np.zeros(n, dtype=np.bool_)",
                                             "    for j in range(SN.shape[0]):",
                                             "        ADJ[SN[j]] = SV[j]",
                                             "        R[SN[j]] = True"] + \
        _reverse_lines(True) + ["    return G", ""]
    return "\n".join(src)


class _ProgramToNumba:
    """A dual program's NumPy source (dual/codegen.py) -> scalar statements: ``div`` to ``/``
    (numba's float division gives inf/nan as NumPy's does, under error_model='numpy'; Python's
    raises, which replay/source.py handles), ``select`` to a conditional expression, each call's
    function to ``call(name)`` (``np.<name>`` for numba), named constants to literals, and the
    program's variables renamed by ``names`` (none by default)."""

    def __init__(self, call=None, names=None):
        self.call = call or _np_call
        self.names = names or {}

    def expr(self, text):
        """The table expression ``text`` converted."""
        import ast
        tree = ast.parse(text, mode="eval")
        return ast.unparse(ast.fix_missing_locations(self._transformer().visit(tree)).body)

    def lines(self, entry, kind, k, present, const_b=None):
        """(statements, output expressions) of the program for these parameters (``const_b``:
        the constant exponent it is specialised on, as the dual layer specialises ``x ** 2``)."""
        import ast
        prog = elementwise.program(entry, kind, k, present, const_b)
        tree = ast.parse(codegen.numpy_source(prog.ir, "f", given=("y",) if kind == "f" else ()))
        body = tree.body[0].body
        T = self._transformer()
        stmts = [ast.unparse(ast.fix_missing_locations(T.visit(st))) for st in body[:-1]]
        outs = [ast.unparse(ast.fix_missing_locations(T.visit(e))) for e in body[-1].value.elts]
        return stmts, outs

    def _transformer(self):
        import ast
        call, names = self.call, self.names

        class T(_renamer(names)):
            def visit_Call(self, node):
                self.generic_visit(node)
                fn = node.func.id
                if fn == "div":
                    return ast.BinOp(node.args[0], ast.Div(), node.args[1])
                if fn == "select":
                    return ast.IfExp(*node.args)
                if fn not in _NB_CALLS:
                    raise ValueError(f"{fn}() is not in the kernel's vocabulary")
                node.func = ast.parse(call(fn), mode="eval").body
                return node
        return T()


def _acc2(p, r, tr, ind):
    """Source adding the cotangent ``r`` (a dual with tangent ``tr``, or a plain number when
    ``tr`` is None) into node ``p`` as the tape's sweep adds duals and plain numbers: the
    tangent of a sum holds only the tangents of its dual terms."""
    if tr is None:
        return [f"{ind}if R[{p}]:", f"{ind}    ADJ[{p}] += {r}", f"{ind}else:",
                f"{ind}    ADJ[{p}] = {r}", f"{ind}    R[{p}] = True"]
    return [f"{ind}if R[{p}]:", f"{ind}    ADJ[{p}] += {r}",
            f"{ind}    if DT[{p}]:", f"{ind}        ADT[{p}] += {tr}",
            f"{ind}    else:", f"{ind}        ADT[{p}] = {tr}", f"{ind}        DT[{p}] = True",
            f"{ind}else:", f"{ind}    ADJ[{p}] = {r}", f"{ind}    R[{p}] = True",
            f"{ind}    ADT[{p}] = {tr}", f"{ind}    DT[{p}] = True"]


def _indent(lines, ind):
    return [ind + ln for ln in lines]


def _hvp_binary():
    return [(TABLE["add"], "+", 1), (TABLE["subtract"], "-", 2),
            (TABLE["multiply"], "*", 3), (BY_UFUNC[np.true_divide], "/", 4)]


def _hvp_operands():
    """Statements loading a binary step's operands and their tangents (a constant's is 0)."""
    return ["if ia >= 0:", "    a = V[ia]", "    ta = T[ia]", "else:", "    a = C[s]",
            "    ta = 0.0", "if ib >= 0:", "    b = V[ib]", "    tb = T[ib]", "else:",
            "    b = C[s]", "    tb = 0.0"]


def _by_exponent(lines, ind):
    """Statements choosing, by the constant exponent ``b`` of ``a ** b``, the program the dual
    layer runs for it: specialised on the exponents of ``codegen.SPECIAL_EXPONENTS``
    (``x ** 2``'s derivative is ``2*x``, not ``2*pow(x, 1)``), else the general one;
    ``lines(const_b, indent)`` writes one. (A zero exponent is never compiled: the dual
    layer's ``x ** 0`` has no tangent.)"""
    src, first = [], True
    for c in codegen.SPECIAL_EXPONENTS:
        if c == 0.0:
            continue
        src += [f"{ind}{'if' if first else 'elif'} b == {c!r}:"] + lines(c, ind + "    ")
        first = False
    return src + [f"{ind}else:"] + lines(None, ind + "    ")


def _hvp_forward_lines(fail, writes=False):
    """The forward-over-reverse kernels' forward loop (values into ``V``, tangents into
    ``T``); ``fail`` and ``writes`` as for :func:`_forward_lines`."""
    unary = _unary_ops()
    P = _ProgramToNumba()
    i1, i2, i3 = " " * 12, " " * 16, " " * 20
    binary = _hvp_binary()
    src = ["    m = OP.shape[0]",
           "    for s in range(m):",
           "        op = OP[s]",
           "        ia = A[s]",
           "        ib = B[s]",
           "        dn = D[s]",
           "        if op == 0:",
           f"{i1}V[dn] = X[ia]",
           f"{i1}T[dn] = XT[ia]",
           "        elif op <= 10:",
           f"{i1}if ia >= 0:", f"{i2}a = V[ia]", f"{i2}ta = T[ia]",
           f"{i1}else:", f"{i2}a = C[s]", f"{i2}ta = 0.0",
           f"{i1}if ib >= 0:", f"{i2}b = V[ib]", f"{i2}tb = T[ib]",
           f"{i1}else:", f"{i2}b = C[s]", f"{i2}tb = 0.0"]
    for j, (e, sym, code) in enumerate(binary):
        src += [f"{i1}{'if' if j == 0 else 'elif'} op == {code}:", f"{i2}y = a {sym} b",
                f"{i2}V[dn] = y"]
        for cond, present in (("ia < 0", (False, True)), ("ib < 0", (True, False)),
                              ("True", (True, True))):
            stmts, (ty,) = P.lines(e, "f", 0, present)
            head = "else" if cond == "True" else \
                f"{'if' if present == (False, True) else 'elif'} {cond}"
            src += [f"{i2}{head}:"] + \
                _indent(stmts, i3) + [f"{i3}T[dn] = {ty}"]
    for sym, code in sorted(_CMP.values(), key=lambda t: t[1]):
        src += [f"{i1}elif op == {code}:", f"{i2}if (a {sym} b) != (dn == 1):", f"{i3}{fail}"]
    src += [f"        elif op == {_TRUTH}:", f"{i1}if (V[ia] != 0.0) != (dn == 1):",
            f"{i2}{fail}"]
    e = BY_UFUNC[np.power]
    src += [f"        elif op == {_POW}:"] + _indent(_hvp_operands(), i1) + [
        f"{i1}y = np.power(a, b)", f"{i1}V[dn] = y", f"{i1}if ia < 0:"]
    stmts, (ty,) = P.lines(e, "f", 0, (False, True))
    src += _indent(stmts, i2) + [f"{i2}T[dn] = {ty}", f"{i1}elif ib < 0:"]

    def frule(const_b, ind):
        stmts, (ty,) = P.lines(e, "f", 0, (True, False), const_b)
        return _indent(stmts, ind) + [f"{ind}T[dn] = {ty}"]
    src += _by_exponent(frule, i2)
    stmts, (ty,) = P.lines(e, "f", 0, (True, True))
    src += [f"{i1}else:"] + _indent(stmts, i2) + [f"{i2}T[dn] = {ty}"]
    if writes:  # (a constant written has no tangent: the tape writes 0 into the tangent)
        src += [f"        elif op == {_WRITE_OP}:", f"{i1}if ia >= 0:",
                f"{i2}V[dn] = V[ia]", f"{i2}T[dn] = T[ia]", f"{i1}else:",
                f"{i2}V[dn] = C[s]", f"{i2}T[dn] = 0.0"]
    for code, (e, fwd) in [(_NEG, (TABLE["negative"], "-a"))] + [
            (_UNARY0 + k, (BY_UFUNC[uf], fwd.replace("ua", "a")))
            for k, (uf, fwd, _, _) in enumerate(unary)]:
        stmts, (ty,) = P.lines(e, "f", 0, (True,))
        src += [f"        elif op == {code}:", f"{i1}a = V[ia]", f"{i1}ta = T[ia]",
                f"{i1}y = {fwd}", f"{i1}V[dn] = y"] + _indent(stmts, i1) + [f"{i1}T[dn] = {ty}"]
    return src


def _hvp_reverse_lines(writes=False):
    """The forward-over-reverse kernels' reverse sweep (cotangents ``ADJ``/``ADT``, reached
    flags ``R``, dual flags ``DT``, seeded by the caller's lines), adding the inputs'
    cotangents into ``G``/``GT`` (with ``writes``, a segment's: also which are duals, ``GD``,
    and its element writes)."""
    unary = _unary_ops()
    P = _ProgramToNumba()
    i1, i2, i3 = " " * 12, " " * 16, " " * 20
    binary = _hvp_binary()
    src = ["    for s in range(m - 1, -1, -1):",
           "        op = OP[s]",
           "        dn = D[s]",
           f"        if (op >= 5 and op <= {_TRUTH}) or not R[dn]:",
           "            continue",
           "        g = ADJ[dn]",
           "        tg = ADT[dn]",
           "        P = DT[dn]",
           "        ia = A[s]",
           "        ib = B[s]",
           "        if op == 0:",
           f"{i1}G[ia] += g",
           f"{i1}if P:",
           f"{i2}GT[ia] += tg"] + ([f"{i2}GD[ia] = True"] if writes else []) + [
           "        elif op <= 2:",
           f"{i1}nb = g if op == 1 else -g",
           f"{i1}ntb = tg if op == 1 else -tg",
           f"{i1}if P:",
           f"{i2}if ia >= 0:"] + _acc2("ia", "g", "tg", i3) + [
           f"{i2}if ib >= 0:"] + _acc2("ib", "nb", "ntb", i3) + [
           f"{i1}else:",
           f"{i2}if ia >= 0:"] + _acc2("ia", "g", None, i3) + [
           f"{i2}if ib >= 0:"] + _acc2("ib", "nb", None, i3)
    for e, _, code in binary[2:]:
        src += [f"        elif op == {code}:",
                f"{i1}y = V[dn]",
                f"{i1}if ia >= 0:", f"{i2}a = V[ia]", f"{i2}ta = T[ia]",
                f"{i1}else:", f"{i2}a = C[s]", f"{i2}ta = 0.0",
                f"{i1}if ib >= 0:", f"{i2}b = V[ib]", f"{i2}tb = T[ib]",
                f"{i1}else:", f"{i2}b = C[s]", f"{i2}tb = 0.0"]
        for k, node, other in ((0, "ia", "ib"), (1, "ib", "ia")):
            src += [f"{i1}if {node} >= 0:"]
            first = True
            for pg in (True, False):
                for po in (True, False):
                    present = (pg, True, po) if k == 0 else (pg, po, True)
                    stmts, outs = P.lines(e, "p", k, present)
                    cond = f"{'P' if pg else 'not P'} and {other} {'>=' if po else '<'} 0"
                    src += [f"{i2}{'if' if first else 'elif'} {cond}:"] + _indent(stmts, i3) + \
                        _acc2(node, outs[0], outs[1] if len(outs) > 1 else None, i3)
                    first = False
    src += [f"        elif op == {_NEG}:", f"{i1}if P:"] + _acc2("ia", "-g", "-tg", i2) + \
        [f"{i1}else:"] + _acc2("ia", "-g", None, i2)
    e = BY_UFUNC[np.power]
    src += [f"        elif op == {_POW}:", f"{i1}y = V[dn]"] + _indent(_hvp_operands(), i1)
    for k, node, other in ((0, "ia", "ib"), (1, "ib", "ia")):
        src += [f"{i1}if {node} >= 0:"]
        first = True
        for pg in (True, False):
            for po in (True, False):
                present = (pg, True, po) if k == 0 else (pg, po, True)

                def pullback(const_b, ind, present=present, k=k, node=node):
                    stmts, outs = P.lines(e, "p", k, present, const_b)
                    return _indent(stmts, ind) + \
                        _acc2(node, outs[0], outs[1] if len(outs) > 1 else None, ind)
                cond = f"{'P' if pg else 'not P'} and {other} {'>=' if po else '<'} 0"
                src += [f"{i2}{'if' if first else 'elif'} {cond}:"] + \
                    (_by_exponent(pullback, i3) if k == 0 and not po else pullback(None, i3))
                first = False
    if writes:
        src += [f"        elif op == {_WRITE_OP}:", f"{i1}if ia >= 0:", f"{i2}if P:"] + \
            _acc2("ia", "g", "tg", i3) + [f"{i2}else:"] + _acc2("ia", "g", None, i3) + \
            [f"{i1}ADJ[dn] = 0.0", f"{i1}ADT[dn] = 0.0"]
    for k, (uf, _, _, _) in enumerate(unary):
        src += [f"        elif op == {_UNARY0 + k}:", f"{i1}a = V[ia]", f"{i1}ta = T[ia]",
                f"{i1}y = V[dn]"]
        for pg in (True, False):
            stmts, outs = P.lines(BY_UFUNC[uf], "p", 0, (pg, True))
            src += [f"{i1}{'if P' if pg else 'else'}:"] + _indent(stmts, i2) + \
                _acc2("ia", outs[0], outs[1] if len(outs) > 1 else None, i2)
    return src


def hvp_kernel_source():
    """The forward-over-reverse interpreter's module source: the plan's steps on (value,
    tangent) pairs, then the reverse sweep on cotangents that are duals or plain numbers, as
    the tape's sweep runs on duals: the seed is a plain 1, ``+``/``-`` pass a cotangent on as it
    is, and the other ops' pullbacks are the frules of ``ew_pullback`` that dual/elementwise.py
    generates from the table (the same programs, as scalar statements), chosen by which of
    (cotangent, operands) carry a tangent. Returns the value, its tangent, the gradient and
    H·v (for the direction the inputs' tangents ``XT`` hold).

    Example:
        >>> "def mp_hvp(" in hvp_kernel_source()
        True
    """
    fail = "return False, 0.0, 0.0, np.zeros(nx), np.zeros(nx)"
    src = _HEADER + [_JIT, "def mp_hvp(OP, A, B, C, D, X, XT, n, ynode, nx):",
                     "    V = np.empty(n)",
                     "    T = np.empty(n)"] + _hvp_forward_lines(fail) + [
        "    G = np.zeros(nx)",
        "    GT = np.zeros(nx)",
        "    ADJ = np.empty(n)",
        "    ADT = np.empty(n)",
        "    R = np.zeros(n, dtype=np.bool_)",
        "    DT = np.zeros(n, dtype=np.bool_)",  # whether the cotangent is a dual
        "    ADJ[ynode] = 1.0",
        "    R[ynode] = True"] + _hvp_reverse_lines() + \
        ["    return True, V[ynode], T[ynode], G, GT", ""]
    return "\n".join(src)


def hvp_segment_kernel_source():
    """The mixed HVP plans' kernels, as :func:`segment_kernel_source` is for gradients, on
    (value, tangent) pairs: ``mp_dforward`` returns the segment's values and tangents;
    ``mp_dreverse`` takes its outputs' cotangents (``SN`` nodes, ``SV`` values, ``ST``
    tangents, ``SD`` whether each is a dual) and returns the cotangents of ``X`` (values,
    tangents, whether each is a dual). The statements are the HVP kernel's.

    Example:
        >>> "def mp_dreverse(" in hvp_segment_kernel_source()
        True
    """
    src = _HEADER + [_JIT, "def mp_dforward(OP, A, B, C, D, X, XT, n):",
                     "    V = np.empty(n)",
                     "    T = np.empty(n)"] + \
        _hvp_forward_lines("return False, V, T", True) + [
        "    return True, V, T", "", "",
        _JIT, "def mp_dreverse(OP, A, B, C, D, V, T, SN, SV, ST, SD, nx):",
        "    n = V.shape[0]",
        "    m = OP.shape[0]",
        "    G = np.zeros(nx)",
        "    GT = np.zeros(nx)",
        "    GD = np.zeros(nx, dtype=np.bool_)",
        "    ADJ = np.empty(n)",
        "    ADT = np.empty(n)",
        "    R = np.zeros(n, dtype=np.bool_)",
        "    DT = np.zeros(n, dtype=np.bool_)",
        "    for j in range(SN.shape[0]):",
        "        ADJ[SN[j]] = SV[j]",
        "        ADT[SN[j]] = ST[j]",
        "        DT[SN[j]] = SD[j]",
        "        R[SN[j]] = True"] + _hvp_reverse_lines(True) + ["    return G, GT, GD", ""]
    return "\n".join(src)


_LOCK = threading.Lock()
_KERNELS = {}  # "gradient" / "hvp" -> [dispatcher, unary ufunc -> opcode], once loaded and checked
TIMES = {}     # "load_s" / "hvp_load_s": seconds the first request of each kernel took


def _write_checked(path, source):
    """Write ``source`` to ``path`` unless it already holds exactly that (a truncated or edited
    file from an earlier process is replaced, atomically, so a concurrent reader never sees a
    half file)."""
    try:
        with open(path) as fh:
            if fh.read() == source:
                return
    except (OSError, UnicodeDecodeError):
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".py.tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(source)
    os.replace(tmp, path)


def _purge_numba_cache(d, stem):
    pyc = os.path.join(d, "__pycache__")
    try:
        names = os.listdir(pyc)
    except OSError:
        return
    for name in names:
        if name.startswith(stem + ".") and name.endswith((".nbi", ".nbc")):
            try:
                os.remove(os.path.join(pyc, name))
            except OSError:
                pass


def _import(source, stem, d, func):
    import importlib.util
    import types
    name = f"_mooncake_py_{stem}"
    if d is None:
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        exec(compile(source.replace("cache=True", "cache=False"), f"<{name}>", "exec"),  # noqa: S102  (generated source, compiled here by design)
             mod.__dict__)
        return _functions(mod, func)
    path = os.path.join(d, stem + ".py")
    _write_checked(path, source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache re-imports the module by name
    spec.loader.exec_module(mod)
    return _functions(mod, func)


def _functions(mod, func):
    return tuple(getattr(mod, f) for f in func) if type(func) is tuple else getattr(mod, func)


# The self-test plan: y = x[0] * x[1] - 2, then sin(y) / x[0], at x = (3, 5)
_TEST_PLAN = (np.array([0, 0, 3, 2], np.int64), np.array([0, 1, 1, 3], np.int64),
              np.array([-1, -1, 2, -1], np.int64), np.array([0.0, 0.0, 0.0, 2.0]),
              np.array([1, 2, 3, 4], np.int64))


def _self_test(k):
    """Run the kernel on a tiny plan with a known answer: a cache entry that loads but is
    wrong (or does not load) is caught here, before any user plan uses it."""
    # y = x[0] * x[1] - 2 at x = (3, 5): y = 13, gradient (5, 3)
    ok, y, g = k(*_TEST_PLAN, np.array([3.0, 5.0]), 5, 4, 2)
    return bool(ok) and y == 13.0 and g[0] == 5.0 and g[1] == 3.0


def _self_test_hvp(k):
    """As :func:`_self_test`, for the HVP kernel: along v = (1, 2) the tangent of y is
    5·1 + 3·2 = 11 and H·v = ((0, 1), (1, 0))·v = (2, 1)."""
    ok, y, yt, g, hv = k(*_TEST_PLAN, np.array([3.0, 5.0]), np.array([1.0, 2.0]), 5, 4, 2)
    return bool(ok) and (y, yt) == (13.0, 11.0) and g.tolist() == [5.0, 3.0] and \
        hv.tolist() == [2.0, 1.0]


def _self_test_segment(ks):
    """As :func:`_self_test`, for the segment kernels: forward, then reverse from y."""
    fwd, rev = ks
    ok, V = fwd(*_TEST_PLAN, np.array([3.0, 5.0]), 5)
    if not ok or V[4] != 13.0:
        return False
    g = rev(*_TEST_PLAN, V, np.array([4], np.int64), np.array([1.0]), 2)
    return g.tolist() == [5.0, 3.0]


def _self_test_hvp_segment(ks):
    """As :func:`_self_test_hvp`, for the HVP segment kernels, from a plain seed of y."""
    fwd, rev = ks
    ok, V, T = fwd(*_TEST_PLAN, np.array([3.0, 5.0]), np.array([1.0, 2.0]), 5)
    if not ok or V[4] != 13.0 or T[4] != 11.0:
        return False
    g, gt, gd = rev(*_TEST_PLAN, V, T, np.array([4], np.int64), np.array([1.0]),
                    np.array([0.0]), np.array([False]), 2)
    return g.tolist() == [5.0, 3.0] and gt.tolist() == [2.0, 1.0] and bool(gd.all())


# kind -> (source generator, file stem prefix, function name(s), self-test, TIMES key)
_KINDS = {"gradient": (kernel_source, "replay_", "mp_replay", _self_test, "load_s"),
          "hvp": (hvp_kernel_source, "hvp_replay_", "mp_hvp", _self_test_hvp, "hvp_load_s"),
          "segment": (segment_kernel_source, "segment_replay_", ("mp_forward", "mp_reverse"),
                      _self_test_segment, "segment_load_s"),
          "hvp_segment": (hvp_segment_kernel_source, "hvp_segment_replay_",
                          ("mp_dforward", "mp_dreverse"), _self_test_hvp_segment,
                          "hvp_segment_load_s")}


def _opcodes():
    codes = {uf: _UNARY0 + i for i, (uf, _, _, _) in enumerate(_unary_ops())}
    codes[np.negative] = _NEG
    return codes


def _load(kind):
    got = _KERNELS.get(kind)
    if got is not None:
        if got[0] is None:  # (failed in this process already: not rebuilt on every plan)
            raise RuntimeError(f"the compiled-replay {kind} kernel failed its self-test")
        return got[0], got[1]
    with _LOCK:
        if kind not in _KERNELS:
            make, prefix, func, test, key = _KINDS[kind]
            t0 = time.perf_counter()
            source = make()
            stem = prefix + hashlib.sha1(source.encode()).hexdigest()[:20]
            d = kernel_dir()
            k = None
            for attempt in (d, "purge", None):
                try:
                    if attempt == "purge":
                        if d is None:
                            continue
                        _purge_numba_cache(d, stem)
                        attempt = d
                    k = _import(source, stem, attempt, func)
                    if test(k):
                        break
                except Exception:  # noqa: BLE001,S110  (a damaged cache entry: rebuild it)
                    pass
                k = None
            if k is None:
                _KERNELS[kind] = [None, None]
                raise RuntimeError(f"the compiled-replay {kind} kernel failed its self-test")
            TIMES[key] = time.perf_counter() - t0
            _KERNELS[kind] = [k, _opcodes()]
    got = _KERNELS[kind]
    if got[0] is None:
        raise RuntimeError(f"the compiled-replay {kind} kernel failed its self-test")
    return got[0], got[1]


def kernel():
    """(the numba gradient interpreter, the opcode of each unary ufunc), compiled or loaded on
    first use.

    Example:
        >>> k, codes = kernel()
        >>> import numpy as np
        >>> np.sin in codes
        True
    """
    return _load("gradient")


def hvp_kernel():
    """(the numba forward-over-reverse interpreter, the opcode of each unary ufunc), compiled
    or loaded on first use; same opcodes and plan encoding as :func:`kernel`.

    Example:
        >>> k, codes = hvp_kernel()
        >>> import numpy as np
        >>> codes[np.sin] == kernel()[1][np.sin]
        True
    """
    return _load("hvp")


def segment_kernels():
    """((forward, reverse) segment kernels, the opcode of each unary ufunc), compiled or loaded
    on first use; see :func:`segment_kernel_source`.

    Example:
        >>> (fwd, rev), codes = segment_kernels()
        >>> import numpy as np
        >>> codes[np.sin] == kernel()[1][np.sin]
        True
    """
    return _load("segment")


def hvp_segment_kernels():
    """((forward, reverse) HVP segment kernels, the opcode of each unary ufunc), compiled or
    loaded on first use; see :func:`hvp_segment_kernel_source`.

    Example:
        >>> (fwd, rev), codes = hvp_segment_kernels()
        >>> import numpy as np
        >>> codes[np.sin] == kernel()[1][np.sin]
        True
    """
    return _load("hvp_segment")


def _number(v):
    """A constant operand as the float64 NumPy would convert it to, or None if unsupported."""
    t = type(v)
    if t is _F64 or t is float:
        return float(v)
    if t is int and abs(v) <= _EXACT_INT:
        return float(v)
    return None


def _f64_array(v, shape):
    """Whether ``v`` is a native float64 ndarray of ``shape`` (what the kernels take)."""
    if type(v) is not np.ndarray or v.shape != shape:
        return False
    dt = v.dtype
    return dt is _F64_DT or dt == _F64_DT


def _check_leaves(leaves, shapes):
    if len(leaves) != len(shapes):
        raise _Failed()
    for leaf, shape in zip(leaves, shapes):
        if not _f64_array(leaf, shape):
            raise _Failed()


def _check_rules(fns):
    for fn in fns:  # a rule registered since the recording: record instead
        if RRULES.get(fn) is not fastpath._BUILTIN.get(fn, _STACK_RULES.get(fn)):
            raise _Failed()


def _flat(arrays):
    return arrays[0].ravel() if len(arrays) == 1 else \
        np.concatenate([a.ravel() for a in arrays])


class CompiledPlan:
    """A replay :class:`~mooncake_py.replay.plans.Plan` run by the compiled kernel; made by
    :func:`compile_plan`, used by the Replayer exactly as the plan it wraps."""

    def __init__(self, plan, arrays, shapes, fns, k):
        self.plan = plan
        self.constants = plan.constants
        self.finish = plan.finish
        self._arrays = arrays
        self._shapes = shapes
        self._sizes = [int(np.prod(s)) for s in shapes]
        self._fns = fns
        self._k = k  # (the kernel loaded and self-tested when the plan was encoded)
        self.runs = 0
        # the rules the kernel stands for (fixed when the modules loaded), for run_one
        self._rules = tuple((fn, fastpath._BUILTIN.get(fn, _STACK_RULES.get(fn)))
                            for fn in fns)
        # finish is as_gradient to a float64 leaf: the kernel's fresh gradient (whose base
        # is numba's allocation) comes out as its copy
        self._copy_out = bool(getattr(plan.finish, "owned_as_is", 0)) and \
            getattr(plan.finish, "dtypes", None) == [_F64_DT]

    def _split(self, g):
        if len(self._shapes) == 1:
            return [g.reshape(self._shapes[0])]
        cts, o = [], 0
        for shape, size in zip(self._shapes, self._sizes):
            cts.append(g[o:o + size].reshape(shape))
            o += size
        return cts

    def run(self, leaves):
        _check_leaves(leaves, self._shapes)
        _check_rules(self._fns)
        op, a, b, c, dst, n, ynode = self._arrays
        x = _flat(leaves)
        ok, y, g = self._k(op, a, b, c, dst, x, n, ynode, x.shape[0])
        if not ok:
            raise _Failed()
        self.runs += 1
        return _F64(y), self._split(g)

    def run_one(self, x):
        """``(value, gradient)`` for one float64 array ``x`` (a plan of one input): what
        :meth:`run` and the plan's ``finish`` give, without their lists. Raises where they
        raise."""
        shapes = self._shapes
        if len(shapes) != 1 or not _f64_array(x, shapes[0]):
            raise _Failed()
        get = RRULES.get
        for fn, rule in self._rules:  # (as _check_rules, its rules looked up once)
            if get(fn) is not rule:
                raise _Failed()
        op, a, b, c, dst, n, ynode = self._arrays
        x = x.ravel()
        ok, y, g = self._k(op, a, b, c, dst, x, n, ynode, x.shape[0])
        if not ok:
            raise _Failed()
        self.runs += 1
        if self._copy_out:  # (what finish's as_gradient makes of it)
            return _F64(y), g.reshape(shapes[0]).copy()
        g, = self.finish([g.reshape(shapes[0])])
        return _F64(y), g


class CompiledHVPPlan(CompiledPlan):
    """A replay plan recorded on dual numbers (an HVP cache's), run by the forward-over-reverse
    kernel: it takes this call's dual leaves and returns what the Python replay returns, the
    value and the gradients as duals of this call's tag whose tangents are the input
    direction's derivative (for the gradients: H·v)."""

    def run(self, leaves):
        dual = DualArray
        shapes = self._shapes
        if len(leaves) == 1:  # (the common case, without the lists)
            leaf, = leaves
            if type(leaf) is not dual:
                raise _Failed()
            tag, x, xt = leaf._tag, leaf._value, leaf._tangent
            # (a tangent with lanes, a Hessian's, fails the shape check: not compiled)
            if not (_f64_array(x, shapes[0]) and _f64_array(xt, shapes[0])):
                raise _Failed()
            x, xt = x.ravel(), xt.ravel()
        else:
            if not leaves:
                raise _Failed()
            tag = leaves[0]._tag
            for leaf in leaves:
                if type(leaf) is not dual or leaf._tag is not tag:
                    raise _Failed()
            values = [leaf._value for leaf in leaves]
            tangents = [leaf._tangent for leaf in leaves]
            _check_leaves(values, shapes)
            _check_leaves(tangents, shapes)
            x, xt = _flat(values), _flat(tangents)
        _check_rules(self._fns)
        op, a, b, c, dst, n, ynode = self._arrays
        ok, y, yt, g, gt = self._k(op, a, b, c, dst, x, xt, n, ynode, x.shape[0])
        if not ok:
            raise _Failed()
        self.runs += 1
        if len(shapes) == 1:
            shape = shapes[0]
            return dual(_F64(y), _F64(yt), tag), [dual(g.reshape(shape), gt.reshape(shape), tag)]
        return dual(_F64(y), _F64(yt), tag), [dual(p, t, tag) for p, t in
                                              zip(self._split(g), self._split(gt))]

    def run_one(self, x, v):
        """``(value, gradient, H·v)`` for one float64 array ``x`` and direction ``v`` (a plan
        of one input): the kernel's outputs as the general path reads them back from the duals
        :meth:`run` returns, without making them. Raises where :meth:`run` raises."""
        shapes = self._shapes
        if len(shapes) != 1 or not (_f64_array(x, shapes[0]) and _f64_array(v, shapes[0])):
            raise _Failed()
        _check_rules(self._fns)
        op, a, b, c, dst, n, ynode = self._arrays
        x = x.ravel()
        ok, y, _, g, gt = self._k(op, a, b, c, dst, x, v.ravel(), n, ynode, x.shape[0])
        if not ok:
            raise _Failed()
        self.runs += 1
        shape = shapes[0]
        return _F64(y), g.reshape(shape), gt.reshape(shape)




def _flat_index(key, shape):
    """The offset of element ``key`` (an int, or a tuple of ints, one per axis) of a C-ordered
    array of ``shape``, or None when it is not an in-bounds element read."""
    keys = (key,) if type(key) in fastpath._INT_KEYS else key
    if type(keys) is not tuple or len(keys) != len(shape) or not keys:
        return None
    off = 0
    for k, size in zip(keys, shape):
        if type(k) not in fastpath._INT_KEYS:
            return None
        k = int(k)
        if not -size <= k < size:
            return None
        off = off * size + k % size
    return off


def _encode(plan, shapes, offsets, codes):
    """The kernel's arrays for ``plan`` (and the functions whose rules it assumes), or None
    when a step is not one the kernels run. Gradient plans hold the short-path steps (_ITEM,
    _BIN, _UNARY); plans recorded on duals hold the same ops as general _OP steps: both are
    accepted."""
    ninp = len(plan.inputs)
    m = len(plan.steps)
    op = np.zeros(m, np.int64)
    a = np.full(m, -1, np.int64)
    b = np.full(m, -1, np.int64)
    c = np.zeros(m)
    dst = np.zeros(m, np.int64)
    fns = set()

    def scalar_node(p):  # a node the kernel holds as a float: made by an earlier scalar step
        return type(p) is int and ninp <= p < plan.n

    def operands(s, tmpl):
        consts = 0
        for j, (kind, ref) in enumerate(tmpl):
            if kind == _SLOT:
                if not scalar_node(ref):
                    return False
                (a if j == 0 else b)[s] = ref
            elif kind == _CONST:
                v = _number(ref)
                if v is None:
                    return False
                consts += 1
                c[s] = v
            else:
                return False
        return consts <= 1

    def read(s, p, key, node):
        if not (type(p) is int and 0 <= p < ninp):
            return False
        off = _flat_index(key, shapes[p])
        if off is None:
            return False
        op[s], a[s], dst[s] = 0, offsets[p] + off, node
        return True

    for s, step in enumerate(plan.steps):
        kind = step[0]
        if kind == _ITEM:
            _, fn, node, p, key, _ = step
            if not read(s, p, key, node):
                return None
            fns.add(fn)
        elif kind == _BIN:
            _, fn, node, tmpl, pyop, _, _ = step
            if pyop not in _ARITH or not operands(s, tmpl):
                return None
            op[s], dst[s] = _ARITH[pyop], node
            fns.add(fn)
        elif kind == _UNARY:
            _, fn, node, p, _, _ = step
            if fn not in codes or not scalar_node(p):
                return None
            op[s], a[s], dst[s] = codes[fn], p, node
            fns.add(fn)
        elif kind == _OP:
            _, fn, rule, tmpl, kw, _, node, shape, dt = step
            if kw or shape != () or dt != _F64 or rule is not fastpath._BUILTIN.get(fn):
                return None
            if fn is operator.getitem:
                if len(tmpl) != 2 or tmpl[0][0] != _SLOT or tmpl[1][0] != _CONST or \
                        not read(s, tmpl[0][1], tmpl[1][1], node):
                    return None
            elif fn in _BINARY_UFUNCS:
                if len(tmpl) != 2 or not operands(s, tmpl) or _zero_power(fn, tmpl):
                    return None
                op[s], dst[s] = _BINARY_UFUNCS[fn], node
            elif fn in codes:
                if len(tmpl) != 1 or tmpl[0][0] != _SLOT or not scalar_node(tmpl[0][1]):
                    return None
                op[s], a[s], dst[s] = codes[fn], tmpl[0][1], node
            else:
                return None
            fns.add(fn)
        elif kind == _GUARD:
            _, fn, tmpl, kw, seen = step
            if fn not in _CMP or kw or len(tmpl) != 2 or type(seen) is not np.bool_ or \
                    not operands(s, tmpl):
                return None
            op[s], dst[s] = _CMP[fn][1], int(bool(seen))
        elif kind == _OBSERVE:
            _, node, conv, seen = step
            if conv is not bool or not scalar_node(node) or type(seen) is not bool:
                return None
            op[s], a[s], dst[s] = _TRUTH, node, int(seen)
        else:
            return None
    return (op, a, b, c, dst, plan.n, plan.ynode), tuple(fns)


_BINARY_UFUNCS = {np.add: 1, np.subtract: 2, np.multiply: 3, np.true_divide: 4,
                  np.power: _POW}


def _zero_power(fn, tmpl):
    """Whether the step is ``a ** 0``: left to Python, since on duals it makes a value
    without a tangent, which the kernels do not hold."""
    return fn is np.power and tmpl[1][0] == _CONST and _number(tmpl[1][1]) == 0.0


def compile_plan(plan, leaves, dual=False):
    """``plan`` as a :class:`CompiledPlan` (``dual``: a :class:`CompiledHVPPlan`, for a plan
    recorded on the dual leaves of an HVP cache), or None when it holds a step the kernels do
    not run (see the module docstring) or its arguments are not all float64 arrays (for
    ``dual``: duals of float64 arrays with one direction each).

    Example:
        >>> import numpy as np
        >>> import mooncake_py as mp
        >>> def f(x):
        ...     s = 0.0
        ...     for i in range(3):
        ...         s = s + np.sin(x[i]) * x[i]
        ...     return s
        >>> c = mp.prepare_gradient_cache(f, np.ones(3), compile=True)
        >>> x = np.array([0.1, 0.2, 0.3])
        >>> g1 = mp.value_and_gradient(c, f, x)[1][0]   # records, plans, compiles
        >>> g2 = mp.value_and_gradient(c, f, x)[1][0]   # runs the kernel
        >>> bool(np.allclose(g2, np.sin(x) + x * np.cos(x), rtol=1e-14, atol=0))
        True
    """
    if plan is None or len(plan.steps) > MAX_STEPS:
        return None
    shapes, offsets, o = [], [], 0
    for leaf in leaves:
        if dual:
            if type(leaf) is not DualArray:
                return None
            t, leaf = leaf._tangent, leaf._value
            if type(t) is not np.ndarray or t.dtype != _F64 or t.shape != np.shape(leaf):
                return None
        if type(leaf) is not np.ndarray or leaf.dtype != _F64:
            return None
        shapes.append(leaf.shape)
        offsets.append(o)
        o += leaf.size
    if len(shapes) != len(plan.inputs) or plan.ynode < len(plan.inputs):
        return None
    k, codes = hvp_kernel() if dual else kernel()
    enc = _encode(plan, shapes, offsets, codes)
    if enc is None:
        return None
    arrays, fns = enc
    return (CompiledHVPPlan if dual else CompiledPlan)(plan, arrays, tuple(shapes), fns, k)


# --- mixed plans: compiled segments between Python steps -------------------------------------
# Runs of compilable steps shorter than this stay Python replay: a segment costs two kernel
# calls and a few µs of Python around them, about what the Python replay of ~10 steps costs.
MIN_SEGMENT = 16


def _refs(tmpl, out):
    for t in tmpl:
        if t[0] == _SLOT:
            out.append(t[1])
        elif t[0] == _SEQ_T:
            _refs(t[2], out)
    return out


def _step_refs(step):
    """The nodes whose values a plan step reads; None for a kind of step not known here."""
    kind = step[0]
    if kind in (_ITEM, _UNARY, _SUM):
        return [step[3]]
    if kind in (_BIN, _OP):
        return _refs(step[3], [])
    if kind == _GUARD:
        return _refs(step[2], [])
    if kind == _OBSERVE:
        return [step[1]]
    if kind == _WRITE:  # (its node is the buffer written: an array, never a scalar step's)
        return [step[2], step[5]] if step[4] else [step[2]]
    if kind == _VIEW_WRITE:
        return [step[2]]
    if kind == _LIKE:  # (a like= constructor: it reads its like= array only)
        return [step[5]]
    return None


def _step_node(step):
    kind = step[0]
    if kind in (_ITEM, _BIN, _UNARY, _SUM):
        return step[2]
    return step[6] if kind == _OP else None


def _node_info(plan, leaves):
    """(shape, dtype) of every node, as recorded (None where not known)."""
    info = [None] * plan.n
    for node, leaf in zip(plan.inputs, leaves):
        info[node] = (np.shape(leaf), np.asarray(leaf).dtype)
    for step in plan.steps:
        node = _step_node(step)
        if node is not None:
            info[node] = (step[7], step[8]) if step[0] == _OP else ((), _F64_DT)
    return info


def _step_spec(step, info, codes, stacks=False):
    """A step the kernels run, as (opcode, first operand, second operand, constant, dst) with
    operands ("s", node) for a float64 scalar node, ("e", node, offset) for an element of a
    float64 array node, or None (a constant, or none); dst is the node made, or for a guard
    the value seen. None when the kernels do not run this step. ``stacks``: also np.stack and
    np.hstack of float64 scalars and numbers (:data:`_STACK`), which only segments run."""
    def scalar(p):
        return type(p) is int and info[p] == ((), _F64_DT)

    def element(p, key):
        if type(p) is not int or info[p] is None:
            return None
        shape, dt = info[p]
        if dt != _F64_DT or not shape:
            return None
        off = _flat_index(key, shape)
        return None if off is None else ("e", p, off)

    def operands(tmpl):
        ops, const, consts = [], 0.0, 0
        for kind, ref in tmpl:
            if kind == _SLOT and scalar(ref):
                ops.append(("s", ref))
            elif kind == _CONST and _number(ref) is not None:
                const, consts = _number(ref), consts + 1
                ops.append(None)
            else:
                return None
        return None if consts > 1 or len(ops) != 2 else (ops[0], ops[1], const)

    kind = step[0]
    if kind == _ITEM:
        e = element(step[3], step[4])
        return None if e is None else (0, e, None, 0.0, step[2])
    if kind == _BIN:
        ops = operands(step[3])
        return None if ops is None or step[4] not in _ARITH else \
            (_ARITH[step[4]], ops[0], ops[1], ops[2], step[2])
    if kind == _UNARY:
        fn, p = step[1], step[3]
        return (codes[fn], ("s", p), None, 0.0, step[2]) if fn in codes and scalar(p) else None
    if kind == _OP:
        _, fn, rule, tmpl, kw, _, node, shape, dt = step
        if stacks and fn in _STACKS:
            return _stack_spec(step, scalar)
        if kw or shape != () or dt != _F64_DT or rule is not fastpath._BUILTIN.get(fn):
            return None
        if fn is operator.getitem:
            if len(tmpl) != 2 or tmpl[0][0] != _SLOT or tmpl[1][0] != _CONST:
                return None
            e = element(tmpl[0][1], tmpl[1][1])
            return None if e is None else (0, e, None, 0.0, node)
        if fn in _BINARY_UFUNCS:
            ops = operands(tmpl) if len(tmpl) == 2 and not _zero_power(fn, tmpl) else None
            return None if ops is None else (_BINARY_UFUNCS[fn], ops[0], ops[1], ops[2], node)
        if fn in codes and len(tmpl) == 1 and tmpl[0][0] == _SLOT and scalar(tmpl[0][1]):
            return (codes[fn], ("s", tmpl[0][1]), None, 0.0, node)
        return None
    if kind == _GUARD:
        _, fn, tmpl, kw, seen = step
        if fn not in _CMP or kw or len(tmpl) != 2 or type(seen) is not np.bool_:
            return None
        ops = operands(tmpl)
        return None if ops is None else (_CMP[fn][1], ops[0], ops[1], ops[2], int(bool(seen)))
    if kind != _OBSERVE:
        return None
    _, node, conv, seen = step
    if conv is not bool or not scalar(node) or type(seen) is not bool:
        return None
    return (_TRUTH, ("s", node), None, 0.0, int(seen))


def _stack_spec(step, scalar):
    _, fn, rule, tmpl, kw, _, node, shape, dt = step
    if kw or dt != _F64_DT or rule is not _STACK_RULES[fn] or len(tmpl) != 1 or \
            tmpl[0][0] != _SEQ_T or shape != (len(tmpl[0][2]),) or not tmpl[0][2]:
        return None
    ops = []
    for kind, ref in tmpl[0][2]:
        if kind == _SLOT and scalar(ref):
            ops.append(("s", ref))
        elif kind == _CONST and _number(ref) is not None:
            ops.append(("c", _number(ref)))
        else:
            return None
    return (_STACK, ("q", tuple(ops)), None, 0.0, node)


def op_name(fn):
    """How a report names the function of a plan step: ``np.sin``, ``x[...]``, ``operator.add``.

    Example:
        >>> op_name(np.sin), op_name(operator.getitem), op_name(len)
        ('np.sin', 'x[...]', 'len')
    """
    if fn is operator.getitem:
        return "x[...]"
    if isinstance(fn, np.ufunc):
        return "np." + fn.__name__
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    mod = getattr(fn, "__module__", None) or ""
    if mod == "_operator":
        mod = "operator"
    if mod.startswith("numpy"):
        mod = "np"
    return f"{mod}.{name}" if mod and mod not in ("builtins",) else name


def _describe_value(info, p):
    if type(p) is not int or info[p] is None:
        return "an array the kernels do not hold (a buffer written, or several outputs)"
    shape, dt = info[p]
    return f"a {np.dtype(dt).name} value of shape {shape}" if shape else \
        f"a {np.dtype(dt).name} scalar"


def why_not(step, info, codes):
    """``(what the step is, why the kernels do not run it)`` for a plan step that
    :func:`_step_spec` refuses; ``(what, None)`` for one it takes. ``info`` and ``codes`` as for
    :func:`_step_spec`. The reasons are the checks of :func:`_step_spec`, in words.

    Example:
        >>> step = (_OP, np.arcsinh, None, ((_SLOT, 2),), {}, (True,), 3, (), _F64_DT)
        >>> why_not(step, [None, None, ((), _F64_DT), None], _opcodes())
        ('np.arcsinh', 'np.arcsinh is not one of the kernel ops (+ - * / **, the unary functions of the table, comparisons)')
    """
    kind = step[0]
    what = {_WRITE: "write y[...] = v", _VIEW_WRITE: "write through a view",
            _LIKE: "like= constructor", _OBSERVE: "bool()/int() of a traced value"}.get(kind)
    if what is None:
        what = op_name(step[1]) if kind != _SUM else "np.sum"
    if _step_spec(step, info, codes) is not None:
        return what, None
    vocab = ("is not one of the kernel ops (+ - * / **, the unary functions of the table, "
             "comparisons)")
    if kind == _WRITE:
        return what, "a write into an array: the kernels hold scalars only"
    if kind == _VIEW_WRITE:
        return what, "a write through a view: the kernels hold scalars only"
    if kind == _LIKE:
        return what, "allocates an array: the kernels hold scalars only"
    if kind == _SUM:
        return what, "a reduction of an array: not a scalar step"
    if kind == _OBSERVE:
        _, node, conv, _ = step
        if conv is not bool:
            return what, f"{getattr(conv, '__name__', conv)}() of a traced value (only bool)"
        return what, f"bool() of {_describe_value(info, node)}, not of a float64 scalar"
    if kind == _ITEM:
        return what, (f"an element read of {_describe_value(info, step[3])}: only int keys "
                      "into float64 arguments and arrays are kernel reads")
    if kind == _UNARY:
        fn = step[1]
        return what, f"{what} {vocab}" if fn not in codes else \
            f"{what} of {_describe_value(info, step[3])}, not of a float64 scalar"
    if kind == _GUARD:
        if step[1] not in _CMP:
            return what, f"a guard on {what}: only comparisons of scalars are kernel guards"
        return what, "a comparison of operands that are not float64 scalars or numbers"
    if kind == _BIN:
        if step[4] not in _ARITH:
            return what, f"{what} {vocab}"
        return what, _operand_reason(step[3], info)
    if kind == _OP:
        _, fn, rule, tmpl, kw, _, node, shape, dt = step
        if fn not in fastpath._BUILTIN:
            return what, f"{what} {vocab}" if shape == () else \
                f"{what} makes an array of shape {shape}: not a scalar step"
        if rule is not fastpath._BUILTIN[fn]:
            return what, f"{what} runs a rule registered by the user, not the built-in one"
        if kw:
            return what, f"{what} with keyword arguments {sorted(kw)}"
        if shape != ():
            return what, f"{what} makes an array of shape {shape}: not a scalar step"
        if dt != _F64_DT:
            return what, f"{what} makes a {np.dtype(dt).name} value: the kernels run float64"
        if fn is operator.getitem:
            return what, ("an element read that is not x[int] of a float64 array ("
                      f"{_describe_value(info, tmpl[0][1]) if tmpl[0][0] == _SLOT else ''})")
        if fn in _BINARY_UFUNCS or fn in codes:
            return what, _operand_reason(tmpl, info)
        return what, f"{what} {vocab}"
    return what, "a kind of step the kernels do not know"


def _operand_reason(tmpl, info):
    for kind, ref in tmpl:
        if kind == _SLOT and not (type(ref) is int and info[ref] == ((), _F64_DT)):
            return f"an operand is {_describe_value(info, ref)}, not a float64 scalar"
        if kind == _CONST and _number(ref) is None:
            return f"a constant operand {ref!r} of type {type(ref).__name__} (only floats " \
                "and ints up to 2**53)"
        if kind not in (_SLOT, _CONST):
            return "an operand is a sequence"
    return "two constant operands"


class _SegmentState(np.ndarray):
    """A segment's values in one call (the value of its first node in the replayed plan),
    with the cotangents its outputs received in that call's sweep."""


class _Segment:
    """A run of a mixed plan's steps encoded for the segment kernels: the nodes it reads from
    outside (scalars, arrays it reads elements of, and the buffers it writes), its steps, its
    outputs.

    A buffer written in the run (write specs of :func:`_write_specs`) is held as scalar slots,
    one per element the run reads or writes: loaded from the buffer as the run begins (as
    op-0 reads of ``X``), read by copying (``* 1.0``: the same bits, and a cotangent passed
    on as it is), written by :data:`_WRITE_OP`, stored back into the buffer as it ends. Its
    last state is an output (the buffer itself) when later steps read it; its cotangent seeds
    the slots, and the buffer's state before the run gets that cotangent with the slots'
    elements replaced by theirs: what the tape's write and read pullbacks give, element by
    element.

    A stack of scalars (:data:`_STACK`) is a buffer made in the run: every element written
    (one write per scalar, in order), none loaded; the segment makes the array as it ends,
    an output like the buffers written, and the stack's pullback (each scalar gets its
    element of the cotangent) is the writes' sweep."""

    def __init__(self, specs, lo, outputs, info, fns):
        self.fns = fns
        specs, fresh = _expand_stacks(specs)
        chain = {}  # a buffer state written or read in the run -> its state before the run
        lastw = {}
        for code, _, eb, _, d in specs:
            if code == _WRITE_OP:
                chain[d] = chain.setdefault(eb[1], eb[1])
                lastw[chain[d]] = d
        scalars, arrays, slots = {}, {}, {}
        for code, ea, eb, _, _ in specs:
            for e in (ea, eb):
                if e is None:
                    continue
                if e[0] == "s" and e[1] < lo:
                    scalars.setdefault(e[1], len(scalars))
                elif e[0] == "e" and e[1] not in chain:
                    arrays.setdefault(e[1], None)
                elif e[0] in "eb":
                    slots.setdefault((chain[e[1]], e[2]), len(slots))
        self.nscalar = E = len(scalars)
        o, self.arrays = E, []
        for node in arrays:
            shape = info[node][0]
            size = int(np.prod(shape))
            arrays[node] = o
            self.arrays.append((shape, o, size))
            o += size
        last = max(sp[4] for sp in specs if sp[0] <= 4 or sp[0] >= _NEG)
        nodes = E + last - lo + 1
        roots = list(dict.fromkeys(r for r, _ in slots))
        roots = [r for r in roots if r not in fresh] + [r for r in roots if r in fresh]
        self.buffers = []  # (shape, first X offset, element offsets, their slots)
        self.made = []  # the stacks' buffers, as self.buffers without an X offset
        S = 0  # (the slots loaded from X: those of the buffers from outside)
        for r in roots:
            elems = [(off, nodes + k) for (q, off), k in slots.items() if q == r]
            b = (info[r][0], None if r in fresh else o,
                 np.array([e for e, _ in elems], np.int64),
                 np.array([k for _, k in elems], np.int64))
            if r in fresh:
                self.made.append(b)
                continue
            self.buffers.append(b)
            o += len(elems)
            S += len(elems)
        self.all_buffers = self.buffers + self.made  # (buffer output k: all_buffers[-1 - k])
        self.nx = o
        self.external = tuple(scalars) + tuple(arrays) + tuple(roots[:len(self.buffers)])
        self.n = nodes + len(slots)
        m = E + S + len(specs)
        op = np.zeros(m, np.int64)
        a = np.full(m, -1, np.int64)
        b = np.full(m, -1, np.int64)
        c = np.zeros(m)
        dst = np.zeros(m, np.int64)
        a[:E] = np.arange(E)  # the scalars read from outside: op 0, X[k] -> local node k
        dst[:E] = np.arange(E)
        s = E
        for _, xo, _, sl in self.buffers:  # the slots, loaded from their buffers
            a[s:s + len(sl)] = np.arange(xo, xo + len(sl))
            dst[s:s + len(sl)] = sl
            s += len(sl)

        def local(e):
            if e is None:
                return -1
            return scalars[e[1]] if e[1] < lo else E + e[1] - lo

        def slot(e):
            return nodes + slots[(chain[e[1]], e[2])]
        for s, (code, ea, eb, const, d) in enumerate(specs, E + S):
            op[s], c[s] = code, const
            if code == 0:
                if ea[1] in chain:
                    op[s], a[s], c[s], dst[s] = 3, slot(ea), 1.0, E + d - lo
                else:
                    a[s], dst[s] = arrays[ea[1]] + ea[2], E + d - lo
                continue
            if code == _WRITE_OP:
                a[s], dst[s] = local(ea), slot(eb)
                continue
            a[s], b[s] = local(ea), local(eb)
            dst[s] = d if _TRUTH >= code >= 5 else E + d - lo
        self.code = (op, a, b, c, dst)
        self.outputs, self.buffer_outputs = {}, {}
        for node in outputs:
            if node in chain:  # (a stack's node is its own chain)
                if lastw[chain[node]] != node:  # (a stale state: the recording never reads one)
                    raise ValueError("a buffer's earlier state is read after the run")
                self.buffer_outputs[node] = -1 - roots.index(chain[node])
            else:
                self.outputs[node] = E + node - lo

    _kernels = None  # (forward, reverse), loaded on the first run
    _load_kernels = staticmethod(segment_kernels)

    def kernels(self):
        """The (forward, reverse) kernels of this kind of segment."""
        ks = self._kernels
        if ks is None:
            ks = self._kernels = self._load_kernels()[0]
        return ks

    def _check_rules(self):
        rules = self.__dict__.get("_rules")
        if rules is None:  # (the rules the steps stand for: fixed when the module loaded)
            rules = self._rules = tuple((fn, fastpath._BUILTIN.get(fn, _STACK_RULES.get(fn)))
                                        for fn in self.fns)
        get = RRULES.get
        for fn, rule in rules:  # a rule registered since the recording: record instead
            if get(fn) is not rule:
                raise _Failed()

    def _fill(self, values):
        """``X`` for ``values`` (of :attr:`external`), and the buffers' flat views."""
        if self.nscalar == 0 and len(self.arrays) == 1 and not self.buffers and \
                len(values) == 1:
            # one array read from outside (a loop over its elements): the kernel reads it
            # where it is when numba types it as it types a fresh array
            v, = values
            if _f64_array(v, self.arrays[0][0]):
                fl = v.flags
                if fl.c_contiguous and fl.writeable and fl.aligned:
                    return v.reshape(-1), []
        X = np.empty(self.nx)
        E = self.nscalar
        for k in range(E):
            X[k] = float(values[k])
        A = len(self.arrays)
        for v, (shape, o, size) in zip(values[E:E + A], self.arrays):
            if not _f64_array(v, shape):
                raise _Failed()
            X[o:o + size] = v.reshape(-1)
        flats = []
        for v, (shape, o, idx, _) in zip(values[E + A:], self.buffers):
            if not _f64_array(v, shape) or not v.flags.c_contiguous or not v.flags.writeable:
                raise _Failed()
            flat = v.reshape(-1)
            X[o:o + len(idx)] = flat[idx]
            flats.append(flat)
        return X, flats

    def forward(self, values):
        self._check_rules()
        fwd = self.kernels()[0]
        X, flats = self._fill(values)
        ok, V = fwd(*self.code, X, self.n)
        if not ok:
            raise _Failed()
        for flat, (_, _, idx, sl) in zip(flats, self.buffers):
            flat[idx] = V[sl]
        state = V.view(_SegmentState)
        state.seeds = {}
        state.values = V
        state.buffers = list(values[len(values) - len(self.buffers):]) + \
            [V[sl].reshape(shape) for shape, _, _, sl in self.made]
        return state, lambda g: self.reverse(state)

    def _seeds(self, seeds):
        """(nodes, cotangents) seeding the reverse kernel, and each buffer's cotangent."""
        sn, sv, bufs = [], [], {}
        nodes, vals = [], []
        for k, g in seeds.items():
            if k >= 0:
                sn.append(k)
                sv.append(float(g))
                continue
            shape, _, idx, sl = self.all_buffers[-1 - k]
            g = _dense(g, shape)
            bufs[-1 - k] = g
            nodes.append(sl)
            vals.append(g.reshape(-1)[idx])
        if not nodes:
            return np.array(sn, np.int64), np.array(sv), bufs
        if not sn and len(nodes) == 1:  # (one buffer seeded: its slots' arrays as they are)
            return nodes[0], vals[0], bufs
        return np.concatenate([np.array(sn, np.int64)] + nodes), \
            np.concatenate([np.array(sv)] + vals), bufs

    def reverse(self, state):
        seeds = state.seeds
        if not seeds:
            return (None,) * len(self.external)
        rev = self.kernels()[1]
        sn, sv, bufs = self._seeds(seeds)
        G = rev(*self.code, state.values, sn, sv, self.nx)
        E = self.nscalar
        out = [_F64(G[k]) for k in range(E)] + [
            G[o:o + size].reshape(shape) for shape, o, size in self.arrays]
        for k, (shape, o, idx, _) in enumerate(self.buffers):
            g = bufs.get(k)
            g = np.zeros(shape) if g is None else np.array(g, _F64)
            g.reshape(-1)[idx] = G[o:o + len(idx)]
            out.append(g)
        return tuple(out)


def _expand_stacks(specs):
    """``specs`` with each stack spec written out as writes of its scalars into the slots of
    a buffer that starts at the stack's node, and the set of those nodes."""
    if not any(sp[0] == _STACK for sp in specs):
        return specs, set()
    out, fresh = [], set()
    for sp in specs:
        if sp[0] != _STACK:
            out.append(sp)
            continue
        node = sp[4]
        fresh.add(node)
        for k, e in enumerate(sp[1][1]):
            value, const = (e, 0.0) if e[0] == "s" else (None, e[1])
            out.append((_WRITE_OP, value, ("b", node, k), const, node))
    return out, fresh


def _dense(g, shape):
    """A buffer's cotangent ``g`` as a float64 ndarray of ``shape`` (raises _Failed)."""
    if type(g) is not np.ndarray and hasattr(g, "dense"):
        g = g.dense()
    if type(g) is not np.ndarray or g.shape != shape or g.dtype != _F64_DT:
        raise _Failed()
    return g


class _DualSegment(_Segment):
    """A :class:`_Segment` of a plan recorded on duals (an HVP cache's), run by the HVP
    segment kernels: it reads dual scalars and dual float64 arrays of one tag (one direction)
    from outside, writes its buffers' values and tangents, makes its outputs as dual scalars,
    and sweeps the cotangents its outputs received (plain numbers or duals of that tag) back
    as the HVP kernel does."""

    _load_kernels = staticmethod(hvp_segment_kernels)

    def forward(self, values):
        self._check_rules()
        fwd = self.kernels()[0]
        D = DualArray
        tag = None
        vals, tans = [], []
        for d in values:
            if type(d) is not D or (tag is not None and d._tag is not tag):
                raise _Failed()
            tag = d._tag
            vals.append(d._value)
            tans.append(d._tangent)
        if tag is None or tag.lanes or tag._watch:
            raise _Failed()
        X, flats = self._fill(vals)
        XT, tflats = self._fill(tans)
        ok, V, T = fwd(*self.code, X, XT, self.n)
        if not ok:
            raise _Failed()
        for flat, tflat, (_, _, idx, sl) in zip(flats, tflats, self.buffers):
            flat[idx] = V[sl]
            tflat[idx] = T[sl]
        state = V.view(_SegmentState)
        state.seeds, state.tag, state.vs, state.ts = {}, tag, V, T
        state.values = {k: D(_F64(V[k]), _F64(T[k]), tag) for k in self.outputs.values()}
        state.buffers = list(values[len(values) - len(self.buffers):]) + \
            [D(V[sl].reshape(shape), T[sl].reshape(shape), tag)
             for shape, _, _, sl in self.made]
        return state, lambda g: self.reverse(state)

    def reverse(self, state):
        seeds = state.seeds
        if not seeds:
            return (None,) * len(self.external)
        rev = self.kernels()[1]
        D, tag = DualArray, state.tag
        sn, sv, st, sd, bufs = [], [], [], [], {}
        nodes, vals, tans, duals = [], [], [], []
        for k, g in seeds.items():
            dual = type(g) is D
            if dual and g._tag is not tag:
                raise _Failed()
            if k >= 0:
                sn.append(k)
                sv.append(float(g._value if dual else g))
                st.append(float(g._tangent) if dual else 0.0)
                sd.append(dual)
                continue
            shape, _, idx, sl = self.all_buffers[-1 - k]
            gv = _dense(g._value if dual else g, shape)
            gt = _dense(g._tangent, shape) if dual else None
            bufs[-1 - k] = (gv, gt)
            nodes.append(sl)
            vals.append(gv.reshape(-1)[idx])
            tans.append(gt.reshape(-1)[idx] if dual else np.zeros(len(idx)))
            duals.append(np.full(len(idx), dual))
        if nodes:
            if sn:
                nodes.insert(0, np.array(sn, np.int64))
                vals.insert(0, np.array(sv))
                tans.insert(0, np.array(st))
                duals.insert(0, np.array(sd, np.bool_))
            if len(nodes) == 1:
                sn, sv, st, sd = nodes[0], vals[0], tans[0], duals[0]
            else:
                sn, sv, st, sd = (np.concatenate(a) for a in (nodes, vals, tans, duals))
        else:
            sn, sv, st, sd = np.array(sn, np.int64), np.array(sv), np.array(st), \
                np.array(sd, np.bool_)
        G, GT, GD = rev(*self.code, state.vs, state.ts, sn, sv, st, sd, self.nx)
        E = self.nscalar
        out = [D(_F64(G[k]), _F64(GT[k]), tag) if GD[k] else _F64(G[k]) for k in range(E)]
        for shape, o, size in self.arrays:
            g = G[o:o + size].reshape(shape)
            out.append(D(g, GT[o:o + size].reshape(shape), tag) if GD[o:o + size].any() else g)
        for k, (shape, o, idx, _) in enumerate(self.buffers):
            gv, gt = bufs.get(k, (None, None))
            gv = np.zeros(shape) if gv is None else np.array(gv, _F64)
            gv.reshape(-1)[idx] = G[o:o + len(idx)]
            if gt is None and not GD[o:o + len(idx)].any():
                out.append(gv)
                continue
            gt = np.zeros(shape) if gt is None else np.array(gt, _F64)
            gt.reshape(-1)[idx] = GT[o:o + len(idx)]
            out.append(D(gv, gt, tag))
        return tuple(out)


def _write_specs(plan, specs, info, dual=False):
    """Give each write that a segment can make a spec (in place), and ``info`` its node:
    ``buf[i, j] = v`` of a float64 scalar (or number; with ``dual``, a dual scalar into a
    dual buffer) into one element of a float64 buffer that ``f`` allocated, whose states are
    read, up to its last such write, only by element reads and by its writes. A segment does
    not undo and redo its writes in the sweep (the tape's MutatingTape does, so that
    pullbacks read the values they saw): those readers' pullbacks read no values, so
    nothing can tell. Returns the nodes of the writes given a spec.

    Example:
        >>> _write_specs(type("P", (), {"steps": []})(), [], [])
        set()
    """
    steps = plan.steps
    buftype = DualArray if dual else np.ndarray
    made_by, root, readers = {}, {}, {}
    for k, st in enumerate(steps):
        kind = st[0]
        if kind == _OP:
            made_by[st[6]] = k
        elif kind == _LIKE:
            made_by[st[1]] = k
            if type(st[7]) is tuple and info[st[1]] is None:
                info[st[1]] = (st[7], np.dtype(st[8]))
        elif kind == _WRITE:
            root[st[1]] = root.get(st[2], st[2])
        for p in _step_refs(st) or ():
            readers.setdefault(p, []).append(k)
    took = {}  # chain root -> [(step, spec)]
    for k, st in enumerate(steps):
        if st[0] != _WRITE:
            continue
        _, node, h, key, is_slot, ref, region, vshape, vdtype, bt = st
        r = root[node]
        shape_dt = info[r]
        if bt is not buftype or region != () or vshape != (() if is_slot else None) or \
                shape_dt is None or \
                shape_dt[1] != _F64_DT or not shape_dt[0] or \
                (vdtype is not None and vdtype != _F64_DT):
            continue
        first = steps[made_by[r]] if r in made_by else None
        if first is None or not ((first[0] == _OP and first[1] in _ALLOCATORS) or
                                 (first[0] == _LIKE and first[2] in _FRESH_LIKE)):
            continue
        off = _flat_index(key, shape_dt[0])
        if off is None:
            continue
        if is_slot:
            if type(ref) is not int or info[ref] != ((), _F64_DT):
                continue
            value, const = ("s", ref), 0.0
        else:
            const = _number(ref)
            if const is None:
                continue
            value = None
        took.setdefault(r, []).append((k, (_WRITE_OP, value, ("b", h, off), const, node)))
    states = {}
    for node, r in root.items():
        states.setdefault(r, [r]).append(node)
    done = set()
    for r, ws in took.items():
        end = ws[-1][0]
        safe = True
        for p in states[r]:
            for k in readers.get(p, ()):
                st = steps[k]
                if k > end or (st[0] == _WRITE and st[2] == p and not
                               (st[4] and st[5] == p)) or _item_read(st, p):
                    continue
                safe = False
        if not safe:
            continue
        for p in states[r]:
            info[p] = info[r]
        for k, spec in ws:
            specs[k] = spec
            done.add(spec[4])
    return done


def _item_read(st, p):
    """Whether plan step ``st`` reads one element of node ``p`` by int keys (a scalar out)."""
    if st[0] == _ITEM:
        return st[3] == p
    if st[0] == _OP and st[1] is operator.getitem and st[7] == ():
        tmpl = st[3]
        return len(tmpl) == 2 and tmpl[0] == (_SLOT, p) and tmpl[1][0] == _CONST and \
            _int_key(tmpl[1][1])
    return False


def _segment_forward(segment, *values):
    """A mixed plan's stand-in for a compiled segment (never called: its rule is)."""
    raise TypeError("_segment_forward is a replay-plan marker")


def _segment_output(state, node):
    """A mixed plan's stand-in for a segment's output node (never called: its rule is)."""
    raise TypeError("_segment_output is a replay-plan marker")


def _segment_forward_rule(args, kwargs, needs):
    return args[0].forward(args[1:])


_NO_CT, _NONE_CT = (0.0,), (None,)


def _segment_output_rule(args, kwargs, needs):
    state, k = args  # (state.values: float64 NumPy scalars, or duals, as the plan's nodes)

    def pullback(g):
        # stash the cotangent for the segment's reverse (its first node, swept after every
        # output); the 0 that the first output swept sends there makes the sweep reach it
        seeds = state.seeds
        seeds[k] = g
        return _NO_CT if len(seeds) == 1 else _NONE_CT
    return state.values[k], pullback


def _segment_buffer(state, k):
    """A mixed plan's stand-in for a buffer a segment wrote, read after it (never called)."""
    raise TypeError("_segment_buffer is a replay-plan marker")


def _segment_buffer_rule(args, kwargs, needs):
    state, k = args
    buf = state.buffers[-1 - k]

    def pullback(g):
        seeds = state.seeds
        seeds[k] = g
        return _NO_CT if len(seeds) == 1 else _NONE_CT
    return buf, pullback


# Plan.run calls an _OP step's rule if it is still the registered one
RRULES[_segment_forward] = _segment_forward_rule
RRULES[_segment_output] = _segment_output_rule
RRULES[_segment_buffer] = _segment_buffer_rule


class MixedPlan(Plan):
    """A replay plan whose long runs of scalar steps are compiled segments (see
    :func:`mix_plan`); it runs as a :class:`~mooncake_py.replay.plans.Plan`."""

    def run(self, leaves):
        out = Plan.run(self, leaves)
        self.runs += 1
        return out


def mix_plan(plan, leaves, dual=False):
    """``plan`` with every run of at least :data:`MIN_SEGMENT` consecutive steps that the
    kernels run replaced by a compiled segment, as a :class:`MixedPlan`; None when there is
    no such run. The other steps stay as they are, Python replay.

    A segment becomes two steps of the plan, in the plan's own vocabulary (rules of two
    private functions): at its first node, a step that runs the segment's forward kernel on
    the values it reads from outside and makes all of its values at once; at each node that
    the steps after the segment read (its outputs), a step that takes that value. The tape
    sweeps as usual: an output's pullback keeps its cotangent for the segment and sends 0 to
    the first node, whose pullback (reached after every output) runs the reverse kernel and
    gives the nodes read from outside their cotangents. A segment's first node must not be
    an output (the steps up to it are left to Python).

    Example:
        >>> import numpy as np
        >>> import mooncake_py as mp
        >>> def f(x):
        ...     v = np.cumsum(x)          # an array op: Python replay
        ...     s = 0.0
        ...     for i in range(20):       # 60 scalar steps: one compiled segment
        ...         s = s + np.sin(v[i]) * x[i]
        ...     return s
        >>> c = mp.prepare_gradient_cache(f, np.ones(20), compile=True)
        >>> x = np.linspace(0, 1, 20)
        >>> g1 = mp.value_and_gradient(c, f, x)[1][0]   # records, plans, encodes
        >>> g2 = mp.value_and_gradient(c, f, x)[1][0]   # Python steps and the kernels
        >>> type(c._replay.plan).__name__, bool(np.allclose(g1, g2, rtol=1e-14, atol=0))
        ('MixedPlan', True)
    """
    if plan is None or len(plan.steps) > MAX_STEPS:
        return None
    if dual:
        if not leaves or not all(type(leaf) is DualArray and
                                 _f64_array(leaf._tangent, np.shape(leaf._value))
                                 for leaf in leaves):
            return None
        leaves = [leaf._value for leaf in leaves]
        hvp_segment_kernels()  # (no numba, or a kernel that fails its test: no mixed plan)
    _, codes = kernel()  # (the opcodes; and no numba: no mixed plan either)
    info = _node_info(plan, leaves)
    # (the writes first: they give the buffer's states the info that their element reads'
    # specs need)
    writes = [None] * len(plan.steps)
    if getattr(plan, "writes", None):
        _write_specs(plan, writes, info, dual)
    specs = [w or _step_spec(st, info, codes, True) for st, w in zip(plan.steps, writes)]
    segments = plan_segments(plan, specs, MIN_SEGMENT, node_of=_made)
    if not segments:
        return None
    mixed = MixedPlan.__new__(MixedPlan)
    mixed.__dict__.update(plan.__dict__)
    mixed.__dict__.pop("_dual_steps", None)  # (made from the plan's own steps)
    mixed.__dict__.pop("run", None)  # (a lean run of the plan itself: replay/lean.py)
    mixed.steps, mixed.parents, mixed.segments = splice_segments(
        plan, segments, specs, info, _DualSegment if dual else _Segment)
    folded = {plan.steps[k][1] for s, e, _, _ in segments for k in range(s, e)
              if plan.steps[k][0] == _WRITE}
    if folded:  # (writes a segment makes: no undo and redo around them in the sweep)
        mixed.writes = [w for w in plan.writes if w not in folded]
        mixed.splits = [w for w in plan.splits if w not in folded]
    mixed.plan, mixed.runs = plan, 0
    _renumber(mixed)
    return attach(mixed, dual)


def _renumber(mixed):
    """Number the nodes of ``mixed`` (a plan just spliced) afresh, in their order: only the
    inputs, the nodes its steps make and its outputs keep a number. The nodes a segment holds
    inside are no step's any more, yet the replay's lists have a slot for each and its sweep
    visits each, so without this a plan's cost per call grows with the steps it no longer
    has. Records in ``origin`` the step each renumbered step stands for (the compile report
    finds the recorded steps by identity). Leaves ``mixed`` as it is when a step or a parent
    refers to a node outside those (a kind of step not known here)."""
    made = set(mixed.inputs)
    for st in mixed.steps:
        node = _made_node(st)
        if node is not None:
            made.add(node)
    if mixed.ynode is not None:
        made.add(mixed.ynode)
    outs = getattr(mixed, "outs", None)
    for k, r in outs or ():
        if k == _SLOT:
            made.add(r)
    old = sorted(made)
    if len(old) == mixed.n:
        mixed.origin = {}
        return
    new = {p: k for k, p in enumerate(old)}
    try:
        steps = [_renumber_step(st, new) for st in mixed.steps]
        parents = [_renumber_parents(mixed.parents[p], new) for p in old]
    except KeyError:
        mixed.origin = {}
        return
    mixed.origin = {id(a): b for a, b in zip(steps, mixed.steps)}
    mixed.steps, mixed.parents = steps, parents
    mixed.fns = [mixed.fns[p] for p in old]
    mixed.n = len(old)
    mixed.inputs = [new[p] for p in mixed.inputs]
    if mixed.ynode is not None:
        mixed.ynode = new[mixed.ynode]
    if outs is not None:
        mixed.outs = [(k, new[r]) if k == _SLOT else (k, r) for k, r in outs]
    mixed.writes = [new[w] for w in mixed.writes]
    mixed.splits = [new[w] for w in mixed.splits]
    mixed.short = len(steps) < _GC_PAUSE_STEPS


def _renumber_tmpl(tmpl, new):
    return tuple((_SLOT, new[t[1]]) if t[0] == _SLOT else
                 (t[0], t[1], _renumber_tmpl(t[2], new)) if t[0] == _SEQ_T else t
                 for t in tmpl)


def _renumber_parents(ps, new):
    if not ps:
        return ps
    return tuple(None if p is None else
                 tuple(None if q is None else new[q] for q in p) if type(p) is tuple else
                 new[p] for p in ps)


def _renumber_step(st, new):
    """Plan step ``st`` with its nodes renumbered by ``new`` (KeyError: a node it does not
    know, or a kind of step this module does not know)."""
    kind = st[0]
    if kind == _OP:
        return st[:3] + (_renumber_tmpl(st[3], new),) + st[4:6] + (new[st[6]],) + st[7:]
    if kind in (_ITEM, _UNARY, _SUM):
        return st[:2] + (new[st[2]], new[st[3]]) + st[4:]
    if kind == _BIN:
        return st[:2] + (new[st[2]], _renumber_tmpl(st[3], new)) + st[4:]
    if kind == _GUARD:
        return st[:2] + (_renumber_tmpl(st[2], new),) + st[3:]
    if kind == _OBSERVE:
        return (kind, new[st[1]]) + st[2:]
    if kind == _WRITE:
        return (kind, new[st[1]], new[st[2]], st[3], st[4],
                new[st[5]] if st[4] else st[5]) + st[6:]
    if kind == _VIEW_WRITE:
        return (kind, new[st[1]], new[st[2]]) + st[3:]
    if kind == _LIKE:
        return (kind, new[st[1]]) + st[2:5] + (new[st[5]],) + st[6:]
    raise KeyError(kind)


def _made(step):
    """The node a step with a spec makes (the buffer's new state, for a write)."""
    return step[1] if step[0] == _WRITE else _step_node(step)


def plan_segments(plan, specs, min_len, max_len=None, keep=(), node_of=None):
    """The runs of at least ``min_len`` consecutive steps with a spec (see :func:`_step_spec`)
    in ``plan``, as (first step, end step, first node, outputs: the nodes made in the run that
    a later step reads, the plan's output, or a node of ``keep``, which the caller reads after
    the run); a run longer than ``max_len`` steps is cut into several. Empty when there is
    none. Only runs after the last step of a kind not known here (a kind added to replay.py
    since, whose reads this module cannot see) are taken. ``node_of(step)``: the node a step
    with a spec makes (:func:`_step_node` by default).

    Example:
        >>> plan_segments(type("P", (), {"steps": [], "ynode": 0})(), [], 16)
        []
    """
    readers, start = {}, 0
    for s, st in enumerate(plan.steps):
        refs = _step_refs(st)
        if refs is None:
            # a kind of step this module does not know (its reads are not known either): it
            # runs as Python replay, and no run before it becomes a segment, since it might
            # read any node made there
            start = s + 1
            continue
        for p in refs:
            readers.setdefault(p, []).append(s)
    runs, s, m = [], start, len(specs)
    while s < m:
        if specs[s] is None:
            s += 1
            continue
        e = s
        while e < m and specs[e] is not None:
            e += 1
        while max_len is not None and e - s > max_len:
            runs.append([s, s + max_len])
            s += max_len
        runs.append([s, e])
        s = e
    node_of = node_of or _step_node
    segments = []
    for s, e in runs:
        while e - s >= min_len:
            made = [node_of(plan.steps[k]) for k in range(s, e)]
            made = [n for n in made if n is not None]
            if not made:
                break
            outputs = [n for n in made if n == plan.ynode or n in keep or
                       any(not s <= r < e for r in readers.get(n, ()))]
            if made[0] in outputs:  # its first node must hold the segment: start after it
                while node_of(plan.steps[s]) != made[0]:
                    s += 1
                s += 1
                continue
            segments.append((s, e, made[0], outputs))
            break
    return segments


def splice_segments(plan, segments, specs, info, make):
    """(steps, parents, segment objects) of ``plan`` with each of ``segments`` (from
    :func:`plan_segments`) replaced by the two kinds of steps :func:`mix_plan` describes;
    ``make(specs, first node, outputs, info, fns)`` builds a segment object (with
    ``external``, ``outputs`` and ``n`` as :class:`_Segment` has them, and a ``forward`` that
    the segment's rule calls)."""
    steps, parents, prev, made = [], list(plan.parents), 0, []
    for s, e, lo, outputs in segments:
        steps += plan.steps[prev:s]
        seg = make(specs[s:e], lo, outputs, info,
                   tuple({st[1] for st in plan.steps[s:e]
                          if st[0] not in (_GUARD, _OBSERVE, _WRITE)}))
        made.append(seg)
        steps.append((_OP, _segment_forward, _segment_forward_rule,
                      ((_CONST, seg),) + tuple((_SLOT, p) for p in seg.external), {},
                      (False,) + (True,) * len(seg.external), lo, (seg.n,), _F64_DT))
        parents[lo] = seg.external
        for node, k in seg.outputs.items():
            shape, dt = info[node] or ((), _F64_DT)  # (a scalar, or a buffer written)
            steps.append((_OP, _segment_output, _segment_output_rule,
                          ((_SLOT, lo), (_CONST, k)), {}, (True, False), node, shape, dt))
            parents[node] = (lo,)
        for node, k in getattr(seg, "buffer_outputs", {}).items():
            shape, dt = info[node]
            steps.append((_OP, _segment_buffer, _segment_buffer_rule,
                          ((_SLOT, lo), (_CONST, k)), {}, (True, False), node, shape, dt))
            parents[node] = (lo,)
        prev = e
    steps += plan.steps[prev:]
    return steps, parents, made
