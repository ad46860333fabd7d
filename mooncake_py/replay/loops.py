"""Compiled loops: a compiled plan's repeated iterations run as a real ``for`` loop.

The interpreter kernel (compiled.py) runs a scalar loop of ``f`` as its unrolled recording:
thousands of steps, each read back through the plan's arrays (``V[A[s]]``, ``ADJ[D[s]]``),
so the loop's carried value (``s`` in ``s += x[i]``) makes a round trip through memory on
every step, forward and back. Here the encoded plan is *rerolled*: a run of iterations that
do the same steps on values that relate to each other the same way becomes one loop of a
kernel generated for the plan's shape, with the carried values (and their cotangents) in
local variables. The steps between loops are written out one by one.

What one iteration's steps may read: an element of an argument (any offset), a constant, a
value made earlier in the same iteration (*internal*), a value made by the previous iteration
(*carried*; in the first iteration, a value from before the loop), or a value from before the
loop. What makes iterations alike is what the interpreter's sweep would do in them: the same
opcodes, operand kinds, comparison outcomes, and the same reached / first-contribution flags
of the reverse sweep. Those flags are fixed by the plan's structure (not by the values), so
they are computed once here (:func:`sweep_flags`) and written into the kernel: a cotangent is
stored where the interpreter's ``R`` flag is unset and added where it is set, in the same
order, and each statement is the interpreter's own (same operations, same operands), so the
results are the interpreter's bit for bit. (A kernel is also checked against the interpreter
on the recorded values before it is used.)

The generated source depends on the shape of the plan only: the loop counts come in the first
array (the interpreter's opcodes are written into the source), the nodes, element offsets and
constants in the other arrays, read by step index. So a loop of 500 iterations and one of
1000 share a kernel. Kernels are cached on disk (numba ``cache=True``) under a name made from
the hash of their source, as the interpreter is.
"""
import hashlib
import threading

import numpy as np

from ..dual.kernels_cpu import kernel_dir
from ..rules.derivative_table import BY_UFUNC, TABLE
from .compiled import (
    _CMP,
    _JIT,
    _NEG,
    _POW,
    _TRUTH,
    _UNARY0,
    _by_exponent,
    _hvp_binary,
    _import,
    _np_call,
    _pow_derivatives,
    _ProgramToNumba,
    _unary_ops,
)

# A run of fewer iterations stays written out step by step.
MIN_ITERATIONS = 4
# Longest loop body looked for (steps).
MAX_BODY = 48
# Plans with more steps outside loops than this are left to the interpreter: straight-line
# source costs compile time that grows faster than linearly with its length.
MAX_STRAIGHT = 160
# Plans longer than this are not searched for loops (the search holds MAX_BODY run arrays
# of int32, 19 MB at this length).
MAX_STEPS = 100_000

_SYM = {1: "+", 2: "-", 3: "*", 4: "/"}
_CMP_SYM = {code: sym for sym, code in _CMP.values()}

_LOCK = threading.Lock()
_MEMO = {}  # source sha1 -> kernel (or None: failed to build in this process)


def _makes_node(o):
    return o <= 4 or o == _NEG or o == _POW or o >= _UNARY0


def _reads(o):
    """How many node operands the reverse sweep passes a cotangent to (and which fields)."""
    if o == 0 or _CMP_SYM.get(o) or o == _TRUTH:
        return 0
    return 2 if o <= 4 or o == _POW else 1


def sweep_flags(op, a, b, dst, n, ynode, dual=False):
    """The interpreter's reverse sweep, on the plan's structure alone: per step whether it is
    reached (0: not; 1: its node has a cotangent; 2: a dual one, in an HVP plan) and, per
    operand that gets a cotangent, how (0: none; else 1 + whether the node had one + 2 *
    whether it had a dual one + 4 * whether this one is dual: stored or added, as the
    interpreter's ``R`` and ``DT`` flags decide); per node the last step that contributes to
    it (``len(op)`` for the output's seed, -1 for none), and the last that contributes a
    dual. ``dual``: the forward-over-reverse kernel's sweep, whose cotangents are duals or
    plain numbers as the tape's are.

    Example:
        >>> op = np.array([0, 0, 3]); a = np.array([0, 1, 0]); b = np.array([-1, -1, 1])
        >>> reached, fa, fb, last, _ = sweep_flags(op, a, b, np.array([0, 1, 2]), 3, 2)
        >>> reached.tolist(), fa.tolist(), fb.tolist(), last.tolist()
        ([1, 1, 1], [0, 0, 1], [0, 0, 1], [2, 2, 3])
    """
    m = len(op)
    R, DT = [False] * n, [False] * n
    last, lastd = [-1] * n, [-1] * n
    R[ynode] = True
    last[ynode] = m
    reached = [0] * m
    flags = ([0] * m, [0] * m)
    opl, al, bl, dl = op.tolist(), a.tolist(), b.tolist(), dst.tolist()
    for s in range(m - 1, -1, -1):
        o = opl[s]
        k = _reads(o)
        d = dl[s]
        if (o != 0 and k == 0) or not R[d]:
            continue
        pg = DT[d]
        reached[s] = 1 + pg
        if k == 0:
            continue
        ps = (al[s], bl[s])[:k]
        for j, p in enumerate(ps):
            if p < 0:
                continue
            du = dual and _dual_out(o, j, pg, k == 2 and ps[1 - j] >= 0)
            flags[j][s] = 1 + R[p] + 2 * DT[p] + 4 * du
            R[p] = True
            if last[p] < 0:
                last[p] = s
            if du:
                DT[p] = True
                if lastd[p] < 0:
                    lastd[p] = s
    return (np.array(reached, np.int8), np.array(flags[0], np.int8),
            np.array(flags[1], np.int8), np.array(last, np.int64), np.array(lastd, np.int64))


