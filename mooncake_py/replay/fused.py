"""Fused elementwise runs: the array steps of a plan that end in a full ``np.sum``, as one
generated numba kernel.

A replay plan of ``np.sum(np.sin(np.cos(np.exp(x))))`` is four rule calls, each making an
array, then a sweep of four pullbacks, each making another. Here such a *run* (ufuncs of the
derivative table on arrays of one shape and dtype, with scalars and constants broadcast into
them, every intermediate read by the run alone, ending in ``np.sum`` of the whole array) becomes
one plan step: a kernel that loops once over the elements, computing each element's values
and, by a scalar reverse sweep over the run seeded with 1, its derivative with respect to each
value the run reads from outside. The run's intermediates are never made; the sum is NumPy's
pairwise summation, in NumPy's order, so that the value has the bits ``np.sum`` gives.

The step's pullback scales those derivatives by the cotangent the sum receives: the sweep is
linear in its seed, and the seed is 1 (the output) in the common case, where the cotangents are
the very products the rules' pullbacks make, element by element, in the same order (a
cotangent of another value is applied as one product at the end: a difference in the last bit).
A scalar the run reads gets the sum of its elements' derivatives, summed in element order (the
rules sum each op's share with np.sum: again the last bits).

On plans recorded on dual numbers (HVP caches) the kernel carries tangents forward (the frule
programs of dual/codegen.py) and sweeps cotangents with their tangents backward (its pullback
programs, ``ew_pullback``'s frules), from the plain seed 1 as the tape does; a dual seed
``(g, ġ)`` gives ``(g·D, g·E + ġ·D)`` from the kernel's ``(D, E)``.

The per-element statements come from the derivative table through dual/codegen.py's programs,
spelled for numba (every call inline: the loop is the point). Kernels are keyed by their source
and cached on disk as the other generated kernels are (dual/kernels_cpu.py). A run whose op
cannot be spelled (scipy.special functions, ``maximum`` and the like) is not fused.
"""
import ast

import numpy as np

from ..dual import codegen
from ..dual.dual_array import DualArray
from ..dual.kernels_cpu import get_kernel
from ..rules import BUILTIN_RRULES
from ..rules.derivative_table import BY_UFUNC, CONSTANTS
from ..rules.registry import RRULES
from ..tape import fastpath
from .compiled import _step_refs
from .plans import _CONST, _GC_PAUSE_STEPS, _OP, _SLOT, _SUM, Plan, _Failed

# The table's vocabulary as numba spells it on scalars. An op whose value or derivatives call
# anything else is not fused.
_CALLS = {"sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "exp": "np.exp", "exp2": "np.exp2",
          "expm1": "np.expm1", "log": "np.log", "log1p": "np.log1p", "sqrt": "np.sqrt",
          "cbrt": "np.cbrt", "sinh": "np.sinh", "cosh": "np.cosh", "tanh": "np.tanh",
          "abs": "np.abs", "sign": "np.sign", "floor": "np.floor", "trunc": "np.trunc",
          "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan", "asinh": "np.arcsinh",
          "acosh": "np.arccosh", "atanh": "np.arctanh", "atan2": "np.arctan2",
          "hypot": "np.hypot", "pow": "np.power"}
# Ops fused, and how their value is spelled: NumPy's own ufunc where numba has it, so that the
# value is the one the ufunc computes (log2, not log(a)/LN2).
_VALUES = {np.add: "a + b", np.subtract: "a - b", np.multiply: "a * b",
           np.true_divide: "a / b", np.negative: "-a", np.positive: "a"}
for _uf in (np.square, np.sqrt, np.cbrt, np.reciprocal, np.absolute, np.fabs, np.exp, np.exp2,
            np.expm1, np.log, np.log2, np.log10, np.log1p, np.sin, np.cos, np.tan, np.arcsin,
            np.arccos, np.arctan, np.sinh, np.cosh, np.tanh, np.arcsinh, np.arccosh,
            np.arctanh, np.deg2rad, np.rad2deg, np.power, np.arctan2, np.hypot):
    _VALUES[_uf] = f"np.{_uf.__name__}(a)" if _uf.nin == 1 else f"np.{_uf.__name__}(a, b)"
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


