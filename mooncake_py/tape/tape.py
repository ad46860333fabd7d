"""The tape: records each operation's pullback and runs them backwards once.

A recorded operation is a *node*: its pullback and, per positional argument, the node that
argument came from (``None`` for a constant, a tuple for a list/tuple argument). Nodes live in
two parallel lists, indexed by the position TrackedArrays carry, so recording costs two appends
and one TrackedArray.
"""
import contextvars
import inspect

import numpy as np

from ..dispatch import new_level, top_wrapper
from ..config import current_config
from ..errors import (MissingRuleError, ReverseOverReverseError, MutationError,
                      NonDifferentiableInputError, RuleError)
from ..rules.registry import RRULES, ZERO_DERIVATIVE, FRULES, fn_name
from ..rules.cotangents import IndexedCotangent, IndexedCotangentList
from .tracked import TrackedArray

# Level of the tape whose reverse sweep is running in this context (0: none).
_SWEEPING = contextvars.ContextVar("mooncake_sweeping", default=0)
_SEQ = (list, tuple)
_NEEDS1 = (True,)
_NEEDS2 = {(True, True): (True, True), (True, False): (True, False),
           (False, True): (False, True)}


class Tape:
    """A record of tracked operations, for one reverse sweep.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> with mp.Tape() as tape:
        ...     x = tape.track(np.array([1.0, 2.0]))
        ...     y = np.sum(x ** 2)
        >>> gx, = tape.gradient(y, [x])
        >>> gx
        array([2., 4.])

    Tapes are explicit objects: nested tapes, or tapes in different threads, never see each
    other's records.
    """

    def __init__(self):
        self._level = new_level()
        self._pullbacks = []
        self._parents = []
        self._fns = []  # the function each node recorded, to name it in errors from its pullback
        self._debug = current_config().debug_mode
        self._meta = [] if self._debug else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __len__(self):
        return len(self._pullbacks)

    # --- recording ----------------------------------------------------------------------------
    def track(self, x):
        """Start recording ``x`` (float array, NumPy float, Python float, or a dual array)."""
        if isinstance(x, (float, int)) and not isinstance(x, bool):
            if isinstance(x, int):
                raise NonDifferentiableInputError(
                    f"cannot track the Python int {x!r}: derivatives need floating-point inputs. "
                    "Pass a float (e.g. 2.0) or a float array.")
            x = np.float64(x)
        dt = getattr(x, "dtype", None)
        if dt is None or dt.kind != "f":
            raise NonDifferentiableInputError(
                f"cannot track a value of type {type(x).__name__}"
                f"{'' if dt is None else f' with dtype {dt}'}: derivatives are defined for real "
                "floating-point arrays and numbers only. Convert it with x.astype(float), or pass "
                "it as a constant (outside argnums).")
        return self._new(x, None, None)

    def _new(self, value, pullback, parents, fn=None):
        node = len(self._parents)
        self._pullbacks.append(pullback)
        self._parents.append(parents)
        self._fns.append(fn)
        if self._debug:
            self._meta.append((None, None) if value is None else
                              (getattr(value, "shape", ()), getattr(value, "dtype", None)))
        return TrackedArray(value, self, node)

    def record(self, fn, args, kwargs):
        """Run ``fn`` on the unwrapped arguments through its rrule, and record the pullback."""
        if _SWEEPING.get() > self._level:
            raise ReverseOverReverseError(_ROR_MESSAGE.format(fn=fn_name(fn)))
        rule = RRULES.get(fn)
        if rule is None:
            if fn in ZERO_DERIVATIVE:
                return _call(fn, [self._unwrap(a) for a in args],
                             {k: self._unwrap(v) for k, v in kwargs.items()})
            raise MissingRuleError(_missing_message(fn, args, kwargs))
        if kwargs:
            if "out" in kwargs:
                o = kwargs["out"]
                if o is not None and not (type(o) is tuple and all(u is None for u in o)):
                    raise MutationError(
                        f"{fn_name(fn)}(..., out=...) writes into an existing array, which the "
                        "tape cannot represent yet; drop out= and use the returned value.")
                kwargs = {k: v for k, v in kwargs.items() if k != "out"}
            if any(_holds_tracked(v, self) for v in kwargs.values()):
                args, kwargs = _kwargs_to_positional(fn, args, kwargs)
        n = len(args)
        if n == 2:  # fast paths: most calls are unary or binary with plain/tracked operands
            a, b = args
            ta = type(a) is TrackedArray and a._tape is self
            tb = type(b) is TrackedArray and b._tape is self
            if (ta or type(a) not in _SEQ) and (tb or type(b) not in _SEQ) and (ta or tb):
                out, pullback = rule((a._value if ta else a, b._value if tb else b), kwargs,
                                     _NEEDS2[ta, tb])
                if pullback is None:
                    return out
                return self._wrap(fn, out, pullback,
                                  (a._node if ta else None, b._node if tb else None))
        elif n == 1:
            a = args[0]
            if type(a) is TrackedArray and a._tape is self:
                out, pullback = rule((a._value,), kwargs, _NEEDS1)
                if pullback is None:
                    return out
                return self._wrap(fn, out, pullback, (a._node,))
        vals, parents, needs = [], [], []
        tracked = False
        for a in args:
            if type(a) is TrackedArray and a._tape is self:
                vals.append(a._value)
                parents.append(a._node)
                needs.append(True)
                tracked = True
            elif type(a) in _SEQ and any(type(b) is TrackedArray and b._tape is self for b in a):
                vals.append(type(a)(self._unwrap(b) for b in a))
                parents.append(tuple(b._node if type(b) is TrackedArray and b._tape is self
                                     else None for b in a))
                needs.append(True)
                tracked = True
            else:
                vals.append(a)
                parents.append(None)
                needs.append(False)
        if not tracked:  # only outer-level wrappers in kwargs: not ours to record
            return _call(fn, vals, kwargs)
        out, pullback = rule(vals, kwargs, tuple(needs))
        if pullback is None:
            return out
        return self._wrap(fn, out, pullback, tuple(parents))

    def _unwrap(self, a):
        if type(a) is TrackedArray and a._tape is self:
            return a._value
        if type(a) in _SEQ:
            return type(a)(self._unwrap(b) for b in a)
        return a

    def _wrap(self, fn, out, pullback, parents):
        if _is_float(out):
            if type(out) is float:
                out = np.float64(out)
            t = self._new(out, pullback, parents, fn)
            if self._debug:
                self._pullbacks[-1] = _checked(fn, pullback, parents, self._meta)
            return t
        if isinstance(out, (tuple, list)):
            return self._wrap_multi(fn, out, pullback, parents)
        return out

    def _wrap_multi(self, fn, outs, pullback, parents):
        """Several outputs (split, slogdet, eigh): one node for the op, one projection per output."""
        templates = tuple(outs)

        def multi_pullback(gs):
            return pullback(tuple(np.zeros_like(o) if g is None else g
                                  for g, o in zip(gs, templates)))
        op = self._new(None, multi_pullback, parents, fn)
        wrapped = []
        for k, o in enumerate(outs):
            if _is_float(o):
                wrapped.append(self._new(o, _Projection(k, len(outs)), (op._node,)))
            else:
                wrapped.append(o)
        if hasattr(outs, "_fields"):  # namedtuple
            return type(outs)(*wrapped)
        return type(outs)(wrapped)

    # --- the reverse sweep --------------------------------------------------------------------
    def gradient(self, y, xs, seed=None, seeds=None):
        """Cotangents of ``xs`` (TrackedArrays of this tape) for output ``y`` and seed ``ȳ``.

        ``seed`` defaults to ones shaped like ``y`` (so for a scalar ``y`` this is the gradient).
        ``y`` may also be a list of outputs with a list ``seeds``. An ``x`` that the outputs do
        not depend on gets zeros.
        """
        ys = y if type(y) is list else [y]
        if seeds is None:
            seeds = [seed] * len(ys)
        want = [x._node if type(x) is TrackedArray and x._tape is self else None for x in xs]
        cts = [None] * len(self._pullbacks)
        owned = set()
        start = -1
        for yi, s in zip(ys, seeds):
            if type(yi) is TrackedArray and yi._tape is self:
                _accumulate(cts, owned, yi._node, np.ones_like(yi._value) if s is None else s)
                start = max(start, yi._node)
        if start >= 0:
            self._sweep(cts, start, set(w for w in want if w is not None), owned)
        return [cts[w] if w is not None and cts[w] is not None else _zeros_like(x)
                for w, x in zip(want, xs)]

    def _sweep(self, cts, start, keep, owned):
        token = _SWEEPING.set(self._level)
        try:
            pullbacks, parents = self._pullbacks, self._parents
            for i in range(start, -1, -1):
                g = cts[i]
                if g is None:
                    continue
                pb = pullbacks[i]
                if pb is None:
                    continue
                if i not in keep:
                    cts[i] = None
                if type(g) in _SPARSE:
                    g = g.dense()
                try:
                    gs = pb(g)
                except MissingRuleError as e:
                    raise _reached_from(e, self._fns[i]) from e
                for p, gp in zip(parents[i], gs):
                    if p is None or gp is None:
                        continue
                    if type(p) is tuple:
                        for q, gq in zip(p, gp):
                            if q is not None and gq is not None:
                                _accumulate(cts, owned, q, gq)
                    else:
                        _accumulate(cts, owned, p, gp)
            for k in keep:
                if type(cts[k]) in _SPARSE:
                    cts[k] = cts[k].dense()
        finally:
            _SWEEPING.reset(token)