_DUAL_OUT = {}


def _dual_out(o, k, pg, po):
    """Whether the HVP kernel's pullback of opcode ``o`` to operand ``k`` gives a dual (a
    cotangent with a tangent), for a cotangent that is one (``pg``) and the other operand a
    node (``po``): whether its ew_pullback program has a tangent output."""
    key = (o, k, pg, po)
    got = _DUAL_OUT.get(key)
    if got is None:
        if o <= 2 or o == _NEG:
            got = pg
        else:
            e = _entry(o)
            present = (pg, True) if o >= _UNARY0 else \
                ((pg, True, po) if k == 0 else (pg, po, True))
            got = len(_ProgramToNumba().lines(e, "p", k, present)[1]) > 1
        _DUAL_OUT[key] = got
    return got


def _entry(o):
    if o == _NEG:
        return TABLE["negative"]
    if o == _POW:
        return BY_UFUNC[np.power]
    if o <= 4:
        return _hvp_binary()[o - 1][0]
    return BY_UFUNC[_unary_ops()[o - _UNARY0][0]]


class _Loop:
    """Steps ``s0`` to ``s0 + count * period - 1``: ``count`` iterations of ``body``, a
    tuple per body step (opcode, kind of a, kind of b, constant seen (guards), reached,
    flag a, flag b); a kind is ("k",) a constant, ("x",) an element offset, ("i", j) the
    node made by body step j this iteration, ("c", j) the one made by body step j in the
    previous iteration, ("o",) a node from before the loop. ``status[j]``: whether body step
    j's node has a cotangent when the sweep reaches the iteration (from the next one, or for
    the last from after the loop)."""

    def __init__(self, s0, period, count, body, status):
        self.s0, self.period, self.count, self.body, self.status = \
            s0, period, count, body, status


def _keys(op, a, b, dst, producer, reached, fa, fb, *_):
    """A period-free key per step: steps of alike iterations have equal keys (the converse
    is checked by :func:`_iteration`)."""
    ids, table = np.empty(len(op), np.int64), {}
    far = 2 * MAX_BODY
    opl, al, bl, dl = op, a, b, dst
    readers = [0] * len(producer)
    for s, o in enumerate(opl):
        if o != 0:
            for p in (al[s], bl[s]):
                if p >= 0:
                    readers[p] += 1
    for s, o in enumerate(opl):
        def kind(p, s=s):
            if p < 0:
                return -1
            d = s - producer[p]
            # (a value read by many steps, such as one a loop reads in every iteration, is
            # at another distance in each: keyed alike, left to _iteration to tell apart)
            return d if d <= far and readers[p] <= 8 else 0
        if o == 0:
            key = (0, reached[s])
        else:
            key = (o, kind(al[s]), kind(bl[s]) if _reads(o) == 2 or o in _CMP_SYM else -2,
                   dl[s] if o in _CMP_SYM or o == _TRUTH else -3, reached[s], fa[s], fb[s])
        ids[s] = table.setdefault(key, len(table))
    return ids


def _runs(ids, P):
    """run[s]: how many consecutive steps from s equal the step P later."""
    m = len(ids)
    run = np.zeros(m + 1, np.int32)
    if P >= m:
        return run
    L = m - P
    eq = ids[:L] == ids[P:]
    marks = np.full(L + 1, L, np.int64)
    idx = np.nonzero(~eq)[0]
    marks[idx] = idx
    nxt = np.minimum.accumulate(marks[::-1])[::-1]  # the first mismatch at or after s
    run[:L] = nxt[:L] - np.arange(L)
    return run


