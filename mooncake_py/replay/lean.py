"""Lean replay of short plans: a plan's forward pass and reverse sweep as one generated
straight-line Python function.

A short plan (``np.sum(x)``, a fused kernel step, a handful of array ops) replays in
microseconds of which the rule calls are a small part: :meth:`Plan.forward` dispatches on
each step's kind and fills its argument template, :meth:`Plan.sweep` builds a
:class:`~mooncake_py.tape.Tape` and a TrackedArray per input for :meth:`Tape.gradient`, whose
sweep walks every node. The generated function does the same calls in the same order with
the plan's structure written out: each step's arguments as a list literal of locals and bound
constants, its checks inline, the sweep unrolled over the nodes that can receive a cotangent
(the output's ancestors), each node's cotangent a local, a second contribution added by the
tape's own :func:`~mooncake_py.tape.tape._accumulate`. So its results are
:meth:`Plan.run`'s bit for bit, and it raises where :meth:`Plan.run` raises (a failed guard is
``_Failed``, the replayer then records).

What it takes (:func:`leanable`): plans of at most ``plans._GC_PAUSE_STEPS`` steps of the
kinds rule call, element read, scalar binary and unary op, full sum, guard and observation
(of their dual forms on a plan recorded on duals, only the rule call), with one output and no
writes. Leaves of another kind than the plan's (plain values for a plan on duals, or the
reverse) run :meth:`Plan.run` itself.

The replay's values are plain or dual numbers, never tracked ones, so nothing in the sweep
reads the tape's sweep level; no Tape is made at all.
"""
import operator

import numpy as np

from ..core.arguments import is_float_leaf
from ..core.array_ops import astype, innermost
from ..dual.dual_array import DualArray, Tag
from ..dual.lean import sum_all
from ..dual.seeding import result
from ..mixed import dual_scalars
from ..mixed.tracking import as_gradient
from ..rules.broadcasting import shape_of
from ..rules.reductions import broadcast_cotangent, dtype_of
from ..rules.registry import RRULES
from ..tape import fastpath
from ..tape.pullbacks import ItemRead
from ..tape.tape import _ONE, _SPARSE, _accumulate
from .plans import (
    _BIN,
    _CONST,
    _DBIN,
    _DITEM,
    _DUNARY,
    _GC_PAUSE_STEPS,
    _GUARD,
    _ITEM,
    _OBSERVE,
    _OP,
    _SEQ_T,
    _SLOT,
    _SUM,
    _UNARY,
    Plan,
    _dual_binary,
    _Failed,
    _same,
)

_KINDS = frozenset([_OP, _SUM, _ITEM, _BIN, _UNARY, _GUARD, _OBSERVE, _DITEM, _DBIN, _DUNARY])


def leanable(plan, dual):
    """Whether ``plan`` (a :class:`Plan` or one of its subclasses run by :meth:`Plan.run`)
    can run as a lean function (module docstring)."""
    if plan is None or plan.ynode is None or getattr(plan, "writes", None) or \
            len(plan.steps) >= _GC_PAUSE_STEPS or plan.inputs != list(range(len(plan.inputs))):
        return False
    steps = plan.dual_steps() if dual else plan.steps
    return all(st[0] in _KINDS for st in steps)


def attach(plan, dual):
    """Make ``plan.run`` a lean function when :func:`leanable` (generated on the plan's first
    run, so that a plan recorded again before it replays costs nothing); returns ``plan``."""
    if type(plan.__dict__.get("run")) is _Lazy or not leanable(plan, dual):
        return plan
    plan.run = _Lazy(plan, dual)
    return plan


class _Lazy:
    """A plan's ``run`` until its first call, which generates the lean function (or, when the
    generator cannot write it, restores :meth:`Plan.run`)."""
    __slots__ = ("dual", "plan")

    def __init__(self, plan, dual):
        self.plan, self.dual = plan, dual

    def __call__(self, leaves):
        plan = self.plan
        try:
            fn = _generate(plan, self.dual)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            fn = None
        if fn is None:
            del plan.run  # (the class's run from now on)
        else:
            plan.run = fn
        return plan.run(leaves)