def _reached_from(err, fn):
    """The same error, saying which recorded op's pullback needed the missing rule."""
    if fn is None or "Reached from the pullback" in str(err):
        return err
    return type(err)(f"{err} (Reached from the pullback of {fn_name(fn)}: second order runs "
                     "every pullback on dual numbers, so each function a pullback calls needs a "
                     "forward rule.)")


class _Projection:
    """Pullback of output k of a multi-output op: a tuple cotangent with ``g`` at k."""
    __slots__ = ("k", "n")

    def __init__(self, k, n):
        self.k, self.n = k, n

    def __call__(self, g):
        t = [None] * self.n
        t[self.k] = g
        return (tuple(t),)


def _accumulate(cts, owned, p, g):
    """Add cotangent ``g`` into node ``p``, in place where the sweep owns a plain buffer."""
    cur = cts[p]
    if cur is None:
        cts[p] = g
        return
    if type(cur) is tuple:  # cotangent of a multi-output node
        cts[p] = tuple(a if b is None else b if a is None else _add(a, b) for a, b in zip(cur, g))
        return
    if p in owned and _add_inplace(cur, g):
        return
    if type(g) is IndexedCotangent and type(cur) in _SPARSE and not (_plain(cur) and _plain(g)):
        # sparse contributions that cannot be added in place: collect, scatter once later
        items = cur.items if type(cur) is IndexedCotangentList else [cur]
        items.append(g)
        cts[p] = IndexedCotangentList(g.shape, items)
        return
    if _plain(cur) and _plain(g):
        buf = _fresh_buffer(cur, g)
        if _add_inplace(buf, g):
            cts[p] = buf
            owned.add(p)
            return
    cts[p] = _add(cur, g)