def _iteration(s, P, s0, op, a, b, dst, producer, reached, fa, fb, last, lastd):
    """The body description (as :class:`_Loop` holds it) of the iteration at step ``s`` of a
    loop starting at ``s0``, the nodes it reads from before the loop as carried values
    ({body step: node}), and the statuses (with whether a node is read beyond the next
    iteration); None when a step reads a node made two or more iterations back."""
    body = []
    for j in range(P):
        t = s + j
        o = int(op[t])
        if o == 0:
            body.append((0, ("x",), ("k",), 0, int(reached[t]), 0, 0))
            continue
        kinds = []
        for field, used in ((a, True), (b, _reads(o) == 2 or o in _CMP_SYM)):
            p = int(field[t])
            if not used:
                kinds.append(("k",))
                continue
            if p < 0:
                kinds.append(("k",))
                continue
            q = producer[p]
            if q >= s:
                kinds.append(("i", q - s))
            elif q >= s - P and q >= s0:
                kinds.append(("c", q - s + P))
            elif q < s0:
                kinds.append(("o", p))
            else:
                return None
        seen = int(dst[t]) if o in _CMP_SYM or o == _TRUTH else 0
        body.append((o, kinds[0], kinds[1], seen, int(reached[t]), int(fa[t]), int(fb[t])))
    status, beyond = [], False
    for j in range(P):
        if not _makes_node(int(op[s + j])):
            status.append((False, False))
            continue
        lc = last[dst[s + j]]
        status.append((bool(lc >= s + P), bool(lastd[dst[s + j]] >= s + P)))
        beyond |= bool(lc >= s + 2 * P)
    return body, status, beyond


def _strip(body):
    """The body with the nodes of "o" operands dropped (they may differ per iteration)."""
    return tuple((o, ka[:1] if ka[0] == "o" else ka, kb[:1] if kb[0] == "o" else kb,
                  seen, r, f1, f2) for o, ka, kb, seen, r, f1, f2 in body)


def _carried_init(first, ref):
    """For the first iteration ``first`` of a loop whose other iterations look like ``ref``:
    {carried body step j: the node from before the loop it stands for}, or None when the
    first iteration is not like the others."""
    init = {}
    for (o1, *k1, s1, r1, a1, b1), (o2, *k2, s2, r2, a2, b2) in zip(first, ref):
        if (o1, s1, r1, a1, b1) != (o2, s2, r2, a2, b2):
            return None
        for x, y in zip(k1, k2):
            if y[0] == "c":
                if x[0] != "o" or init.setdefault(y[1], x[1]) != x[1]:
                    return None
            elif x[:1] != y[:1] or (x[0] == "i" and x != y):
                return None
    return init


def _validate(s0, P, count, arrays, flags, np_arrays, np_flags):
    """The :class:`_Loop` of the longest prefix (of at least :data:`MIN_ITERATIONS`
    iterations) of the candidate that the kernel can run as one loop, or None. ``arrays``,
    ``flags``: the plan's arrays and sweep flags as lists; ``np_arrays``, ``np_flags``: the
    same as arrays."""
    op, a, b, dst, producer = arrays
    args = (op, a, b, dst, producer, *flags)
    if count < 2:
        return None
    it1 = _iteration(s0 + P, P, s0, *args)
    if it1 is None or it1[2]:
        return None
    ref, ref_status = _strip(it1[0]), it1[1]
    it0 = _iteration(s0, P, s0, *args)
    if it0 is None or it0[1] != ref_status or it0[2]:
        return None
    init = _carried_init(it0[0], ref)
    if init is None:
        return None
    nodes = {}  # (body step, field) of an "o" operand -> the nodes it reads, per iteration
    for j, (st, rst) in enumerate(zip(it0[0], ref)):
        for fi in (1, 2):
            if rst[fi][0] == "o":
                nodes.setdefault((j, fi), set()).add(st[fi][1])
    k, onodes = _alike(s0, P, count, np_arrays, np_flags)
    for (j, fi), col in onodes.items():
        nodes.setdefault((j, fi), set()).update(col.tolist())
    outside = set().union(*nodes.values())
    if k < MIN_ITERATIONS or len(set(init.values())) != len(init) or \
            outside & set(init.values()):
        return None
    ref = _invariants(ref, nodes)
    # the first cotangent a carried value gets in an iteration is stored, never added: the
    # kernel keeps it in a local that the previous iteration's value must not leak into
    for j in range(P):
        first = None
        for jj in range(P - 1, -1, -1):
            _, ka, kb, _, r, f1, f2 = ref[jj]
            if not r:
                continue
            for kk, f in ((ka, f1), (kb, f2)):
                if kk == ("c", j) and f and first is None:
                    first = f
        if first is not None and (first - 1) & 1:
            return None
    return _Loop(s0, P, k, ref, ref_status), init