class _Emitter:
    """Names for the constants the generated code reads (bound in its namespace)."""

    def __init__(self):
        self.consts = {}

    def const(self, value):
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def operand(self, t):
        """Source for one argument template (see plans._template)."""
        k = t[0]
        if k == _SLOT:
            return f"v{t[1]}"
        if k == _CONST:
            return self.const(t[1])
        if k == _SEQ_T:
            return f"{self.const(t[1])}([{', '.join(self.operand(b) for b in t[2])}])"
        raise ValueError(f"unknown template kind {k}")

    def args(self, tmpl):
        return "[" + ", ".join(self.operand(t) for t in tmpl) + "]"


def _forward(em, st, lines, dual=False):
    """Statements running step ``st`` as Plan.forward does."""
    kind = st[0]
    if kind == _OP and dual and st[1] is np.sum and not st[4] and st[5] == (True,) and \
            len(st[3]) == 1 and st[3][0][0] == _SLOT and \
            st[2] is fastpath._BUILTIN.get(np.sum):
        # np.sum(x) of a dual: the sum rule's own steps (the dual layer's sum, then its
        # pullback) without the rule's and NumPy's wrappers around them
        _, fn, rule, tmpl, kw, needs, node, shape, dt = st
        lines += [f"if _rget({em.const(fn)}) is not {em.const(rule)}: raise _Failed()",
                  f"m = _dual_sum(v{tmpl[0][1]})"]
        _made(em, st, node, lines, dual=False, check=(shape, dt))
    elif kind == _OP:
        _, fn, rule, tmpl, kw, needs, node, shape, dt = st
        f, r = em.const(fn), em.const(rule)
        lines += [f"if _rget({f}) is not {r}: raise _Failed()",
                  f"o, b = {r}({em.args(tmpl)}, {em.const(kw)}, {em.const(needs)})",
                  "t = type(o)",
                  "if t is float: o, t = _F64(o), _F64",
                  "if t is _nd or t is _F64:",
                  (f"    if b is None or o.dtype != {em.const(dt)} or o.shape != "
                  f"{em.const(shape)}: raise _Failed()"),
                  (f"elif b is None or getattr(o, 'dtype', None) != {em.const(dt)} or "
                  f"tuple(_shape_of(o)) != {em.const(shape)}: raise _Failed()"),
                  f"v{node} = o", f"p{node} = b"]
    elif kind == _DITEM:
        _, node, p, key, op = st
        lines.append(f"m = _ditem(v{p}, {em.const(key)}, {em.const(op[2])})")
        _made(em, op, node, lines, dual)
    elif kind == _DBIN:
        _, node, fn, op, ka, ra, kb, rb, gen = st
        a = f"v{ra}" if ka == _SLOT else em.const(ra)
        b = f"v{rb}" if kb == _SLOT else em.const(rb)
        o = em.const(op)
        lines.append(f"m = _dual_binary({o}, {em.const(fn)}, {a}, {b}) "
                     f"if _rget({em.const(fn)}) is {o}.builtin else None")
        _made(em, gen, node, lines, dual)
    elif kind == _DUNARY:
        _, node, fn, p, gen = st
        lines.append(f"m = _unary_node({em.const(fn)}, v{p})")
        _made(em, gen, node, lines, dual)
    elif kind == _ITEM:
        _, fn, node, p, key, pb = st
        f = em.const(fn)
        lines += [(f"if type(v{p}) is not _nd or _rget({f}) is not _builtin[{f}]: "
                  "raise _Failed()"),
                  f"o = v{p}[{em.const(key)}]",
                  "if type(o) is not _F64: raise _Failed()",
                  f"v{node} = o", f"p{node} = {em.const(pb)}"]
    elif kind == _BIN:
        _, fn, node, ((ka, ra), (kb, rb)), op, factory, which = st
        f = em.const(fn)
        a = f"v{ra}" if ka == _SLOT else em.const(ra)
        b = f"v{rb}" if kb == _SLOT else em.const(rb)
        checks = [f"type({a}) is not _F64"] if ka == _SLOT else []
        checks += [f"type({b}) is not _F64"] if kb == _SLOT else []
        checks.append(f"_rget({f}) is not _builtin[{f}]")
        lines += [f"if {' or '.join(checks)}: raise _Failed()",
                  f"o = {em.const(op)}({a}, {b})",
                  "if type(o) is not _F64: raise _Failed()",
                  f"v{node} = o", f"p{node} = {em.const(factory)}({a}, {b}, o, {which!r})"]
    elif kind == _UNARY:
        _, fn, node, p, d1, factory = st
        f = em.const(fn)
        lines += [(f"if type(v{p}) is not _F64 or _rget({f}) is not _builtin[{f}]: "
                  "raise _Failed()"),
                  f"o = -v{p}" if factory is fastpath._neg_pullback else f"o = {f}(v{p})",
                  "if type(o) is not _F64: raise _Failed()",
                  f"v{node} = o", f"p{node} = {em.const(factory)}({em.const(d1)}, v{p}, o)"]
    elif kind == _SUM:
        _, fn, node, p, shape = st
        f, s = em.const(fn), em.const(shape)
        lines += [(f"if type(v{p}) is not _nd or v{p}.dtype != _F64_DT or v{p}.shape != {s} "
                  f"or _rget({f}) is not _builtin[{f}]: raise _Failed()"),
                  f"o = _add_reduce(v{p}, axis=None)",
                  "if type(o) is not _F64: raise _Failed()",
                  f"v{node} = o", f"p{node} = _sum_pullback({s})"]
    elif kind == _GUARD:
        _, fn, tmpl, kw, seen = st
        call = f"_getattr({em.const(fn[0])}, {fn[1]!r})" if type(fn) is tuple else em.const(fn)
        lines.append(f"if not _same({call}(*{em.args(tmpl)}, **{em.const(kw)}), "
                     f"{em.const(seen)}): raise _Failed()")
    elif kind == _OBSERVE:
        _, node, conv, seen = st
        lines.append(f"if {em.const(conv)}(v{node}) != {em.const(seen)}: raise _Failed()")
    else:
        raise ValueError(f"step kind {kind} is not lean")


