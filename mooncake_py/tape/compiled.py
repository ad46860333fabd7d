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

What is compiled: plans whose every step is an int read ``x[i]`` of a float64 array argument,
``+ - * /`` of float64 scalars (with float or small int constants), a unary op of
fastpath.py's list, a comparison of scalars whose result ``f`` branched on, or ``bool`` of a
scalar. Anything else (array ops, BLAS/LAPACK, reductions, float scalar arguments) leaves the
plan to the Python replay: mixed plans are not split into compiled segments.

Soundness: the encoded plan is the replay plan, step for step; the kernel evaluates its guards
(the comparisons, with the values recorded) in the same order and reports a failed one, which
is handled as a failed replay guard (the function is recorded again). The rule check of the
Python replay (a rule registered since the recording turns the plan off) and its argument
checks (float64 arrays of the recorded shapes) are made before each run. The derivatives are
the short paths' formulas (the table's, in the same floating-point operations); the results
equal a fresh recording except where numba's libm differs from NumPy's in the last bit of a
transcendental (sin, exp...), and except that a cotangent of -0.0 may come out as 0.0.
"""
import hashlib
import operator
import os
import sys
import tempfile
import threading
import time

import numpy as np

from ..rules.derivative_table import CONSTANTS, TABLE
from ..rules.registry import RRULES
from . import fastpath
from .replay import (_BIN, _CONST, _GUARD, _ITEM, _OBSERVE, _SLOT, _UNARY, Plan, Replayer,
                     _Failed, _split_leaves)

# Plans longer than this are not compiled: the kernel's work arrays (three floats per node)
# would cost more memory than the Python replay saves.
MAX_STEPS = 5_000_000

_F64 = np.float64
_ARITH = {operator.add: 1, operator.sub: 2, operator.mul: 3, operator.truediv: 4}
_CMP = {np.greater: (">", 5), np.greater_equal: (">=", 6), np.less: ("<", 7),
        np.less_equal: ("<=", 8), np.equal: ("==", 9), np.not_equal: ("!=", 10)}
_TRUTH, _NEG, _UNARY0 = 11, 12, 16
_EXACT_INT = 2 ** 53  # ints a float64 holds exactly: NumPy converts them without rounding
# Numba spellings of the table's vocabulary calls that can appear in the unary entries below.
_NB_CALLS = {"sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "arctan",
             "log1p", "expm1", "abs"}


def _unary_ops():
    """(ufunc, forward source, derivative source) for the short path's unary ops, in a fixed
    order; derivatives are the table's ``d1`` strings in terms of ``a`` (input) and ``y``."""
    import ast
    out = []
    for name in fastpath._UNARY_NAMES:
        e = TABLE.get(name)
        if e is None or e.ufunc not in fastpath._UNARY or e.d1[0] == "-1":
            continue
        tree = ast.parse(e.d1[0], mode="eval")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.func.id not in _NB_CALLS:
                break
            if isinstance(node, ast.Name) and node.id not in ("a", "y") and \
                    node.id not in CONSTANTS and node.id not in _NB_CALLS:
                break
        else:
            d = ast.unparse(_Numba().visit(tree))
            fwd = "ua * ua" if name == "square" else f"np.{name}(ua)"
            out.append((e.ufunc, fwd, d))
    return out


class _Numba:
    """Table vocabulary -> numba source: calls to ``np.<name>``, named constants to literals."""

    def visit(self, tree):
        import ast

        class T(ast.NodeTransformer):
            def visit_Call(self, node):
                self.generic_visit(node)
                node.func = ast.Attribute(ast.Name("np", ast.Load()), node.func.id, ast.Load())
                return node

            def visit_Name(self, node):
                if node.id in CONSTANTS:
                    return ast.Constant(CONSTANTS[node.id])
                if node.id in ("a", "y"):  # the kernel's names for the op's input and output
                    return ast.Name("u" + node.id, ast.Load())
                return node
        return ast.fix_missing_locations(T().visit(tree)).body


def _acc(p, x, ind):
    """Source adding cotangent ``x`` into node ``p`` as the tape's sweep does: the first
    contribution is stored, later ones added (so -0.0 and never-reached nodes come out as
    they do there)."""
    return [f"{ind}if R[{p}]:", f"{ind}    ADJ[{p}] += {x}", f"{ind}else:",
            f"{ind}    ADJ[{p}] = {x}", f"{ind}    R[{p}] = True"]