class _ToNumba(ast.NodeTransformer):
    def __init__(self, names):
        self.names = names

    def visit_Call(self, node):
        node.args = [self.visit(a) for a in node.args]
        if not isinstance(node.func, ast.Name):  # (np.sin: a ufunc's value, spelled already)
            return node
        fn = node.func.id
        if fn == "select":
            c, p, q = node.args
            return ast.IfExp(c, p, q)
        if fn not in _CALLS:
            raise ValueError(f"{fn}() has no numba spelling here")
        node.func = ast.parse(_CALLS[fn], mode="eval").body
        return node

    def visit_Constant(self, node):
        if type(node.value) is bool:
            return node
        return codegen._call("_F", ast.Constant(float(node.value)))

    def visit_Name(self, node):
        if node.id in CONSTANTS:
            return codegen._call("_F", ast.Constant(CONSTANTS[node.id]))
        new = self.names.get(node.id)
        if new is None:
            raise ValueError(f"unbound name {node.id}")
        return ast.Name(new, ast.Load())


def _spell(expr, names):
    tree = ast.parse(ast.unparse(expr), mode="eval")
    return ast.unparse(ast.fix_missing_locations(_ToNumba(names).visit(tree)).body)


class _Op:
    """One step of a run: ``entry``, its operands as ("v", node) (a value of the run), ("x", k)
    (the k-th value read from outside), ("c", k) (the k-th constant) and the node it makes."""

    def __init__(self, entry, operands, node, special):
        self.entry, self.operands, self.node = entry, operands, node
        self.special = special  # a constant exponent the programs are specialised on