_NP_SCALARS = (np.float64, np.float32, np.float16)


def _plain(v):
    if type(v) is IndexedCotangent:
        v = v.values
    return type(v) is np.ndarray or type(v) in _NP_SCALARS


def _fresh_buffer(cur, g):
    dt = np.result_type(cur.values if type(cur) is IndexedCotangent else cur,
                        g.values if type(g) is IndexedCotangent else g)
    if type(cur) is IndexedCotangent:
        return cur.add_into(np.zeros(cur.shape, dtype=dt))
    return np.array(cur, dtype=dt, ndmin=0)


def _add_inplace(buf, g):
    """``buf += g`` for a plain ndarray buffer when shapes and dtypes allow; False otherwise."""
    if type(buf) is not np.ndarray:
        return False
    if type(g) is IndexedCotangent:
        if _plain(g) and np.can_cast(g.values.dtype, buf.dtype, "same_kind"):
            g.add_into(buf)
            return True
        return False
    if _plain(g) and g.shape == buf.shape and np.can_cast(g.dtype, buf.dtype, "same_kind"):
        buf += g
        return True
    return False


_SPARSE = (IndexedCotangent, IndexedCotangentList)


def _add(a, b):
    if type(a) in _SPARSE:
        a = a.dense()
    if type(b) in _SPARSE:
        b = b.dense()
    return a + b


def _zeros_like(x):
    v = x._value if type(x) is TrackedArray else x
    return np.zeros_like(v)




def _is_float(out):
    dt = getattr(out, "dtype", None)
    if dt is not None:
        return dt.kind == "f"
    return type(out) is float


def _call(fn, args, kwargs):
    if type(fn) is tuple:
        return getattr(fn[0], fn[1])(*args, **kwargs)
    return fn(*args, **kwargs)


_SIGNATURES = {}