def _made(em, op, node, lines, dual, check=None):
    """A node from a short path's ``m`` (value, pullback), or where that gave None from the
    general rule call ``op``, as Plan.forward runs it; ``check``: the (shape, dtype) the
    general call's output is checked for, checked on ``m``'s too."""
    lines += ["if m is None:"]
    inner = []
    _forward(em, op, inner, dual)
    lines += ["    " + ln for ln in inner]
    lines += ["else:"]
    if check is not None:
        shape, dt = check
        d, s = em.const(dt), em.const(shape)
        # (a dual of a plain array or float64, the usual output: its dtype and shape are its
        # value's, read without the properties and shape_of that the general check goes
        # through)
        lines += ["    o = m[0]", "    ov = o._value if type(o) is _Dual else None",
                  "    if type(ov) is _nd or type(ov) is _F64:",
                  f"        if ov.dtype != {d} or ov.shape != {s}: raise _Failed()",
                  (f"    elif getattr(o, 'dtype', None) != {d} or "
                  f"tuple(_shape_of(o)) != {s}: raise _Failed()")]
    lines += [f"    v{node}, p{node} = m"]


def _dual_sum(d):
    """The sum rule's (value, pullback) for ``np.sum(d)`` of a dual ``d``, by the dual
    layer's short path of np.sum (with the keywords the sum rule passes it, ``axis=None,
    dtype=None, keepdims=False``: every axis, none given); None where that does not apply
    (the rule runs)."""
    if type(d) is DualArray:
        tag = d._tag
        if not tag._watch and not tag.lanes:
            y = sum_all(d)
            if type(y) is DualArray:
                p = d._value
                return y, _sum_pullback(p.shape, p.dtype)
    return None


def _sum_pullback(shape, dt):
    """The sum rule's pullback for a full sum (axis=None: the cotangent broadcast as is),
    as its reduction_rule wrapper returns it (``dt``: the dtype of the dual summed, whose
    primal is an ndarray; reductions._like casts to it)."""
    def pullback(g):
        gx = broadcast_cotangent(g, shape)
        return (gx if dtype_of(gx) == dt else astype(gx, dt),)
    return pullback