def _source(ops, nx, xarr, consts, carr, dtype, tangents, fname):
    """The kernel's module source. ``xarr[k]``/``carr[k]``: whether outside value / constant k
    is an array (else a scalar); ``tangents[k]``: whether outside value k carries a tangent
    (None for a gradient kernel: no tangents at all)."""
    dual = tangents is not None
    var, tvar = {}, {}  # operand -> numba name of its element value / tangent (or None)
    for k in range(nx):
        var[("x", k)] = f"x{k}"
        tvar[("x", k)] = f"tx{k}" if dual and tangents[k] else None
    for k in range(consts):
        var[("c", k)] = f"c{k}"
        tvar[("c", k)] = None
    params = ["n"]
    params += [f"X{k}" if xarr[k] else f"x{k}" for k in range(nx)]
    if dual:
        params += [(f"TX{k}" if xarr[k] else f"tx{k}") for k in range(nx) if tangents[k]]
    params += [f"C{k}" if carr[k] else f"c{k}" for k in range(consts)]
    params += ["T"] + (["TT"] if dual else [])
    params += [f"D{k}" for k in range(nx) if xarr[k]]
    if dual:
        params += [f"E{k}" for k in range(nx) if xarr[k]]
    head = [f"    x{k} = _F(x{k})" for k in range(nx) if not xarr[k]]
    head += [f"    tx{k} = _F(tx{k})" for k in range(nx) if not xarr[k] and dual and tangents[k]]
    head += [f"    c{k} = _F(c{k})" for k in range(consts) if not carr[k]]
    head += [f"    s{k} = _F(0.0)" for k in range(nx) if not xarr[k]]
    head += [f"    u{k} = _F(0.0)" for k in range(nx) if not xarr[k] and dual]
    body = [f"x{k} = X{k}[i]" for k in range(nx) if xarr[k]]
    body += [f"tx{k} = TX{k}[i]" for k in range(nx) if xarr[k] and dual and tangents[k]]
    body += [f"c{k} = C{k}[i]" for k in range(consts) if carr[k]]
    # forward: values (and tangents) of the run's nodes
    for j, op in enumerate(ops):
        e = op.entry
        ab = dict(zip("ab", op.operands))
        names = {n: var[o] for n, o in ab.items()}
        present = tuple(tvar[o] is not None for o in op.operands)
        if op.special is not None:
            val = _spell(codegen.specialise(f"pow(a, {op.special!r})"), names)
        else:
            val = _spell(ast.parse(_VALUES[e.ufunc], mode="eval").body, names) \
                if e.ufunc in _VALUES else None
        y = f"v{op.node}"
        body.append(f"{y} = {val}")
        var[("v", op.node)] = y
        tvar[("v", op.node)] = None
        if dual and any(present):
            ir = codegen.frule_ir(e, present, op.special)
            local = dict(names, y=y)
            local.update({"t" + n: tvar[o] for n, o in ab.items() if tvar[o] is not None})
            for s in ir.body:
                if s.kind == "out":
                    continue
                name = f"f{j}_{s.name}" if s.kind == "let" else f"t{op.node}"
                body.append(f"{name} = {_spell(s.expr, local)}")
                local[s.name] = name
            tvar[("v", op.node)] = f"t{op.node}"
    last = ops[-1].node
    body.append(f"T[i] = v{last}")
    if dual:
        body.append(f"TT[i] = {tvar[('v', last)] or '_F(0.0)'}")
    # reverse: the run swept from its last node with the plain seed 1, first contributions
    # stored and later ones added, as the tape sweeps
    ct, tct = {("v", last): "_F(1.0)"}, {("v", last): None}
    for j in range(len(ops) - 1, -1, -1):
        op = ops[j]
        e = op.entry
        g, tg = ct[("v", op.node)], tct[("v", op.node)]
        ab = dict(zip("ab", op.operands))
        for k, o in enumerate(op.operands):
            if o[0] == "c":
                continue
            present = (tg is not None,) + tuple(tvar[p] is not None for p in op.operands)
            ir = codegen.pullback_ir(e, k, present if dual else (False,) * (1 + e.nin),
                                     op.special)
            local = {n: var[p] for n, p in ab.items()}
            local.update(y=f"v{op.node}", g=g)
            if dual:
                local.update({"t" + n: tvar[p] for n, p in ab.items() if tvar[p] is not None})
                if tg is not None:
                    local["tg"] = tg
            r = tr = None
            for s in ir.body:
                name = f"b{j}_{k}_{s.name}"
                body.append(f"{name} = {_spell(s.expr, local)}")
                local[s.name] = name
                if s.kind == "out":
                    r = name
                elif s.kind == "tout":
                    tr = name
            if not dual:
                tr = None
            tag = f"{o[0]}{o[1]}"
            if o in ct:
                body.append(f"g{tag} = g{tag} + {r}")
                if tr is not None:
                    body.append(f"h{tag} = h{tag} + {tr}" if tct[o] is not None
                                else f"h{tag} = {tr}")
                    tct[o] = f"h{tag}"
            else:
                body.append(f"g{tag} = {r}")
                ct[o] = f"g{tag}"
                if tr is not None:
                    body.append(f"h{tag} = {tr}")
                tct[o] = f"h{tag}" if tr is not None else None
    for k in range(nx):
        o = ("x", k)
        g = ct.get(o, "_F(0.0)")
        t = tct.get(o) or "_F(0.0)"
        if xarr[k]:
            body.append(f"D{k}[i] = {g}")
            if dual:
                body.append(f"E{k}[i] = {t}")
        else:
            body.append(f"s{k} += {g}")
            if dual:
                body.append(f"u{k} += {t}")
    rets = ["_pairwise(T, 0, n)"] + (["_pairwise(TT, 0, n)"] if dual else [])
    rets += [f"s{k}" for k in range(nx) if not xarr[k]]
    if dual:
        rets += [f"u{k}" for k in range(nx) if not xarr[k]]
    src = ["import numpy as np", "import numba", f"_F = np.{dtype}", "", codegen_jit(),
           "def _leaf(a, lo, n):",
           # NumPy's pairwise summation (its add.reduce of a contiguous array), step for step:
           # its blocks of at most 128 here, its halving (to multiples of 8) in _pairwise
           "    if n < 8:",
           "        res = _F(-0.0)",
           "        for i in range(n):",
           "            res += a[lo + i]",
           "        return res",
           "    r0 = a[lo]; r1 = a[lo + 1]; r2 = a[lo + 2]; r3 = a[lo + 3]",
           "    r4 = a[lo + 4]; r5 = a[lo + 5]; r6 = a[lo + 6]; r7 = a[lo + 7]",
           "    i = 8",
           "    m = n - n % 8",
           "    while i < m:",
           "        r0 += a[lo + i]; r1 += a[lo + i + 1]; r2 += a[lo + i + 2]",
           "        r3 += a[lo + i + 3]; r4 += a[lo + i + 4]; r5 += a[lo + i + 5]",
           "        r6 += a[lo + i + 6]; r7 += a[lo + i + 7]",
           "        i += 8",
           "    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))",
           "    while i < n:",
           "        res += a[lo + i]",
           "        i += 1",
           "    return res",
           "", "", codegen_jit(),
           # NumPy's recursion, as a loop over an explicit stack: numba's on-disk cache does
           # not reload recursive functions safely
           "def _pairwise(a, lo, n):",
           "    if n <= 128:",
           "        return _leaf(a, lo, n)",
           "    los = np.empty(128, np.int64)",
           "    ns = np.empty(128, np.int64)",
           "    st = np.zeros(128, np.int64)",
           "    acc = np.empty(128, a.dtype)",
           "    top = 0",
           "    los[0] = lo",
           "    ns[0] = n",
           "    ret = _F(0.0)",
           "    have = False",
           "    while True:",
           "        if have:",
           "            if top < 0:",
           "                return ret",
           "            if st[top] == 1:",
           "                acc[top] = ret",
           "                st[top] = 2",
           "                have = False",
           "                h = ns[top] // 2",
           "                h -= h % 8",
           "                los[top + 1] = los[top] + h",
           "                ns[top + 1] = ns[top] - h",
           "                st[top + 1] = 0",
           "                top += 1",
           "            else:",
           "                ret = acc[top] + ret",
           "                top -= 1",
           "            continue",
           "        m = ns[top]",
           "        if m <= 128:",
           "            ret = _leaf(a, los[top], m)",
           "            top -= 1",
           "            have = True",
           "        else:",
           "            st[top] = 1",
           "            h = m // 2",
           "            h -= h % 8",
           "            los[top + 1] = los[top]",
           "            ns[top + 1] = h",
           "            st[top + 1] = 0",
           "            top += 1",
           "", "", codegen_jit(), f"def {fname}({', '.join(params)}):"]
    src += head + ["    for i in range(n):"] + ["        " + b for b in body]
    src += [f"    return ({', '.join(rets)},)"]
    return "\n".join(src) + "\n"