def _holds_tracked(v, tape=None):
    """Whether ``v`` is, or is a list/tuple holding, a TrackedArray (of ``tape`` if given)."""
    if type(v) is TrackedArray:
        return tape is None or v._tape is tape
    return type(v) in _SEQ and any(type(b) is TrackedArray and (tape is None or b._tape is tape)
                                   for b in v)


def _kwargs_to_positional(fn, args, kwargs):
    """Move tracked keyword arguments (and those before them) into positional slots."""
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    pos, rest = [], {}
    params = list(sig.parameters.values())
    last = max((i for i, p in enumerate(params) if _holds_tracked(bound.arguments.get(p.name))),
               default=-1)
    for i, p in enumerate(params):
        if i <= last:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise MissingRuleError(
                    f"{fn_name(fn)}: a tracked value was passed as the keyword-only argument "
                    f"{p.name!r}, which has no derivative rule; pass a constant there "
                    "(mp.stop_gradient(value)) or restructure the computation.")
            pos.append(bound.arguments.get(p.name, p.default))
        elif p.name in bound.arguments:
            if p.kind == p.VAR_KEYWORD:
                rest.update(bound.arguments[p.name])
            else:
                rest[p.name] = bound.arguments[p.name]
    return tuple(pos), rest


def _describe_arg(a):
    if type(a) is TrackedArray:
        v = a._value
        return f"TrackedArray[{getattr(v, 'dtype', '?')}, shape {tuple(getattr(v, 'shape', ()))}]"
    if isinstance(a, np.ndarray):
        return f"ndarray[{a.dtype}, shape {a.shape}]"
    if type(a) in _SEQ:
        return f"{type(a).__name__} of {len(a)}"
    return type(a).__name__


def _missing_message(fn, args, kwargs):
    name = fn_name(fn)
    call = ", ".join([_describe_arg(a) for a in args] + [f"{k}=..." for k in kwargs])
    short = name.replace("numpy.", "np.")
    has_f = " (it has a forward rule, so mp.jvp works)" if fn in FRULES else ""
    return (
        f"mooncake_py has no reverse-mode rule (rrule) for {name}, called here as "
        f"{short}({call}){has_f}. Add one, written with np. calls so that second order works "
        f"too:\n\n    @mp.rrule({short})\n    def _(x, *args, **kwargs):\n"
        f"        y = {short}(x, *args, **kwargs)\n"
        f"        return y, lambda g: (<cotangent of x from g>, None, ...)\n\n"
        f"or, if its output carries no derivative, declare mp.zero_derivative({short}). "
        "mooncake_py.testing.test_rule checks a new rule against finite differences.")


_ROR_MESSAGE = (
    "reverse-over-reverse differentiation is not supported: a reverse sweep reached {fn} with "
    "values tracked by an outer tape (for example grad(lambda x: grad(f)(x) @ v)). Use "
    "forward-over-reverse instead: mp.hvp(f)(x, v) for Hessian-vector products, mp.hessian(f)(x) "
    "for full Hessians, or mp.jvp(mp.grad(f), (x,), (v,)).")


def _checked(fn, pullback, parents, meta):
    """Debug mode: wrap a pullback so that each cotangent's structure, shape and dtype is checked."""
    def checked(g):
        gs = pullback(g)
        if not isinstance(gs, tuple) or len(gs) != len(parents):
            raise RuleError(f"the rrule of {fn_name(fn)} returned {type(gs).__name__} "
                            f"{'' if not isinstance(gs, tuple) else f'of length {len(gs)} '}from "
                            f"its pullback; it must return a tuple with one entry per positional "
                            f"argument ({len(parents)}).")
        for k, (p, gp) in enumerate(zip(parents, gs)):
            for q, gq in (zip(p, gp) if type(p) is tuple else [(p, gp)]):
                if q is None or gq is None or meta[q][0] is None:
                    continue
                if type(gq) in _SPARSE:
                    gq = gq.dense()
                shp, dt = meta[q]
                gshape = tuple(getattr(gq, "shape", np.shape(gq)))
                gdt = getattr(gq, "dtype", None)
                if gshape != tuple(shp) or (gdt is not None and gdt.kind != "f"):
                    raise RuleError(
                        f"the rrule of {fn_name(fn)} returned a cotangent for argument {k} with "
                        f"shape {gshape} and dtype {gdt}; the argument has shape {tuple(shp)} and "
                        f"dtype {dt}. Undo broadcasting (sum over broadcast axes) and keep a "
                        "floating dtype.")
        return gs
    return checked