def kernel_source():
    """The interpreter kernel's module source (see the module docstring).

    Example:
        >>> "def mp_replay(" in kernel_source()
        True
    """
    unary = _unary_ops()
    i1, i2, i3 = " " * 12, " " * 16, " " * 20
    src = ["import numpy as np", "import numba", "",
           "@numba.njit(cache=True, nogil=True, error_model='numpy', boundscheck=False)",
           "def mp_replay(OP, A, B, C, D, X, n, ynode, nx):",
           "    V = np.empty(n)",
           "    m = OP.shape[0]",
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
                f"{i3}return False, 0.0, np.zeros(nx)"]
    src += [f"        elif op == {_TRUTH}:", f"{i1}if (V[a] != 0.0) != (D[s] == 1):",
            f"{i2}return False, 0.0, np.zeros(nx)",
            f"        elif op == {_NEG}:", f"{i1}V[D[s]] = -V[a]"]
    for k, (_, fwd, _) in enumerate(unary):
        src += [f"        elif op == {_UNARY0 + k}:", f"{i1}ua = V[a]", f"{i1}V[D[s]] = {fwd}"]
    src += ["    G = np.zeros(nx)",
            "    ADJ = np.empty(n)",
            "    R = np.zeros(n, dtype=np.bool_)",
            "    ADJ[ynode] = 1.0",
            "    R[ynode] = True",
            "    for s in range(m - 1, -1, -1):",
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
    for k, (_, _, der) in enumerate(unary):
        src += [f"        elif op == {_UNARY0 + k}:", f"{i1}uy = V[d]",
                f"{i1}ua = V[a]"] + _acc("a", f"g * ({der})", i1)
    src += ["    return True, V[ynode], G", ""]
    return "\n".join(src)


_LOCK = threading.Lock()
_KERNEL = []   # [dispatcher, unary ufunc -> opcode], once loaded and checked
TIMES = {}     # "load_s": seconds the first kernel request took in this process


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


def _import(source, stem, d):
    import importlib.util
    import types
    name = f"_mooncake_py_{stem}"
    if d is None:
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        exec(compile(source.replace("cache=True", "cache=False"), f"<{name}>", "exec"),
             mod.__dict__)
        return mod.mp_replay
    path = os.path.join(d, stem + ".py")
    _write_checked(path, source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache re-imports the module by name
    spec.loader.exec_module(mod)
    return mod.mp_replay


def _self_test(k):
    """Run the kernel on a tiny plan with a known answer: a cache entry that loads but is
    wrong (or does not load) is caught here, before any user plan uses it."""
    # y = x[0] * x[1] - 2 at x = (3, 5): y = 13, gradient (5, 3)
    op = np.array([0, 0, 3, 2], np.int64)
    a = np.array([0, 1, 1, 3], np.int64)
    b = np.array([-1, -1, 2, -1], np.int64)
    c = np.array([0.0, 0.0, 0.0, 2.0])
    dst = np.array([1, 2, 3, 4], np.int64)
    ok, y, g = k(op, a, b, c, dst, np.array([3.0, 5.0]), 5, 4, 2)
    return bool(ok) and y == 13.0 and g[0] == 5.0 and g[1] == 3.0


def kernel():
    """(the numba interpreter, the opcode of each unary ufunc), compiled or loaded on first use.

    Example:
        >>> k, codes = kernel()
        >>> import numpy as np
        >>> np.sin in codes
        True
    """
    if _KERNEL:
        return _KERNEL[0], _KERNEL[1]
    with _LOCK:
        if not _KERNEL:
            from ..dual.kernels_cpu import kernel_dir
            t0 = time.perf_counter()
            source = kernel_source()
            stem = "replay_" + hashlib.sha1(source.encode()).hexdigest()[:20]
            d = kernel_dir()
            k = None
            for attempt in (d, "purge", None):
                try:
                    if attempt == "purge":
                        if d is None:
                            continue
                        _purge_numba_cache(d, stem)
                        attempt = d
                    k = _import(source, stem, attempt)
                    if _self_test(k):
                        break
                except Exception:  # noqa: BLE001  (a damaged cache entry: rebuild it)
                    pass
                k = None
            if k is None:
                raise RuntimeError("the compiled-replay kernel failed its self-test")
            codes = {uf: _UNARY0 + i for i, (uf, _, _) in enumerate(_unary_ops())}
            codes[np.negative] = _NEG
            TIMES["load_s"] = time.perf_counter() - t0
            _KERNEL[:] = [k, codes]
    return _KERNEL[0], _KERNEL[1]


def _number(v):
    """A constant operand as the float64 NumPy would convert it to, or None if unsupported."""
    t = type(v)
    if t is _F64 or t is float:
        return float(v)
    if t is int and abs(v) <= _EXACT_INT:
        return float(v)
    return None


class CompiledPlan:
    """A replay :class:`~mooncake_py.tape.replay.Plan` run by the compiled kernel; made by
    :func:`compile_plan`, used by the Replayer exactly as the plan it wraps."""

    def __init__(self, plan, arrays, shapes, fns):
        self.plan = plan
        self.constants = plan.constants
        self.finish = plan.finish
        self._arrays = arrays
        self._shapes = shapes
        self._sizes = [int(np.prod(s)) for s in shapes]
        self._fns = fns
        self.runs = 0

    def run(self, leaves):
        if len(leaves) != len(self._shapes):
            raise _Failed()
        for leaf, shape in zip(leaves, self._shapes):
            if type(leaf) is not np.ndarray or leaf.dtype != _F64 or leaf.shape != shape:
                raise _Failed()
        for fn in self._fns:  # a rule registered since the recording: record instead
            if RRULES.get(fn) is not fastpath._BUILTIN.get(fn):
                raise _Failed()
        k, _ = kernel()
        op, a, b, c, dst, n, ynode = self._arrays
        x = leaves[0].ravel() if len(leaves) == 1 else \
            np.concatenate([leaf.ravel() for leaf in leaves])
        ok, y, g = k(op, a, b, c, dst, x, n, ynode, x.shape[0])
        if not ok:
            raise _Failed()
        self.runs += 1
        if len(leaves) == 1:
            return _F64(y), [g.reshape(self._shapes[0])]
        cts, o = [], 0
        for shape, size in zip(self._shapes, self._sizes):
            cts.append(g[o:o + size].reshape(shape))
            o += size
        return _F64(y), cts


def compile_plan(plan, leaves):
    """``plan`` as a :class:`CompiledPlan`, or None when it holds a step the kernel does not
    run (see the module docstring) or its arguments are not all float64 arrays.

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
    ninp = len(plan.inputs)
    shapes, offsets, o = [], [], 0
    for leaf in leaves:
        if type(leaf) is not np.ndarray or leaf.dtype != _F64:
            return None
        shapes.append(leaf.shape)
        offsets.append(o)
        o += leaf.size
    if len(shapes) != ninp or plan.ynode < ninp:
        return None
    _, codes = kernel()
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

    for s, step in enumerate(plan.steps):
        kind = step[0]
        if kind == _ITEM:
            _, fn, node, p, key, _ = step
            if not (type(p) is int and 0 <= p < ninp) or len(shapes[p]) != 1:
                return None
            key = int(key)
            size = shapes[p][0]
            if not -size <= key < size:
                return None
            op[s], a[s], dst[s] = 0, offsets[p] + key % size, node
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
    arrays = (op, a, b, c, dst, plan.n, plan.ynode)
    return CompiledPlan(plan, arrays, tuple(shapes), tuple(fns))


class CompilingReplayer(Replayer):
    """A :class:`~mooncake_py.tape.replay.Replayer` whose plans run on the compiled kernel
    when :func:`compile_plan` accepts them (and as Python replay otherwise). The guards, the
    fallback to recording after a failed guard and the give-up after repeated failures are the
    Replayer's; a new plan (after a branch flip) is encoded again, never recompiled.

    Example:
        >>> import numpy as np
        >>> r = CompilingReplayer()
        >>> f = lambda x: x[0] * x[1]
        >>> _ = r.call(f, (np.array([1.0, 2.0]),), (0,))      # records, plans, encodes
        >>> y, (g,) = r.call(f, (np.array([3.0, 5.0]),), (0,))
        >>> float(y), g.tolist(), r.plan.runs
        (15.0, [5.0, 3.0], 1)
    """

    def call(self, f, args, nums):
        y, grads = Replayer.call(self, f, args, nums)
        plan = self.plan
        if type(plan) is Plan and not getattr(plan, "_not_compiled", False):
            try:
                cp = compile_plan(plan, _split_leaves(args, nums)[0] or ())
            except Exception:  # noqa: BLE001  (no numba, an unwritable cache...: Python replay)
                cp = None
            if cp is None:
                plan._not_compiled = True
            else:
                self.plan = cp
        return y, grads