def codegen_jit():
    return "@numba.njit(cache=True, nogil=True, error_model='numpy', boundscheck=False)"


class FusedRun:
    """A fused run: its ops, what it reads, and its kernels (one per dual-ness and set of
    tangents present, made on first use)."""

    def __init__(self, ops, external, xarr, consts, shape, dtype, fns):
        self.ops, self.external, self.xarr = ops, external, xarr
        self.const_values = [c for c in consts]
        self.carr = [type(c) is np.ndarray and c.ndim > 0 for c in consts]
        self.const_args = [np.ascontiguousarray(c).reshape(-1) if a else np.dtype(dtype).type(c)
                           for c, a in zip(consts, self.carr)]
        self.shape, self.dtype, self.fns = shape, np.dtype(dtype), fns
        self.size = int(np.prod(shape))
        self.kernels = {}

    def kernel(self, tangents):
        k = self.kernels.get(tangents)
        if k is None:
            src = _source(self.ops, len(self.external), self.xarr, len(self.const_values),
                          self.carr, self.dtype.name, tangents, "fused")
            k = self.kernels[tangents] = get_kernel(src, "fused")
        return k

    def warm(self, tangents):
        """Compile (or load from disk) the kernel for ``tangents`` now, on empty arrays, so
        that a kernel numba cannot build fails the planning, never a replay."""
        dt = self.dtype
        z, s = np.empty(0, dt), dt.type(0)
        xs = [z if a else s for a in self.xarr]
        ts = [] if tangents is None else \
            [z if a else s for a, t in zip(self.xarr, tangents) if t]
        nbuf = (1 + sum(self.xarr)) * (1 if tangents is None else 2)
        self.kernel(tangents)(0, *xs, *ts, *self.const_args, *([z] * nbuf))

    def _array(self, v):
        if type(v) is not np.ndarray or v.shape != self.shape or v.dtype != self.dtype:
            raise _Failed()
        return v.reshape(-1)

    def _scalar(self, v):
        t = type(v)
        if t is float or (t in (np.float64, np.float32) and np.dtype(t) == self.dtype):
            return self.dtype.type(v)
        if t is np.ndarray and v.shape == () and v.dtype == self.dtype:
            return v[()]
        raise _Failed()

    def run(self, values):
        """The rule: ``(sum, pullback)`` for the values read from outside."""
        for fn, rule in self.fns:
            if RRULES.get(fn) is not rule:  # a rule registered since the recording
                raise _Failed()
        n, dt = self.size, self.dtype
        dual = False
        for v in values:  # (a loop: a generator costs more than the check, values are few)
            if type(v) is DualArray:
                dual = True
                break
        if not dual:
            xs = [self._array(v) if a else self._scalar(v) for v, a in zip(values, self.xarr)]
            T = np.empty(n, dt)
            # the gradients in the input's shape, the kernel writing through flat views: the
            # pullback hands them out as they are, arrays that as_gradient need not copy
            shape = self.shape
            D = [np.empty(shape, dt) for a in self.xarr if a]
            flat = D if len(shape) == 1 else [d.reshape(-1) for d in D]
            out = self.kernel(None)(n, *xs, *self.const_args, T, *flat)
            return dt.type(out[0]), _pullback(self, D, out[1:], None, None, None)
        tag = None
        xs, ts, has = [], [], []
        for v, a in zip(values, self.xarr):
            if type(v) is DualArray:
                if tag is None:
                    tag = v._tag
                elif v._tag is not tag:
                    raise _Failed()
                if tag.lanes or tag._watch:
                    raise _Failed()
                xs.append(self._array(v._value) if a else self._scalar(v._value))
                ts.append(self._array(v._tangent) if a else self._scalar(v._tangent))
                has.append(True)
            else:
                xs.append(self._array(v) if a else self._scalar(v))
                has.append(False)
        T, TT = np.empty(n, dt), np.empty(n, dt)
        narr = sum(self.xarr)
        D = [np.empty(n, dt) for _ in range(narr)]
        E = [np.empty(n, dt) for _ in range(narr)]
        out = self.kernel(tuple(has))(n, *xs, *ts, *self.const_args, T, TT, *D, *E)
        ns = len(self.xarr) - narr
        y = DualArray(dt.type(out[0]), dt.type(out[1]), tag)
        return y, _pullback(self, D, out[2:2 + ns], E, out[2 + ns:], tag)