def _alike(s0, P, count, arrays, flags):
    """(k, {(body step, field): its nodes per iteration}): iterations 1 to k - 1 of the
    candidate are alike (all that :func:`_iteration` tells, for iterations after the first,
    compared at once), and the "o" operands' nodes in them (from iteration 1 on)."""
    op, a, b, dst, producer = arrays
    reached, fa, fb, last, lastd = flags
    e = s0 + count * P
    sl = slice(s0, e)
    O = op[sl].reshape(count, P)
    rows = (s0 + P * np.arange(count))[:, None]
    cmp_ = np.isin(O, list(_CMP_SYM)) | (O == _TRUTH)
    two = (O <= 4) | (O == _POW) | np.isin(O, list(_CMP_SYM))
    makes = (O <= 4) | (O == _NEG) | (O == _POW) | (O >= _UNARY0)
    feats = [O, np.where(cmp_, dst[sl].reshape(count, P), 0), reached[sl].reshape(count, P),
             fa[sl].reshape(count, P), fb[sl].reshape(count, P)]
    onodes, invalid = {}, np.zeros(count, np.bool_)
    for fi, field, used in ((1, a, O != 0), (2, b, two & (O != 0))):
        p = field[sl].reshape(count, P)
        node = used & (p >= 0)
        q = np.where(node, producer[np.where(node, p, 0)], 0) - rows
        inner = node & (q >= 0)
        carried = node & (q < 0) & (q >= -P) & (q + rows >= s0)
        out = node & (q + rows < s0)
        kind = np.where(inner, 1, np.where(carried, 2, np.where(out, 3, np.where(node, 4, 0))))
        invalid |= (kind == 4).any(axis=1)
        feats += [kind, np.where(inner, q, np.where(carried, q + P, 0))]
        for jj in range(P):
            if kind[1, jj] == 3:
                onodes[(jj, fi)] = p[:, jj]
    d = np.where(makes, dst[sl].reshape(count, P), 0)
    lc = np.where(makes, last[d], -1)
    feats += [lc >= rows + P, np.where(makes, lastd[d], -1) >= rows + P]
    F = np.stack(feats, axis=2).reshape(count, -1)
    bad = np.nonzero((F[2:] != F[1]).any(axis=1) | invalid[2:])[0]
    k = count if not len(bad) else int(bad[0]) + 2
    beyond = np.nonzero((lc >= rows + 2 * P).any(axis=1)[1:k])[0]
    if len(beyond):
        k = int(beyond[0]) + 2  # (read after the loop: may only be the last iteration)
    return k, {key: col[1:k] for key, col in onodes.items()}


def _invariants(ref, nodes):
    """``ref`` with each "o" operand that reads one node in every iteration, and whose
    cotangents the loop only adds to one it had before (the interpreter's flags), as ("u",
    index): the kernel holds that node's value and cotangent in locals through the loop (a
    sum of a cotangent over the iterations, added up in the sweep's order). Another "o"
    operand that reads such a node (in some iteration) keeps them all in memory."""
    single = {key: next(iter(v)) for key, v in nodes.items() if len(v) == 1}
    shared = set().union(*(v for key, v in nodes.items() if key not in single))
    first = {}  # node -> flag of the first contribution an iteration makes to it
    for j in range(len(ref) - 1, -1, -1):
        st = ref[j]
        for fi in (1, 2):
            p = single.get((j, fi))
            if p is not None and st[4] and st[fi + 4] and p not in first:
                first[p] = st[fi + 4]
    index = {}
    for key in sorted(single):
        p = single[key]
        if p not in shared and (p not in first or (first[p] - 1) & 1):
            index.setdefault(p, len(index))
    if not index:
        return ref
    out = []
    for j, st in enumerate(ref):
        st = list(st)
        for fi in (1, 2):
            p = single.get((j, fi))
            if p in index:
                st[fi] = ("u", index[p])
        out.append(tuple(st))
    return tuple(out)


def find_loops(op, a, b, dst, n, ynode, dual=False):
    """The loops of an encoded plan (see the module docstring), as a list of
    (:class:`_Loop`, carried initial nodes) in step order; empty when there is none.

    Example:
        >>> # s = x[0] + x[1]; then 6 times: s = s + x[i]
        >>> op = np.array([0, 0, 1] + [0, 1] * 6)
        >>> a = np.array([0, 1, 0] + [v for i in range(6) for v in (2 + i, 2 + 2 * i)])
        >>> b = np.array([-1, -1, 1] + [v for i in range(6) for v in (-1, 3 + 2 * i)])
        >>> dst = np.arange(15)
        >>> [(lp.s0, lp.period, lp.count) for lp, _ in find_loops(op, a, b, dst, 15, 14)]
        [(1, 2, 7)]
    """
    return _find(op, a, b, dst, n, ynode, dual)[0]