def _ditem(d, key, rule):
    """Plan.forward's short path of a _DITEM step: (value, pullback), or None."""
    if type(d) is DualArray and RRULES.get(operator.getitem) is rule:
        tag = d._tag
        v, t = d._value, d._tangent
        if not tag._watch and not tag.lanes and type(v) is np.ndarray and \
                type(t) is np.ndarray:
            y = v[key]
            if type(y) is _F64:
                ty = t[key]
                if type(ty) is _F64:
                    return DualArray(y, ty, tag), ItemRead(v.shape, key)
    return None


def _give(lines, p, expr, multi, ind):
    """Pass cotangent ``expr`` (not None) to node ``p``, as Tape._run_pullbacks does."""
    if p in multi:
        lines += [f"{ind}if c{p} is None: c{p} = {expr}",
                  f"{ind}else: c{p} = _acc(c{p}, {expr}, O, {p})"]
    else:
        lines.append(f"{ind}c{p} = {expr}")


def _sweep(plan, em, lines):
    """Statements of Plan.sweep's reverse sweep from the output (seed one), unrolled."""
    parents = plan.parents
    y = plan.ynode
    # the nodes that can receive a cotangent, and how many edges reach each
    reach, edges = {y}, {}
    for i in range(y, -1, -1):
        if i not in reach or i < len(plan.inputs):
            continue
        for p in parents[i]:
            for q in (p if type(p) is tuple else (p,)):
                if q is not None:
                    reach.add(q)
                    edges[q] = edges.get(q, 0) + 1
    multi = {q for q, n in edges.items() if n > 1}
    nin = len(plan.inputs)
    lines += [f"c{q} = None" for q in sorted(reach) if q != y]
    # the seed, as Tape.gradient makes it (a NumPy scalar one for a float64 scalar output)
    lines += [f"s = v{y}", "if type(s) is _Dual: s = s._value",
              "if type(s) is not _F64: s = _innermost(s)",
              f"c{y} = _ONE if type(s) is _F64 else _ones_like(s)"]
    for i in range(y, nin - 1, -1):
        if i not in reach:
            continue
        ps = parents[i]
        lines += [f"g = c{i}", "if g is not None:", f"  pb = p{i}", "  if pb is not None:",
                  f"    c{i} = None"]
        ind = "    "
        if ps and type(ps[0]) is int and ps[0] in multi:
            # an element read into a dense buffer the sweep owns: added in place (no pullback)
            lines += [f"{ind}tg = type(g)",
                      (f"{ind}if type(pb) is _ItemRead and (tg is _F64 or tg is _nd and "
                       "g.shape == () and g.dtype.type is _F64) and "
                       f"type(c{ps[0]}) is _nd and {ps[0]} in O:"),
                      f"{ind}  c{ps[0]}[pb.key] += g",
                      f"{ind}else:"]
            ind += "  "
            lines.append(f"{ind}if tg in _SPARSE: g = g.dense()")
        else:
            lines.append(f"{ind}if type(g) in _SPARSE: g = g.dense()")
        lines.append(f"{ind}gs = pb(g)")
        if len(ps) == 2 and all(type(p) is int for p in ps):
            lines.append(f"{ind}if len(gs) == 2:")
            lines.append(f"{ind}  gp, gq = gs")
            for p, g in zip(ps, ("gp", "gq")):
                lines.append(f"{ind}  if {g} is not None:")
                _give(lines, p, g, multi, ind + "    ")
            lines.append(f"{ind}else:")
            ind += "  "
        if len(ps) == 1 and type(ps[0]) is int:  # (zip over one parent: the first item)
            lines += [f"{ind}for gp in gs:", f"{ind}  if gp is not None:"]
            _give(lines, ps[0], "gp", multi, ind + "    ")
            lines.append(f"{ind}  break")
            continue
        # the general case: zip over the parents, tuples for multi-output parents
        lines.append(f"{ind}gs = iter(gs)")
        for p in ps:
            if p is None:
                lines.append(f"{ind}next(gs, None)")
                continue
            lines.append(f"{ind}gp = next(gs, _END)")
            lines.append(f"{ind}if gp is not _END:")
            if type(p) is tuple:
                lines.append(f"{ind}  if gp is not None:")
                lines.append(f"{ind}    gp = iter(gp)")
                for q in p:
                    lines.append(f"{ind}    gq = next(gp, _END)")
                    lines.append(f"{ind}    if gq is not _END:")
                    if q is not None:
                        lines.append(f"{ind}      if gq is not None:")
                        lines.append(f"{ind}        c{q} = _acc(c{q}, gq, O, {q})")
                    lines.append(f"{ind}      pass")
            else:
                lines.append(f"{ind}  if gp is not None:")
                _give(lines, p, "gp", multi, ind + "    ")
            lines.append(f"{ind}  pass")
    outs = []
    for w in plan.inputs[:plan.ndiff]:
        if w in reach:
            lines += [f"if type(c{w}) in _SPARSE: c{w} = c{w}.dense()",
                      f"if c{w} is None: c{w} = _zeros_like(_innermost(v{w}))"]
            outs.append(f"c{w}")
        else:
            outs.append(f"_zeros_like(_innermost(v{w}))")
    return outs, multi