def _pullback(run, D, sD, E, sE, tag):
    shape, dt = run.shape, run.dtype.type

    def pullback(g):
        tg = None
        if type(g) is DualArray:
            g, tg = g._value, g._tangent
        g = dt(g) if type(g) is not np.ndarray else g.astype(run.dtype, copy=False)[()]
        one = g == 1 and tg is None
        out, ia, isc = [], 0, 0
        for a in run.xarr:
            if a:
                d = D[ia]
                if d.shape != shape:
                    d = d.reshape(shape)
                e = None if E is None else E[ia].reshape(shape)
                ia += 1
            else:
                d = dt(sD[isc])
                e = None if E is None else dt(sE[isc])
                isc += 1
            if not one:
                d2 = d * g
                if e is not None:
                    e = e * g if tg is None else e * g + d * tg
                d = d2
            out.append(d if e is None else DualArray(d, e, tag))
        return tuple(out)
    return pullback


def _fused_sum(run, *values):
    """A plan's stand-in for a fused run (never called: its rule is)."""
    raise TypeError("_fused_sum is a replay-plan marker")


def _fused_sum_rule(args, kwargs, needs):
    return args[0].run(args[1:])


RRULES[_fused_sum] = _fused_sum_rule


class FusedPlan(Plan):
    """A replay plan whose elementwise runs ending in a full ``np.sum`` are fused kernels
    (:func:`fuse_plan`); it runs as a :class:`~mooncake_py.replay.plans.Plan`. ``plan``: the
    recorded plan; ``fused``: the ids of its steps a kernel runs."""

    def run(self, leaves):
        out = Plan.run(self, leaves)
        self.runs += 1
        return out

    def single(self):
        """The :class:`FusedRun` when the plan is nothing but one float64 run over its one
        input array, its sum the output (``np.sum(np.sin(x))``): :meth:`run_one` serves such
        a plan without the plan's steps. None otherwise."""
        one = self.__dict__.get("_single", False)
        if one is False:
            one = self._single = _single_run(self)
        return one

    def run_one(self, x, v=None):
        """``(value, gradient)`` of a :meth:`single` plan at the float64 array ``x``, or with
        a direction ``v`` ``(value, gradient, H·v)``: the run's kernel called as
        :meth:`run` calls it, its outputs as the sweep and the read-back of the duals would
        hand them out (the sweep's seed is one, so the pullback scales nothing). Raises where
        :meth:`run` would fail: a rule registered since the recording, another shape."""
        run = self.single()
        if run is None or RRULES.get(_fused_sum) is not _fused_sum_rule:
            raise _Failed()
        for fn, rule in run.fns:
            if RRULES.get(fn) is not rule:
                raise _Failed()
        n, dt, shape = run.size, run.dtype, run.shape
        x = run._array(x)
        D = np.empty(shape, dt)
        flat = D if len(shape) == 1 else D.reshape(-1)
        if v is None:
            out = run.kernel(None)(n, x, *run.const_args, np.empty(n, dt), flat)
            self.runs += 1
            return dt.type(out[0]), D
        E = np.empty(shape, dt)
        out = run.kernel(_ONE_DUAL)(n, x, run._array(v), *run.const_args, np.empty(n, dt),
                                    np.empty(n, dt), flat,
                                    E if len(shape) == 1 else E.reshape(-1))
        self.runs += 1
        return dt.type(out[0]), D, E