def _find(op, a, b, dst, n, ynode, dual):
    """(:func:`find_loops`'s loops, the :func:`sweep_flags` of the plan)."""
    m = len(op)
    if m < 2 * MIN_ITERATIONS or m > MAX_STEPS:
        return [], None
    producer = np.full(n, -1, np.int64)
    made = np.array([_makes_node(o) for o in range(_UNARY0 + 64)])[np.minimum(op, _UNARY0 + 63)]
    producer[dst[made]] = np.nonzero(made)[0]
    flags = sweep_flags(op, a, b, dst, n, ynode, dual)
    lists = [v.tolist() for v in (op, a, b, dst, producer, *flags)]
    ids = _keys(*lists[:8])
    runs = np.stack([_runs(ids, P) for P in range(1, min(MAX_BODY, m // 2) + 1)])
    Ps = np.arange(1, runs.shape[0] + 1)
    loops, s = [], 0
    arrays, lflags = lists[:5], lists[5:]
    np_arrays = (op, a, b, dst, producer)
    while s < m - MIN_ITERATIONS:
        counts = (runs[:, s] + Ps) // Ps
        cover = np.where(counts >= MIN_ITERATIONS, counts * Ps, 0)
        best = int(cover.max())
        got = None
        if best:
            P = int(Ps[np.argmax(cover == best)])
            got = _validate(s, P, int(counts[P - 1]), arrays, lflags, np_arrays, flags)
        if got is None:
            s += 1
            continue
        loops.append(got)
        s = got[0].s0 + got[0].count * got[0].period
    return loops, flags


# --- code generation -------------------------------------------------------------------------
# Names of the kernels' locals: a value made in this iteration (``lv``), the previous one's
# (``lp``); cotangents of this iteration's nodes (``lc``) and those the previous iteration's
# get (``ln``); their tangents ``lt``, ``lpt``, ``lct``, ``lnt`` (HVP kernels). The table's
# programs use short names (a, b, ta, tb, y, g, tg, d, r, tr, e0...), none of these.

def _operand(kind, field, s, loop, dual):
    """(value, tangent) source of an operand: locals for internal and carried values."""
    if kind[0] == "k":
        return f"C[{s}]", "0.0"
    if kind[0] == "u":
        return f"lu{kind[1]}", f"lut{kind[1]}"
    if kind[0] == "i" or (kind[0] == "c" and loop):
        pre = "lv" if kind[0] == "i" else "lp"
        t = "lt" if kind[0] == "i" else "lpt"
        return f"{pre}{kind[1]}", f"{t}{kind[1]}"
    return f"V[{field}[{s}]]", f"T[{field}[{s}]]"


def _forward_step(st, s, out, fail, loop, dual):
    """Source lines of one step's forward statements; ``out``: the (value, tangent) names its
    results go to (locals in a loop, then stored to V and T as well)."""
    o, ka, kb, seen = st[:4]
    (av, at), (bv, bt) = _operand(ka, "A", s, loop, dual), _operand(kb, "B", s, loop, dual)
    if o in _CMP_SYM:
        return [f"if ({av} {_CMP_SYM[o]} {bv}) != {bool(seen)}:", f"    {fail}"]
    if o == _TRUTH:
        return [f"if ({av} != 0.0) != {bool(seen)}:", f"    {fail}"]
    store = [f"V[D[{s}]] = {out[0]}"] + ([f"T[D[{s}]] = {out[1]}"] if dual else []) \
        if loop else []
    if not dual:
        if o == 0:
            expr = f"X[A[{s}]]"
        elif o <= 4:
            expr = f"{av} {_SYM[o]} {bv}"
        elif o == _NEG:
            expr = f"-{av}"
        elif o == _POW:
            expr = f"np.power({av}, {bv})"
        else:
            return [f"ua = {av}", f"{out[0]} = {_unary_ops()[o - _UNARY0][1]}"] + store
        return [f"{out[0]} = {expr}"] + store
    if o == 0:
        return [f"{out[0]} = X[A[{s}]]", f"{out[1]} = XT[A[{s}]]"] + store
    P = _ProgramToNumba()
    e = _entry(o)
    src = [f"a = {av}", f"ta = {at}"]
    if o <= 4 or o == _POW:
        src += [f"b = {bv}", f"tb = {bt}"]
        src.append(f"y = a {_SYM[o]} b" if o <= 4 else "y = np.power(a, b)")
        present = (False, True) if ka[0] == "k" else (True, False) if kb[0] == "k" else \
            (True, True)
    else:
        fwd = "-a" if o == _NEG else _unary_ops()[o - _UNARY0][1].replace("ua", "a")
        src.append(f"y = {fwd}")
        present = (True,)

    def frule(const_b, ind):
        stmts, (ty,) = P.lines(e, "f", 0, present, const_b)
        return [ind + x for x in stmts] + [f"{ind}{out[1]} = {ty}"]
    if o == _POW and present == (True, False):
        src += _by_exponent(frule, "")
    else:
        src += frule(None, "")
    return src + [f"{out[0]} = y"] + store


def _acc(t, f, r, tr):
    """Source adding a cotangent ``r`` (tangent ``tr``) into the target ``t`` (value and
    tangent names) as the flag ``f`` of :func:`sweep_flags` says the interpreter does."""
    had, had_d, du = (f - 1) & 1, (f - 1) >> 1 & 1, (f - 1) >> 2 & 1
    out = [f"{t[0]} += {r}" if had else f"{t[0]} = {r}"]
    if du:
        if tr is None:
            raise ValueError("a dual contribution without a tangent")
        out.append(f"{t[1]} += {tr}" if had and had_d else f"{t[1]} = {tr}")
    return out


def _reverse_step(st, s, g, target, dual):
    """Source lines of one reached step's pullback, the interpreter's statements: ``g`` the
    (value, tangent) names of its cotangent; ``target(kind, field)``: the (value, tangent)
    names a contribution to an operand goes to."""
    o, ka, kb, _, r, fa, fb = st
    pg = r == 2
    if o == 0:
        return [f"G[A[{s}]] += {g[0]}"] + ([f"GT[A[{s}]] += {g[1]}"] if pg else [])
    if not dual:
        av = f"C[{s}]" if ka[0] == "k" else f"V[A[{s}]]"
        bv = f"C[{s}]" if kb[0] == "k" else f"V[B[{s}]]"
        gv = g[0]

        def acc(kind, field, f, x):
            return _acc(target(kind, field), f, x, None)
        if o <= 4:
            ga, gb = {1: (gv, gv), 2: (gv, f"-{gv}"), 3: (f"{gv} * bv", f"{gv} * av"),
                      4: (f"{gv} * (1 / bv)", f"{gv} * (-V[D[{s}]] / bv)")}[o]
            out = ([f"av = {av}"] if o == 3 else []) + ([f"bv = {bv}"] if o >= 3 else []) + \
                [f"ga = {ga}", f"gb = {gb}"]
            return out + (acc(ka, "A", fa, "ga") if fa else []) + \
                (acc(kb, "B", fb, "gb") if fb else [])
        if o == _NEG:
            return acc(ka, "A", fa, f"-{gv}") if fa else []
        if o == _POW:
            da, db = _pow_derivatives(_np_call)
            out = [f"av = {av}", f"bv = {bv}", f"y = V[D[{s}]]"]
            return out + (acc(ka, "A", fa, f"{gv} * ({da})") if fa else []) + \
                (acc(kb, "B", fb, f"{gv} * ({db})") if fb else [])
        der = _unary_ops()[o - _UNARY0][2]
        return [f"uy = V[D[{s}]]", f"ua = {av}"] + \
            (acc(ka, "A", fa, f"{gv} * ({der})") if fa else [])
    out = [f"g = {g[0]}", f"tg = {g[1]}"]
    if o <= 2:
        sign = "" if o == 1 else "-"
        return out + (_acc(target(ka, "A"), fa, "g", "tg" if pg else None) if fa else []) + \
            (_acc(target(kb, "B"), fb, f"{sign}g", f"{sign}tg" if pg else None) if fb else [])
    if o == _NEG:
        return out + (_acc(target(ka, "A"), fa, "-g", "-tg" if pg else None) if fa else [])
    P = _ProgramToNumba()
    e = _entry(o)

    def load(kind, field, name):
        if kind[0] == "k":
            return [f"{name} = C[{s}]", f"t{name} = 0.0"]
        return [f"{name} = V[{field}[{s}]]", f"t{name} = T[{field}[{s}]]"]
    out += [f"y = V[D[{s}]]"] + load(ka, "A", "a")
    if o >= _UNARY0:
        stmts, outs = P.lines(e, "p", 0, (pg, True))
        return out + (stmts + _acc(target(ka, "A"), fa, outs[0], outs[1] if len(outs) > 1
                                   else None) if fa else [])
    out += load(kb, "B", "b")
    for k, kind, field, f, other in ((0, ka, "A", fa, kb), (1, kb, "B", fb, ka)):
        if not f:
            continue
        po = other[0] != "k"
        present = (pg, True, po) if k == 0 else (pg, po, True)

        def pullback(const_b, ind, present=present, k=k, kind=kind, field=field, f=f):
            stmts, outs = P.lines(e, "p", k, present, const_b)
            return [ind + x for x in stmts + _acc(target(kind, field), f, outs[0],
                                                  outs[1] if len(outs) > 1 else None)]
        out += _by_exponent(pullback, "") if o == _POW and k == 0 and not po else \
            pullback(None, "")
    return out


def _invariant_io(body, uses, i):
    """Source lines that load the invariant operands' cotangents into their locals before a
    loop's sweep (each had one: see :func:`_invariants`) and store them back after it."""
    first, dual = {}, {}
    for j in range(len(body) - 1, -1, -1):
        st = body[j]
        for k, f in ((st[1], st[5]), (st[2], st[6])):
            if k[0] == "u" and st[4] and f:
                first.setdefault(k[1], f)
                dual[k[1]] = dual.get(k[1], False) or bool((f - 1) >> 2 & 1)
    entry, leave = [], []
    for u, (jj, field, _) in uses.items():
        entry += [f"lg{u} = 0.0", f"lgt{u} = 0.0"]
        if u not in first:
            continue
        where = f"{field}[lstart{i} + {jj}]"
        entry.append(f"lg{u} = ADJ[{where}]")
        leave.append(f"ADJ[{where}] = lg{u}")
        if (first[u] - 1) >> 1 & 1:
            entry.append(f"lgt{u} = ADT[{where}]")
        if (first[u] - 1) >> 1 & 1 or dual[u]:
            leave.append(f"ADT[{where}] = lgt{u}")
    return entry, leave


def _straight_key(op, a, b, dst, s, flags):
    reached, fa, fb = flags[:3]
    o = int(op[s])
    ka = ("k",) if o != 0 and a[s] < 0 else ("o",)
    kb = ("k",) if b[s] < 0 else ("o",)
    seen = int(dst[s]) if o in _CMP_SYM or o == _TRUTH else 0
    return (o, ka, kb, seen, int(reached[s]), int(fa[s]), int(fb[s]))


def _reader(body, j):
    """(body step, field) of the first step that reads body step j's value as carried."""
    return next((jj, fld) for jj, st in enumerate(body)
                for fld, k in (("A", st[1]), ("B", st[2])) if k == ("c", j))


def kernel_source(regions, dual=False):
    """The source of the kernel for ``regions`` (a list of ("s", step key) and ("l",
    :class:`_Loop`) in step order; see :func:`loop_plan`). Its signature is the
    interpreter's (``mp_loop(L, A, B, C, D, X, n, ynode, nx)``; with ``dual``, the HVP
    interpreter's, ``mp_dloop(L, A, B, C, D, X, XT, n, ynode, nx)``), with ``L`` the loop
    counts in place of the opcodes.

    Example:
        >>> lp = _Loop(0, 1, 5, ((0, ("x",), ("k",), 0, 1, 0, 0),), [(False, False)])
        >>> "for lk in range(L[0]):" in kernel_source([("l", lp)])
        True
    """
    fail = "return False, 0.0, 0.0, np.zeros(nx), np.zeros(nx)" if dual else \
        "return False, 0.0, np.zeros(nx)"
    fwd, rev = [], []
    pos, nloop, base = 0, 0, None

    def at(off):
        return str(off) if base is None else f"{base} + {off}"

    def mem(kind, field, s):
        return f"ADJ[{field}[{s}]]", f"ADT[{field}[{s}]]"
    for kind, item in regions:
        if kind == "s":
            s = at(pos)
            fwd += _indent(_forward_step(item, s, (f"V[D[{s}]]", f"T[D[{s}]]"), fail, False,
                                         dual), 1)
            if item[4]:
                rev.append(_indent(_reverse_step(
                    item, s, (f"ADJ[D[{s}]]", f"ADT[D[{s}]]"),
                    lambda kind, field, s=s: mem(kind, field, s), dual), 1))
            pos += 1
            continue
        lp, i = item, nloop
        nloop += 1
        P = lp.period
        carried = sorted({k[1] for st in lp.body for k in st[1:3] if k[0] == "c"})
        f = [f"lstart{i} = {at(pos)}", f"lend{i} = lstart{i} + L[{i}] * {P}"]
        for j in range(P):
            f += [f"lv{j} = 0.0", f"lt{j} = 0.0"]
        for j in carried:  # the value each carried one stands for in the first iteration
            jj, field = _reader(lp.body, j)
            f += [f"lv{j} = V[{field}[lstart{i} + {jj}]]"] + \
                ([f"lt{j} = T[{field}[lstart{i} + {jj}]]"] if dual else [])
        uses = {}  # invariant index -> (first body step reading it, field), its flags
        for j, st in enumerate(lp.body):
            for k, fl, field in ((st[1], st[5] if st[4] else 0, "A"),
                                 (st[2], st[6] if st[4] else 0, "B")):
                if k[0] == "u":
                    uses.setdefault(k[1], [j, field, []])[2].append(fl)
        for u, (jj, field, _) in uses.items():
            f += [f"lu{u} = V[{field}[lstart{i} + {jj}]]"] + \
                ([f"lut{u} = T[{field}[lstart{i} + {jj}]]"] if dual else [])
        f.append(f"for lk in range(L[{i}]):")
        body = [f"ls = lstart{i} + lk * {P}"] + [f"lp{j} = lv{j}" for j in carried] + \
            ([f"lpt{j} = lt{j}" for j in carried] if dual else [])
        for j, st in enumerate(lp.body):
            body += _forward_step(st, f"ls + {j}", (f"lv{j}", f"lt{j}"), fail, True, dual)
        fwd += _indent(f, 1) + _indent(body, 2)
        rv = []
        for j in range(P):
            rv += [f"lc{j} = 0.0", f"ln{j} = 0.0", f"lct{j} = 0.0", f"lnt{j} = 0.0"]
        last = f"lstart{i} + (L[{i}] - 1) * {P}"
        for j in range(P):  # (cotangents from after the loop, for its last iteration)
            if lp.status[j][0]:
                rv.append(f"lc{j} = ADJ[D[{last} + {j}]]")
            if lp.status[j][1]:
                rv.append(f"lct{j} = ADT[D[{last} + {j}]]")
        entry, leave = _invariant_io(lp.body, uses, i)
        rv += entry
        rv.append(f"for lk in range(L[{i}] - 1, -1, -1):")
        rb = [f"ls = lstart{i} + lk * {P}"]

        def target(kind, field, s):
            if kind[0] == "u":
                return f"lg{kind[1]}", f"lgt{kind[1]}"
            if kind[0] == "i":
                return f"lc{kind[1]}", f"lct{kind[1]}"
            if kind[0] == "c":
                return f"ln{kind[1]}", f"lnt{kind[1]}"
            return mem(kind, field, s)
        for j in range(P - 1, -1, -1):
            st = lp.body[j]
            if st[4]:
                s = f"ls + {j}"
                rb += _reverse_step(st, s, (f"lc{j}", f"lct{j}"),
                                    lambda kind, field, s=s: target(kind, field, s), dual)
        rb += [f"lc{j} = ln{j}" for j in carried] + \
            ([f"lct{j} = lnt{j}" for j in carried] if dual else [])
        after = []
        for j in carried:  # the first iteration's carried cotangents: the values before it
            fs = [f for st in lp.body if st[4] for k, f in ((st[1], st[5]), (st[2], st[6]))
                  if k == ("c", j) and f]
            if not fs:
                continue
            jj, field = _reader(lp.body, j)
            after.append(f"ADJ[{field}[lstart{i} + {jj}]] = ln{j}")
            if any((f - 1) >> 2 & 1 for f in fs):
                after.append(f"ADT[{field}[lstart{i} + {jj}]] = lnt{j}")
        rev.append(_indent(rv, 1) + _indent(rb, 2) + _indent(after + leave, 1))
        base, pos = f"lend{i}", 0
    if dual:
        head = ["def mp_dloop(L, A, B, C, D, X, XT, n, ynode, nx):", "    V = np.empty(n)",
                "    T = np.empty(n)"]
        mid = ["    G = np.zeros(nx)", "    GT = np.zeros(nx)", "    ADJ = np.empty(n)",
               "    ADT = np.empty(n)", "    ADJ[ynode] = 1.0"]
        end = ["    return True, V[ynode], T[ynode], G, GT", ""]
    else:
        head = ["def mp_loop(L, A, B, C, D, X, n, ynode, nx):", "    V = np.empty(n)"]
        mid = ["    G = np.zeros(nx)", "    ADJ = np.empty(n)", "    ADJ[ynode] = 1.0"]
        end = ["    return True, V[ynode], G", ""]
    src = ["import numpy as np", "import numba", "", "", _JIT] + head + fwd + mid
    for block in reversed(rev):
        src += block
    return "\n".join(src + end)


def _indent(lines, depth):
    return ["    " * depth + ln for ln in lines]


def loop_plan(arrays, dual=False):
    """(regions, loop counts) of an encoded plan (``compiled._encode``'s arrays; ``dual``:
    an HVP plan's), or None when it has no loop or too many steps outside its loops.

    Example:
        >>> op = np.array([0, 0, 1] + [0, 1] * 6)
        >>> a = np.array([0, 1, 0] + [v for i in range(6) for v in (2 + i, 2 + 2 * i)])
        >>> b = np.array([-1, -1, 1] + [v for i in range(6) for v in (-1, 3 + 2 * i)])
        >>> regions, counts = loop_plan((op, a, b, np.zeros(15), np.arange(15), 15, 14))
        >>> [k for k, _ in regions], counts.tolist()
        (['s', 'l'], [7])
    """
    op, a, b, _, dst, n, ynode = arrays
    loops, flags = _find(op, a, b, dst, n, ynode, dual)
    if not loops:
        return None
    regions, counts, s = [], [], 0
    m = len(op)
    for lp, _ in loops:
        while s < lp.s0:
            regions.append(("s", _straight_key(op, a, b, dst, s, flags)))
            s += 1
        regions.append(("l", lp))
        counts.append(lp.count)
        s = lp.s0 + lp.count * lp.period
    while s < m:
        regions.append(("s", _straight_key(op, a, b, dst, s, flags)))
        s += 1
    if sum(1 for k, _ in regions if k == "s") > MAX_STRAIGHT:
        return None
    return regions, np.array(counts, np.int64)


def loop_kernel(regions, dual=False):
    """The compiled kernel of :func:`kernel_source` for ``regions`` (loaded from the kernel
    cache directory when an earlier process compiled it), or None when it cannot be built."""
    source = kernel_source(regions, dual)
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    got = _MEMO.get(digest, False)
    if got is not False:
        return got
    with _LOCK:
        if digest not in _MEMO:
            try:
                k = _import(source, ("dloop_" if dual else "loop_") + digest, kernel_dir(),
                            "mp_dloop" if dual else "mp_loop")
            except Exception:  # noqa: BLE001  (no numba, an unwritable cache: the interpreter)
                k = None
            _MEMO[digest] = k
    return _MEMO[digest]


def reroll(arrays, k, x, xt=None):
    """(kernel, its arrays, its regions) running the encoded plan ``arrays`` (a gradient
    plan's; with ``xt``, an HVP plan's) with its loops, or None. ``k``: the interpreter
    kernel, ``x`` (and ``xt``): the recorded flat input (and direction); the loop kernel is
    used only if it gives the interpreter's results bit for bit on them."""
    dual = xt is not None
    try:
        got = loop_plan(arrays, dual)
    except ValueError:  # (a program the generator cannot write: the interpreter)
        return None
    if got is None:
        return None
    regions, counts = got
    lk = loop_kernel(regions, dual)
    if lk is None:
        return None
    op, a, b, c, dst, n, ynode = arrays
    new = (counts, a, b, c, dst, n, ynode)
    xs = (x, xt) if dual else (x,)
    try:
        want = k(op, a, b, c, dst, *xs, n, ynode, x.shape[0])
        have = lk(counts, a, b, c, dst, *xs, n, ynode, x.shape[0])
    except Exception:  # noqa: BLE001
        return None
    if len(want) != len(have) or any(not _same(u, v) for u, v in zip(want, have)):
        return None
    return lk, new, regions


def _same(u, v):
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    return u.shape == v.shape and u.tobytes() == v.tobytes()