def _generate(plan, dual):
    """The lean function of ``plan`` (module docstring): ``leaves -> (value, cotangents)``;
    on a plan of one input recorded on duals, with its ``hvp_one`` (:func:`_hvp_lines`)."""
    em = _Emitter()
    steps = plan.dual_steps() if dual else plan.steps
    nin = len(plan.inputs)
    cls = em.const(type(plan))
    me = em.const(plan)
    # the leaves of the kind the program was written for (Plan.forward's choice of steps)
    test = "L and type(L[0]) is _Dual and (len(L) == 1 or all(type(a) is _Dual for a in L))"
    lines = [(f"if len(L) != {nin} or {'not ' if dual else ''}({test}): "
             f"return {cls}.run({me}, L)")]
    for k in range(nin):
        lines += [f"v{k} = L[{k}]", f"if type(v{k}) is float: v{k} = _F64(v{k})"]
    body = []
    for st in steps:
        _forward(em, st, body, dual)
    outs, multi = _sweep(plan, em, body)
    if multi or any(type(p) is tuple for ps in plan.parents if ps for p in ps):
        body.insert(0, "O = set()")  # (the buffers the sweep owns, as Tape.gradient's)
    if type(plan) is not Plan:  # (a FusedPlan counts its runs)
        body.append(f"{me}.runs += 1")
    lines += body
    lines.append(f"return v{plan.ynode}, [{', '.join(outs)}]")
    src = "def mp_lean(L):\n" + "".join(f"    {ln}\n" for ln in lines)
    one = _hvp_lines(plan, em, body, outs) if dual else _gradient_lines(plan, em, body, outs)
    if one is not None:
        src += "def mp_lean_one(x, v=None):\n" + "".join(f"    {ln}\n" for ln in one)
    code = _CODE.get(src)
    if code is None:
        if len(_CODE) >= _CODE_MAX:
            _CODE.pop(next(iter(_CODE)))
        code = _CODE[src] = compile(src, "<mooncake_py lean replay>", "exec")
    ns = _namespace(em.consts)
    exec(code, ns)  # noqa: S102  (generated source, compiled here by design)
    fn = ns["mp_lean"]
    if one is not None:
        # (on the function, not the plan: a plan made from this one by copying its __dict__
        # drops its "run", and this with it)
        fn.one = ns["mp_lean_one"]
    return fn


def _gradient_lines(plan, em, body, outs):
    """Statements of ``one(x) -> (value, gradient)``, None where the general path must serve
    the call: :meth:`Plan.run` on the one float64 array ``x`` and the plan's finish
    (``as_gradient`` to a float64 leaf), as one_array.gradient_entry runs them, written
    around the lean function's body without the lists between them. None (no such
    function) for a plan of several inputs or another finish."""
    fin = getattr(plan, "finish", None)
    protos = getattr(fin, "protos", None)
    if len(plan.inputs) != 1 or plan.ndiff != 1 or protos is None or len(protos) != 1 or \
            protos[0].dtype != np.float64 or not getattr(fin, "owned_as_is", 0):
        return None
    p0 = em.const(protos[0])
    lines = ["try:", "  v0 = x"]
    lines += ["  " + ln for ln in body]
    lines += [f"  y, g = v{plan.ynode}, {outs[0]}",
              # (as_gradient's own branch for an ndarray: the leaf's dtype, owned)
              "  if type(g) is _nd:",
              "    if g.dtype != _F64_DT: g = g.astype(_F64_DT)",
              "    elif g.base is not None or not g.flags.writeable: g = g.copy()",
              f"  else: g = _as_gradient(g, {p0})",
              "except Exception:", "  return None",
              "return y, g"]
    return lines