_ONE_DUAL = (True,)


def _single_run(plan):
    """(FusedPlan.single) the plan's one run when it is all the plan does, else None."""
    if len(plan.steps) != 1 or plan.inputs != [0] or plan.ndiff != 1 or \
            getattr(plan, "writes", None):
        return None
    st = plan.steps[0]
    if st[0] != _OP or st[1] is not _fused_sum or st[2] is not _fused_sum_rule or st[4] or \
            len(st[3]) != 2 or st[3][1] != (_SLOT, 0) or plan.ynode != st[6] or \
            plan.parents[st[6]] != (0,):
        return None
    run = st[3][0][1]
    if type(run) is not FusedRun or run.xarr != [True] or run.dtype != np.float64 or \
            run.external != [0]:
        return None
    return run


def _number(v, dt):
    """A constant scalar operand as the kernel takes it, or None when NumPy would not keep
    ``dt`` with it (or it is not a number)."""
    t = type(v)
    if t is bool:
        return None
    if t is float or t is int:
        return float(v) if dt == _FLOATS[0] or t is float or abs(v) < 2 ** 24 else None
    if t is np.float64 and dt == _FLOATS[0]:
        return float(v)
    if t is np.float32 and dt == _FLOATS[1]:
        return v
    return None


def _op_of(step, shape, dt, info):
    """(entry, template) of an elementwise _OP step of ``shape`` and ``dt`` that a kernel can
    run, else None."""
    if step[0] != _OP:
        return None
    _, fn, rule, tmpl, kw, _, _, sh, sdt = step
    entry = BY_UFUNC.get(fn)
    if entry is None or fn not in _VALUES or kw or sh != shape or sdt != dt or \
            fn not in BUILTIN_RRULES or RRULES.get(fn) is not rule or len(tmpl) != entry.nin:
        return None
    for kind, ref in tmpl:
        if kind == _SLOT:
            i = info[ref] if type(ref) is int else None
            if i is None or i[1] != dt or (i[0] != shape and i[0] != ()):
                return None
        elif kind == _CONST:
            if type(ref) is np.ndarray:
                if ref.dtype != dt or (ref.shape != shape and ref.shape != ()):
                    return None
            elif _number(ref, dt) is None:
                return None
        else:
            return None
    return entry, tmpl


def _sum_of(step, info):
    """(operand node, shape, dtype) of a full ``np.sum`` step, else None."""
    if step[0] == _SUM:
        _, fn, _, p, shape = step
        if RRULES.get(fn) is not fastpath._BUILTIN.get(fn):
            return None
    elif step[0] == _OP:
        _, fn, rule, tmpl, kw, _, _, sh, _ = step
        if fn is not np.sum or kw or sh != () or len(tmpl) != 1 or tmpl[0][0] != _SLOT or \
                RRULES.get(fn) is not rule or fn not in BUILTIN_RRULES:
            return None
        p = tmpl[0][1]
    else:
        return None
    if type(p) is not int or info[p] is None:
        return None
    shape, dt = info[p]
    if not shape or dt not in _FLOATS:
        return None
    return p, shape, dt