def _hvp_lines(plan, em, body, outs):
    """Statements of ``one(x, v) -> (value, gradient, H·v)``, None where the general path
    must serve the call: what one_array._hvp_plan does around :meth:`Plan.run` on this plan
    (a fresh tag, the dual of ``x`` with a read-only view of ``v`` as its tangent, the run,
    the plan's finish, the tag closed, the read-back) written out around the lean function's
    own body, so that a call makes no list of leaves, no list of cotangents and no calls
    between the layers. Its results are _hvp_plan's bit for bit; None (no such function)
    for a plan of several inputs or whose finish is not the one-leaf conversion."""
    protos = getattr(getattr(plan, "finish", None), "dual_protos", None)
    if len(plan.inputs) != 1 or plan.ndiff != 1 or protos is None or len(protos) != 1:
        return None
    p0 = em.const(protos[0])
    lines = ["tag = _Tag(0)", "try:",
             # (seeding.lent: a tangent that costs no copy and that nothing can write into)
             "  w = v.view()", "  w.setflags(write=False)", "  v0 = _Dual(x, w, tag)"]
    lines += ["  " + ln for ln in body]
    lines += [f"  y, g = v{plan.ynode}, {outs[0]}",
              "  tg = type(g)",
              # (as_gradient's own branch for an ndarray, to the leaf's dtype, owned)
              f"  if tg is _nd and {p0}.dtype == _F64_DT:",
              "    if g.dtype != _F64_DT: g = g.astype(_F64_DT)",
              "    elif g.base is not None or not g.flags.writeable: g = g.copy()",
              f"  elif tg is not _Dual: g = _as_gradient(g, {p0})",
              "except Exception:", "  return None", "finally:", "  tag.close()",
              # the read-back, as _hvp_plan's
              "if type(y) is _Dual and y._tag is tag: value = y._value",
              "else: value = _result(y, tag)[0] if _is_float_leaf(y) else y",
              "if g is None: return value, None, None",
              "if type(g) is _Dual and g._tag is tag:",
              "  t = g._tangent",
              "  if type(t) is _nd and not t.flags.writeable: t = t.copy()",
              "  return value, g._value, t",
              "if type(g) is _nd and g.dtype == _F64_DT:",
              "  return value, g, _zeros(g.shape, dtype=_F64_DT)",
              "return (value,) + _result(g, tag)"]
    return lines


# Code objects by source: plans of one structure (a cache recorded again, another cache of
# the same function) share one; the constants are the namespace's.
_CODE = {}
_CODE_MAX = 256


def _acc(cur, g, owned, p):
    """``cur`` with contribution ``g`` added, as Tape's _accumulate adds into node ``p``."""
    box = {p: cur}
    _accumulate(box, owned, p, g)
    return box[p]


_END = object()
_F64 = np.float64


def _namespace(consts):
    ns = {"_Failed": _Failed, "_F64": np.float64, "_F64_DT": np.dtype(np.float64),
          "_nd": np.ndarray, "_Dual": DualArray, "_rget": RRULES.get,
          "_builtin": fastpath._BUILTIN, "_shape_of": shape_of, "_getattr": getattr,
          "_same": _same, "_add_reduce": np.add.reduce, "_sum_pullback": fastpath._sum_pullback,
          "_ItemRead": ItemRead, "_SPARSE": _SPARSE, "_ONE": _ONE, "_ones_like": np.ones_like,
          "_innermost": innermost, "_ditem": _ditem, "_dual_binary": _dual_binary,
          "_unary_node": dual_scalars.unary_node, "_dual_sum": _dual_sum,
          "_zeros_like": np.zeros_like, "_acc": _acc, "_END": _END, "_Tag": Tag,
          "_as_gradient": as_gradient, "_result": result, "_is_float_leaf": is_float_leaf,
          "_zeros": np.zeros}
    ns.update(consts)
    return ns