def fuse_plan(plan, info, dual=False):
    """``plan`` with each elementwise run ending in a full ``np.sum`` as one fused step (a
    :class:`FusedPlan`), or None when it has no such run. ``info``: (shape, dtype) of each
    node, as :func:`~.compiled._node_info` gives it; ``dual``: a plan recorded on duals (its
    kernels carry the tangents of the values the plan differentiates). The kernels are built
    here; an error building one (numba missing, a call it does not know) propagates."""
    if plan is None or getattr(plan, "writes", None) or plan.ynode is None:
        return None
    steps = plan.steps
    readers, producer = {}, {}
    for s, st in enumerate(steps):
        refs = _step_refs(st)
        if refs is None:
            return None
        for p in refs:
            readers.setdefault(p, set()).add(s)
        if st[0] == _OP:
            producer[st[6]] = s
    keep = {plan.ynode} | {r for k, r in getattr(plan, "outs", ()) if k == _SLOT}
    runs = []
    taken = set()
    for s, st in enumerate(steps):
        found = _sum_of(st, info)
        if found is None:
            continue
        p, shape, dt = found
        run, todo = set(), [p]
        while todo:  # the ops the sum depends on through elementwise steps of its shape
            q = todo.pop()
            k = producer.get(q)
            if k is None or k in run or k in taken or q in keep or \
                    _op_of(steps[k], shape, dt, info) is None:
                continue
            run.add(k)
            todo += [ref for kind, ref in steps[k][3] if kind == _SLOT]
        inside = run | {s}
        changed = True
        while changed:  # a value read outside the run stays a rule call's (and so its inputs)
            changed = False
            for k in sorted(run):
                if any(r not in inside for r in readers.get(steps[k][6], ())):
                    run.discard(k)
                    inside.discard(k)
                    changed = True
        if not run or steps[max(run)][6] != p:
            continue
        taken |= run | {s}
        runs.append((sorted(run), s, p, shape, dt))
    if not runs:
        return None
    out = _splice(plan, runs, info)
    if out is None:
        return None
    for st in out.steps:
        if st[1] is _fused_sum:
            st[3][0][1].warm(st[5][1:] if dual else None)
    return out


def _active(plan):
    active = [False] * plan.n
    for node in plan.inputs[:plan.ndiff]:
        active[node] = True
    for node in range(plan.n):
        ps = plan.parents[node]
        if ps and not active[node]:
            active[node] = any(active[q] if type(q) is int else type(q) is tuple and
                               any(r is not None and active[r] for r in q) for q in ps)
    return active


def _splice(plan, runs, info):
    active = _active(plan)
    parents = list(plan.parents)
    replace, drop, fused = {}, set(), set()
    for ks, s, p, shape, dt in runs:
        external, xarr, consts, ops, fns = [], [], [], [], {}
        for k in ks:
            st = plan.steps[k]
            entry, tmpl = _op_of(st, shape, dt, info)
            fns[st[1]] = st[2]
            operands = []
            for kind, ref in tmpl:
                if kind == _SLOT and ref in {op.node for op in ops}:
                    operands.append(("v", ref))
                elif kind == _SLOT:
                    if ref not in external:
                        external.append(ref)
                        xarr.append(info[ref][0] != ())
                    operands.append(("x", external.index(ref)))
                else:
                    v = ref if type(ref) is np.ndarray and ref.ndim else \
                        _number(ref[()] if type(ref) is np.ndarray else ref, dt)
                    if v is None:
                        return None
                    consts.append(v)
                    operands.append(("c", len(consts) - 1))
            special = None
            if entry.ufunc is np.power and operands[1][0] == "c" and \
                    not isinstance(consts[operands[1][1]], np.ndarray) and \
                    float(consts[operands[1][1]]) in codegen.SPECIAL_EXPONENTS:
                special = float(consts[operands[1][1]])
            ops.append(_Op(entry, operands, st[6], special))
        sum_step = plan.steps[s]
        fns[np.sum] = RRULES.get(np.sum)
        run = FusedRun(ops, external, xarr, consts, shape, dt, tuple(fns.items()))
        node = sum_step[2] if sum_step[0] == _SUM else sum_step[6]
        needs = tuple(bool(active[q]) for q in external)
        replace[s] = (_OP, _fused_sum, _fused_sum_rule,
                      ((_CONST, run),) + tuple((_SLOT, q) for q in external), {},
                      (False,) + needs, node, (), dt)
        parents[node] = tuple(q if a else None for q, a in zip(external, needs))
        drop |= set(ks)
        fused |= {id(plan.steps[k]) for k in ks} | {id(sum_step)}
    out = FusedPlan.__new__(FusedPlan)
    out.__dict__.update(plan.__dict__)
    out.__dict__.pop("_dual_steps", None)
    out.__dict__.pop("run", None)  # (a lean run of the plan itself: replay/lean.py)
    out.steps = [replace.get(k, st) for k, st in enumerate(plan.steps) if k not in drop]
    out.parents = parents
    out.short = len(out.steps) < _GC_PAUSE_STEPS
    out.plan, out.fused, out.runs = plan, fused, 0
    return out
