"""DualArray: a primal value and its tangent(s), and the forward-mode dispatch.

Every NumPy entry point on a DualArray reaches :meth:`DualArray._mc_apply` (through
:func:`mooncake_py.core.dispatch.dispatch`, which picks the innermost transformation). It unwraps the
duals of its own *tag* into primals and tangents, calls the function's frule from
``rules.registry.FRULES``, and wraps float outputs back into duals of the same tag.

A tag is one forward-mode transformation: it takes a fresh level from the shared counter, so a
jvp nested in a jvp uses a distinct tag and the two perturbations never mix (a dual of another
tag is, for this one, just a value). A tag also fixes the number of lanes: ``lanes=0`` for one
direction (tangent shaped like the primal), ``lanes=k`` for k directions (tangent shaped
``(k,) + primal.shape``).
"""

import operator
import sys

import numpy as np

from ..config import _CONFIG as _DEBUG
from ..core.arguments import kwargs_to_positional
from ..core.array_ops import (
    PICKLED,
    WRITTEN_INTO_PLAIN,
    ArrayOps,
    buffer_root,
    has_buffer,
    innermost,
    write_out,
)
from ..core.dispatch import WRAPPER_TYPES, dispatch, new_level
from ..errors import (
    EscapedValueError,
    MissingRuleError,
    MutationError,
    NonDifferentiableInputError,
    RuleError,
    TangentError,
    TrackingLostError,
    escaped_message,
    raise_lost_error_behind,
)
from ..rules.broadcasting import shape_of
from ..rules.complex import check_complex_call, has_complex
from ..rules.derivative_table import load_for
from ..rules.indexing import is_basic_index
from ..rules.lanes import align, expand_ellipsis
from ..rules.mutation import LIKE_CONSTRUCTORS, MUTATORS, call_like, zero_tangent
from ..rules.registry import (
    COMPOSITES,
    FRULE_LANES,
    FRULES,
    ZERO_DERIVATIVE,
    fn_name,
    missing_rule_message,
)

_SEQ = (list, tuple)
_F64 = np.float64


class Tag:
    """One forward-mode transformation: its nesting level and its lane count (0: no lanes).
    ``complex``: whether a complex value has been perturbed by it; from then on every op checks
    that its rule holds for the complex values it is given. ``_watch`` is set when either this
    or ``closed`` is: the dispatch tests that one flag, so open real-only tags pay for neither."""
    __slots__ = ("_complex", "_watch", "closed", "lanes", "level", "lost", "standalone")

    def __init__(self, lanes=0):
        self.level = new_level()
        self.lanes = lanes
        self._complex = False
        self.closed = False  # set when the jvp/hvp that made the tag returns (see close)
        self._watch = False
        # made by mp.dual, outside any transformation: its duals pickle (no f to lose them in)
        self.standalone = False
        self.lost = None  # the last TrackingLostError of its duals (errors.lost_error_behind)

    @property
    def complex(self):
        return self._complex

    @complex.setter
    def complex(self, value):
        self._complex = bool(value)
        self._watch = self._complex or self.closed

    def close(self):
        """The transformation has returned: its duals that escaped (saved by ``f`` in a list or
        a global) raise EscapedValueError when used, instead of acting as live duals."""
        self.closed = True
        self._watch = True
        # (called in jvp/hvp's ``finally``: NumPy's or a C extension's stand-in for a
        # TrackingLostError of this tag's duals is replaced by it, see errors.lost_error_behind)
        exc = sys.exc_info()[1]
        if exc is not None:
            raise_lost_error_behind(exc, self)

    def __repr__(self):
        return f"Tag(level={self.level}, lanes={self.lanes})"


class DualArray(ArrayOps):
    """A value (``primal``) carrying a directional derivative (``tangent``); use it like an ndarray.

    Create one with :func:`dual`. Operations return DualArrays whose tangent is the derivative of
    the result along the input's direction(s); comparisons and other non-differentiable results
    are plain arrays.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> d = mp.dual(np.array([0.0, 1.0]), np.array([1.0, 1.0]))
        >>> y = d * d + 1.0                  # tangent 2·x·ẋ
        >>> type(y).__name__, mp.primal(y), mp.tangent(y)
        ('DualArray', array([1., 2.]), array([0., 2.]))
    """
    __slots__ = ("_kept", "_tag", "_tangent", "_value")

    def __init__(self, primal, tangent, tag):
        self._value = primal
        self._tangent = tangent
        self._tag = tag
        # (primal, input primal, derivative, pullback programs) when the frule of a unary
        # table op kept its derivative for the pullback (see elementwise.reusing_programs)
        self._kept = None

    def __getstate__(self):
        # (the kept derivative is a cache holding generated functions: not part of the value)
        return None, {"_value": self._value, "_tangent": self._tangent, "_tag": self._tag}

    def __setstate__(self, state):
        for name, v in state[1].items():
            setattr(self, name, v)
        self._kept = None

    def _mc_level(self):
        return self._tag.level

    @staticmethod
    def _mc_apply(top, fn, args, kwargs):
        if fn is KEPT_PULLBACK[0] and not kwargs:
            out = KEPT_PULLBACK[1](top._tag, args)
            if out is not None:
                return out
        return _apply(top._tag, fn, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # Operands that are this tag's duals or plain numbers/arrays: this tag is the innermost
        # transformation, no need for dispatch's search.
        if method == "__call__" and not kwargs and _own_operands(self._tag, inputs):
            tag = self._tag
            if not tag._watch and not tag.lanes and len(inputs) <= 2:
                r = LEAN_OPS[len(inputs) - 1](tag, ufunc, *inputs)
                if r is not None:
                    return r
            return _apply(tag, ufunc, inputs, kwargs)
        return dispatch(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in LIKE_CONSTRUCTORS:  # np.zeros(shape, like=x): only `like` dispatches here
            return _like(self, func, args, kwargs)
        # (a sweep's broadcast sums; the transposes of matrix products' pullbacks)
        if func is _np_sum or func is _np_reshape or func is _np_swapaxes:
            tag = self._tag
            if not tag._watch and not tag.lanes:
                r = LEAN_FUNCTIONS[0](self, func, args, kwargs)
                if r is not None:
                    return r
        return dispatch(func, args, kwargs)

    def __getitem__(self, key):
        # A basic index (ints, slices, None, ...) of a NumPy dual without lanes: the same view
        # of primal and tangent, which is what the getitem frule and _paired make of it.
        tag = self._tag
        if not tag._watch and not tag.lanes and _basic_key(key):
            p, t = self._value, self._tangent
            if type(p) is np.ndarray and type(t) is np.ndarray and \
                    FRULES.get(_getitem) is _GETITEM_RULE[0] and not _DEBUG.get().debug_mode:
                out = p[key]
                tout = t[key]
                to = type(out)
                if to is np.ndarray:
                    # (a 0-d view gets a scalar tangent from the frule: that one is general)
                    if out.ndim and type(tout) is np.ndarray and out.base is not None \
                            and tout.dtype is out.dtype and out.dtype.kind == "f":
                        return DualArray(out, tout, tag)
                elif to is _F64 and type(tout) is _F64:
                    return DualArray(out, tout, tag)
        return dispatch(_getitem, (self, key), {})

    def _mc_setitem(self, key, value):
        """``self[key] = value`` in place: the primal as NumPy writes it, the tangent likewise
        (the value's tangent, or zero for a constant), so views of either see the write."""
        tag = self._tag
        if type(value) in _SEQ and any(type(b) is DualArray and b._tag is tag for b in value):
            value = np.stack(value)
        if type(value) is DualArray and value._tag is tag:
            vp, vt = value._value, value._tangent
        else:
            vp, vt = value, None
        p = self._value
        if not has_buffer(p):
            p[key] = vp  # a NumPy scalar: NumPy's own error
        t = self._writable_tangent()
        p[key] = vp
        _write_tangent(t, key, vt, tag.lanes, p)

    def _writable_tangent(self):
        t = self._tangent
        inner = innermost(t)
        if type(inner) is np.ndarray and not inner.flags.writeable \
                or isinstance(inner, (np.generic, float)):
            p = innermost(self._value)
            if getattr(p, "base", None) is not None:
                raise MutationError(
                    "cannot write through this view of a dual value: its tangent is a read-only "
                    "array, so the write could not reach the tangent of the array it views. "
                    "Copy it first (y = x.copy()) or write into the array itself.")
            # The buffer owns its memory: it may own a private tangent too.
            t = self._tangent = np.copy(t)
        return t

    @property
    def primal(self):
        return self._value

    @property
    def tangent(self):
        return self._tangent

    @property
    def lanes(self):
        """The number of directions carried (0 when the tangent is shaped like the primal)."""
        return self._tag.lanes

    def __repr__(self):
        return f"DualArray(primal={self._value!r}, tangent={self._tangent!r})"

    def _mc_live(self):
        return not (self._tag.closed or self._tag.standalone)

    def _lost(self, what):
        v = self._value
        desc = (f"A dual value (DualArray of {type(v).__name__}, dtype {v.dtype}, shape "
                f"{tuple(np.shape(v))}) was {what}")
        if what is WRITTEN_INTO_PLAIN or what is PICKLED:
            err = TrackingLostError(f"{desc}.")
        else:
            err = TrackingLostError(
            f"{desc}, which would silently drop its derivative. Common "
            "causes and fixes: np.array([x[0], x[1]]) -> use np.stack([x[0], x[1]]); math.sin(x) / "
            "float(x) -> use np.sin(x) and keep it an array; writing it into a plain array "
            "(out[i] = x with out = np.zeros(n)) -> create the array from a dual value, "
            "np.zeros_like(x, shape=(n,)), np.zeros(n, like=x), np.empty_like(x) or x.copy(); a "
            "library function that calls np.asarray internally -> wrap it with mp.primitive and "
            "give it an mp.frule. To read the numbers, use mp.primal(x) and mp.tangent(x).")
        err._mc_source = self._tag  # (whose close() surfaces it: errors.lost_error_behind)
        self._tag.lost = err
        return err


WRAPPER_TYPES.add(DualArray)

# A unary table op's frule that computed its first derivative leaves (output, input primal,
# derivative, pullback programs) here; _apply keeps it on the output dual, and the pullback
# primitive, dispatched here ([the primitive, its short path], set by elementwise.py), uses it
# instead of computing the derivative again.
KEPT = [None]
KEPT_PULLBACK = [object(), None]


def _no_lean(tag, fn, *operands):
    return None


# [unary, binary]: the lean path of a table op's common call (see lean.py, which sets them);
# each returns the result or None, where the general path runs.
LEAN_OPS = [_no_lean, _no_lean]
LEAN_FUNCTIONS = [_no_lean]  # [np.sum, np.reshape, np.swapaxes of a dual] (see lean.py)
_np_sum, _np_reshape, _np_swapaxes = np.sum, np.reshape, np.swapaxes

# Operands that are neither wrappers nor containers of them.
_PLAIN_OPERANDS = frozenset([np.ndarray, float, int, np.float64, np.float32, np.int64])


_BASIC_KEYS = frozenset([int, slice, type(None), type(Ellipsis)])
_getitem = operator.getitem
_GETITEM_RULE = [FRULES.get(_getitem)]  # (the frule the short path above stands in for)


def _basic_key(key):
    t = type(key)
    if t is tuple:
        for k in key:
            if type(k) not in _BASIC_KEYS:
                return False
        return True
    return t in _BASIC_KEYS


def _own_operands(tag, operands):
    """Whether every operand is a dual of ``tag`` or a plain array/number (so ``tag`` is the
    innermost transformation of the call)."""
    for x in operands:
        t = type(x)
        if t is DualArray:
            if x._tag is not tag:
                return False
        elif t not in _PLAIN_OPERANDS:
            return False
    return True


def _binary_operator(ufunc, reflected):
    """``self op other`` straight to this tag's dispatch when ``other`` is a dual of the same
    tag or a plain array/number; anything else goes through dispatch's search."""
    def op(self, other):
        t = type(other)
        args = (other, self) if reflected else (self, other)
        if t in _PLAIN_OPERANDS or (t is DualArray and other._tag is self._tag):
            tag = self._tag
            if not tag._watch and not tag.lanes:
                r = LEAN_OPS[1](tag, ufunc, args[0], args[1])
                if r is not None:
                    return r
            return _apply(tag, ufunc, args, {})
        return dispatch(ufunc, args, {})
    op.__name__ = f"__{'r' if reflected else ''}{ufunc.__name__}__"
    return op


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("pow", np.power)]:
    setattr(DualArray, f"__{_name}__", _binary_operator(_uf, False))
    setattr(DualArray, f"__r{_name}__", _binary_operator(_uf, True))


def _neg(self):
    tag = self._tag
    if not tag._watch and not tag.lanes:
        r = LEAN_OPS[0](tag, np.negative, self)
        if r is not None:
            return r
    return _apply(tag, np.negative, (self,), {})


DualArray.__neg__ = _neg


def _write_tangent(t, key, vt, lanes, p):
    """Write tangent ``vt`` (None: zero) into the region ``key`` of tangent ``t`` of primal
    ``p``; with lanes, the lane axis of ``t`` and ``vt`` comes first."""
    val = 0 if vt is None else vt
    if not lanes:
        t[key] = val
        return
    key = key if type(key) is tuple else (key,)
    if vt is not None:
        rnd = len(shape_of(p[key]))
        vs = tuple(shape_of(vt))[1:]
        if len(vs) > rnd:  # leading length-one axes, which assignment drops
            val = np.reshape(vt, (lanes,) + vs[len(vs) - rnd:])
        val = align(val, rnd)
    if is_basic_index(key):
        t[(slice(None),) + key] = val
        return
    # Advanced indices may move their axes to the front: index with the lane axis moved last.
    key = expand_ellipsis(key, len(shape_of(p)))
    np.moveaxis(t, 0, -1)[key] = val if vt is None else np.moveaxis(val, 0, -1)


def _like(d, func, args, kwargs):
    """``func(*args, like=d, **kwargs)`` (np.zeros, np.empty, ...): a dual buffer with a zero
    tangent when floating point, so that dual values can be written into it."""
    tag = d._tag
    fill = None
    if func is np.full:
        if len(args) > 1 and type(args[1]) is DualArray and args[1]._tag is tag:
            fill = args[1]
            args = (args[0], np.zeros((), fill.dtype)[()]) + tuple(args[2:])
        elif type(kwargs.get("fill_value")) is DualArray and kwargs["fill_value"]._tag is tag:
            fill = kwargs["fill_value"]
            kwargs = dict(kwargs, fill_value=np.zeros((), fill.dtype)[()])
    out = call_like(func, args, kwargs, d._value)
    dt = getattr(out, "dtype", None)
    if dt is None or dt.kind not in "fc":
        return out
    if dt.kind == "c":
        tag.complex = True
    b = DualArray(out, zero_tangent(out, tag.lanes), tag)
    if fill is not None:
        b[...] = fill
    return b


def _write_out(fn, o, r, where):
    """``fn(..., out=o)``: write the result ``r`` into ``o`` (a dual buffer) as NumPy would."""
    return write_out(o, r, where, lambda ri: ri._lost(WRITTEN_INTO_PLAIN))


# --- the forward dispatch -------------------------------------------------------------------
def _apply(tag, fn, args, kwargs):
    if tag._watch:
        if tag.closed:
            raise EscapedValueError(escaped_message("dual", fn_name(fn)))
        if has_complex(args) or (kwargs and has_complex(kwargs.values())):
            check_complex_call(fn)
    if kwargs:
        if "out" in kwargs:
            o = kwargs["out"]
            if o is not None and not (type(o) is tuple and all(u is None for u in o)):
                rest = {k: v for k, v in kwargs.items() if k not in ("out", "where")}
                return _write_out(fn, o, _apply(tag, fn, args, rest), kwargs.get("where", True))
            kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        if any(type(v) is DualArray and v._tag is tag for v in kwargs.values()):
            args, kwargs = kwargs_to_positional(
                fn, args, kwargs, lambda v: type(v) is DualArray and v._tag is tag, "dual")
    primals, tangents = [], []
    for a in args:
        if type(a) is DualArray and a._tag is tag:
            primals.append(a._value)
            tangents.append(a._tangent)
        elif type(a) in _SEQ and any(type(b) is DualArray and b._tag is tag for b in a):
            primals.append(type(a)(b._value if type(b) is DualArray and b._tag is tag else b
                                   for b in a))
            tangents.append(tuple(b._tangent if type(b) is DualArray and b._tag is tag else None
                                  for b in a))
        else:
            primals.append(a)
            tangents.append(None)
    rule = FRULES.get(fn)
    if rule is None:
        mutator = MUTATORS.get(fn) or COMPOSITES.get(fn)
        if mutator is not None:  # np.copyto, np.median, ...: built from dual operations
            return mutator(*args, **kwargs)
        if fn in ZERO_DERIVATIVE:
            return _call(fn, primals, kwargs)
        if load_for(fn):  # a scipy.special ufunc: its table section loads on first use
            return _apply(tag, fn, args, kwargs)
        return _trace_primitive(fn, args, kwargs)
    native = getattr(rule, "_mc_native", None)
    if native is not None:
        out, tout = native(primals, tangents, tag.lanes, kwargs)
    else:
        out, tout = _run_rule(fn, rule, primals, tangents, tag.lanes, kwargs)
    kept = KEPT[0]
    if kept is not None:
        KEPT[0] = None
    if type(out) is _F64 and type(tout) is _F64 and not _DEBUG.get().debug_mode:
        return DualArray(out, tout, tag)
    return wrap_result(fn, out, tout, primals, tangents, tag, kept)


def wrap_result(fn, out, tout, primals, tangents, tag, kept=None):
    """The dual _apply makes of a rule's ``(out, tout)`` for these primals and tangents;
    ``kept`` (a unary frule's derivative, see KEPT) stays on a fresh float result."""
    if type(out) is np.ndarray and type(tout) is np.ndarray:
        tout = _paired(out, tout, primals, tangents)
        # (the common result, a real array and its tangent of one dtype: _wrap's checks all
        # pass; dtypes of one kind and size are one object)
        odt = out.dtype
        if tout.dtype is odt and odt.kind == "f" and not _DEBUG.get().debug_mode:
            d = DualArray(out, tout, tag)
            if kept is not None and kept[0] is out:
                d._kept = kept
            return d
    return _wrap(fn, out, tout, tag)


def _paired(out, tout, primals, tangents):
    """``tout``, made to share memory with the inputs' tangents exactly as ``out`` does with
    their primals, so that writes (``y[i] = v``) and views stay consistent in both.

    A fresh primal gets a tangent of its own, laid out like it (rules may return an input's
    tangent, ``x + c``, a read-only broadcast, or a differently ordered copy). A view of an
    input whose tangent is not the same view of the input's tangent (their layouts differed)
    gets a read-only tangent: writing through it raises MutationError, never loses the write.
    """
    tf = tout.flags  # (each .flags is a new object: read once)
    if out.base is None and tout.base is None and tf.writeable:
        # Both fresh (the usual elementwise result): shared only if tout is an input's
        # tangent or the buffer under one; then the layout decides, as below.
        for t in tangents:
            if t is tout or (type(t) is np.ndarray and t.base is not None and
                             buffer_root(t) is tout):
                break
        else:
            if tf.c_contiguous or not out.flags.c_contiguous:
                return tout
            return np.array(tout, order="C")
    if out.base is not None:
        root = buffer_root(out)
        for p, t in zip(primals, tangents):
            if type(t) is np.ndarray and type(p) is np.ndarray and buffer_root(p) is root:
                if buffer_root(tout) is buffer_root(t):
                    return tout
                tout = tout.view()
                tout.flags.writeable = False
                return tout
    # A fresh primal (or a view of a temporary made inside the rule).
    shared = not tout.flags.writeable
    if not shared:
        troot = buffer_root(tout) if tout.base is not None else tout
        for t in tangents:
            if t is tout or (type(t) is np.ndarray and buffer_root(t) is troot):
                shared = True
                break
    c_order = out.flags.c_contiguous
    if shared or (c_order and not tout.flags.c_contiguous):
        return np.array(tout, order="C" if c_order else "K")
    return tout


def _trace_primitive(fn, args, kwargs):
    """A primitive with no frule (say, one given only an rrule) is differentiated through its
    body, if its body is written with NumPy calls; if not, the missing rule is the error."""
    body = getattr(fn, "__wrapped__", None) if getattr(fn, "__mooncake_primitive__", False) \
        else None
    if body is None:
        raise MissingRuleError(_missing_message(fn, args, kwargs))
    try:
        return body(*args, **kwargs)
    except TrackingLostError as e:
        raise MissingRuleError(
            _missing_message(fn, args, kwargs) + f" (Forward mode tried to differentiate through "
            f"its body, which failed: {str(e).split('.')[0]}.)") from e


def _call(fn, args, kwargs):
    if type(fn) is tuple:
        return getattr(fn[0], fn[1])(*args, **kwargs)
    return fn(*args, **kwargs)


def _map_tangents(f, tangents):
    return [None if t is None else tuple(None if u is None else f(u) for u in t)
            if type(t) is tuple else f(t) for t in tangents]


def _run_rule(fn, rule, primals, tangents, lanes, kwargs):
    """Call a registered frule under the lane convention (see ``rules.registry.frule``)."""
    if fn in FRULE_LANES:
        if lanes:
            return rule(primals, tangents, **kwargs)
        out, tout = rule(primals, _map_tangents(_add_lane, tangents), **kwargs)
        return out, _map_out(_drop_lane, tout)
    if not lanes:
        return rule(primals, tangents, **kwargs)
    out, per_lane = None, []
    for l in range(lanes):
        out, t = rule(primals, _map_tangents(lambda u, l=l: u[l], tangents), **kwargs)
        per_lane.append(t)
    return out, _stack_lanes(per_lane, out)


def _add_lane(t):
    if type(t) is np.ndarray or isinstance(t, np.generic):
        return t[None]
    return np.reshape(t, (1,) + tuple(shape_of(t)))


def _drop_lane(t):
    return t[0]


def _map_out(f, tout):
    if tout is None:
        return None
    if isinstance(tout, (tuple, list)):
        return type(tout)(_map_out(f, t) for t in tout)
    return f(tout)


def _stack_lanes(per_lane, out):
    first = per_lane[0]
    if isinstance(first, (tuple, list)):
        return tuple(_stack_lanes([p[i] for p in per_lane], out[i]) for i in range(len(first)))
    if all(t is None for t in per_lane):
        return None
    return np.stack([np.zeros_like(out) if t is None else t for t in per_lane])


def _is_float(x):
    dt = getattr(x, "dtype", None)
    if dt is not None:
        return dt.kind in "fc"
    return type(x) is float or type(x) is complex


def _wrap(fn, out, tout, tag):
    if tout is None:
        return out
    odt = getattr(out, "dtype", None)
    if (odt is not None and odt.kind == "f") or type(out) is float:
        if odt is None:
            out = np.float64(out)
            odt = out.dtype
        dt = getattr(tout, "dtype", None)
        if dt is None:
            tout = np.asarray(tout, dtype=odt)[()]
        elif dt != odt:
            if dt.kind == "c":
                raise RuleError(_complex_tangent_message(fn, odt))
            tout = tout.astype(odt)
        if _DEBUG.get().debug_mode:
            _check_tangent(fn, out, tout, tag)
        return DualArray(out, tout, tag)
    if isinstance(out, (tuple, list)):
        wrapped = [_wrap(fn, o, t, tag) for o, t in zip(out, tout)]
        return type(out)(*wrapped) if hasattr(out, "_fields") else type(out)(wrapped)
    if (odt is not None and odt.kind == "c") or type(out) is complex:
        check_complex_call(fn)
        tag.complex = True
        out = np.complex128(out) if odt is None else out
        odt = out.dtype
        dt = getattr(tout, "dtype", None)
        if dt is None:
            tout = np.asarray(tout, dtype=odt)[()]
        elif dt != odt:
            tout = tout.astype(odt)
        if _DEBUG.get().debug_mode:
            _check_tangent(fn, out, tout, tag)
        return DualArray(out, tout, tag)
    if odt is not None and odt.kind in "OSUVMm":
        raise MissingRuleError(
            f"{fn_name(fn).replace('numpy.', 'np.')} returned a value of dtype {odt} from dual "
            "inputs: forward mode carries derivatives through floating-point and complex values "
            "only, so this one would silently lose its derivative. Keep the computation in float "
            "or complex arrays, or use mp.stop_gradient(...) on a value meant to be a constant.")
    return out


def _complex_tangent_message(fn, odt):
    return (f"the frule of {fn_name(fn)} returned a complex tangent for a real output of dtype "
            f"{odt}: the tangent of a real value is real. Take the real part in the rule (a "
            "real-valued function of complex z has tangent Re(...)).")


def _check_tangent(fn, out, tout, tag):
    want = ((tag.lanes,) if tag.lanes else ()) + tuple(np.shape(out))
    got = tuple(np.shape(tout))
    if got != want:
        raise RuleError(f"the frule of {fn_name(fn)} returned a tangent of shape {got} for an "
                        f"output of shape {tuple(np.shape(out))}; expected {want}"
                        f"{' (lanes first)' if tag.lanes else ''}.")


def _missing_message(fn, args, kwargs):
    return missing_rule_message(fn, args, kwargs, "forward")


# --- public constructors and accessors ------------------------------------------------------
def _validate(x, v, lanes, what="x"):
    """Check that tangent ``v`` suits primal ``x`` (lanes: expected lane count, 0 for none)."""
    dt = getattr(x, "dtype", None)
    if type(x) is float:
        dt = np.dtype(np.float64)
    elif type(x) is complex:
        dt = np.dtype(np.complex128)
    if dt is None or dt.kind not in "fc":
        raise NonDifferentiableInputError(
            f"{what} is a {type(x).__name__}{'' if dt is None else f' with dtype {dt}'}, which has "
            "no derivative, but a tangent was given for it. Make it floating point "
            "(x.astype(float), 2.0 instead of 2) or pass None as its tangent.")
    vdt = getattr(v, "dtype", None)
    if type(v) in (float, int) and not isinstance(v, bool) or type(v) is complex and dt.kind == "c":
        vdt = dt
    if vdt is None or vdt.kind not in "fc":
        raise TangentError(
            f"the tangent of {what} is a {type(v).__name__}"
            f"{'' if vdt is None else f' with dtype {vdt}'}; it must be a floating-point array "
            f"with the primal's dtype {dt}.")
    if vdt != dt:
        raise TangentError(
            f"the tangent of {what} has dtype {vdt} but the primal has dtype {dt}; give it the "
            f"primal's dtype (v.astype({dt.name})) so that {dt.name} stays {dt.name}.")
    xs, vs = tuple(np.shape(x)), tuple(np.shape(v))
    want = ((lanes,) if lanes else ()) + xs
    if vs != want:
        if lanes:
            hint = (f"with lanes=True the tangent needs a leading lane axis: shape "
                    f"(k,) + {xs}, here k = {lanes} (from the first tangent)")
        else:
            hint = f"it must have the primal's shape {xs}"
            if vs[1:] == xs and len(vs) == len(xs) + 1:
                hint += " (to pass several directions at once, use lanes=True)"
        raise TangentError(f"the tangent of {what} has shape {vs}; {hint}.")


def _as_value(x, dtype=None):
    if type(x) is float or type(x) is int:
        return np.float64(x) if dtype is None else dtype.type(x)
    if type(x) is complex:
        return np.complex128(x) if dtype is None else dtype.type(x)
    return x


def dual(x, v, *, lanes=False, like=None):
    """A :class:`DualArray` with primal ``x`` and tangent ``v``.

    With ``lanes=True``, ``v`` holds k directions stacked on a leading axis (shape
    ``(k,) + x.shape``). Each call starts a new forward transformation (tag) unless ``like`` is a
    DualArray whose tag (and lane count) to share, so several inputs can be perturbed together.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> d = mp.dual(np.array([0.0, 1.0]), np.array([1.0, 0.0]))
        >>> mp.tangent(np.sin(d))
        array([1., 0.])
    """
    if like is not None:
        tag = like._tag
        k = tag.lanes
    else:
        if lanes and not np.ndim(v):
            raise TangentError("with lanes=True the tangent needs a leading lane axis; got a "
                               "scalar.")
        k = np.shape(v)[0] if lanes else 0
        tag = Tag(k)
        tag.standalone = True
    _validate(x, v, k)
    x = _as_value(x)
    if x.dtype.kind == "c":
        tag.complex = True
    return DualArray(x, _as_value(v, np.dtype(getattr(x, "dtype", np.float64))), tag)


def primal(x):
    """The primal value of a DualArray (any other value is returned as it is).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.primal(np.sin(mp.dual(np.array([0.0]), np.array([1.0])))), mp.primal(3.0)
        (array([0.]), 3.0)
    """
    return x._value if type(x) is DualArray else x


def tangent(x):
    """The tangent of a DualArray; for a plain float value, zeros like it (no lane axis); for a
    non-float value, None.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.tangent(np.sin(mp.dual(np.array([0.0]), np.array([2.0]))))   # cos(0)·2
        array([2.])
        >>> mp.tangent(np.ones(2)), mp.tangent(np.arange(2))
        (array([0., 0.]), None)
    """
    if type(x) is DualArray:
        return x._tangent
    return np.zeros_like(x) if _is_float(x) else None


_NDARRAY = np.ndarray


def fresh(y, ty, tangents):
    """Whether ``wrap_result`` pairs ``(y, ty)`` as they are: a fresh float result and a fresh
    tangent of its dtype that is no input's tangent (nor the buffer under one), laid out
    C-first where the result is (``_paired``'s first test and its ``_wrap``'s)."""
    if type(y) is not _NDARRAY or type(ty) is not _NDARRAY or y.base is not None or \
            ty.base is not None or ty.dtype is not y.dtype or y.dtype.kind != "f":
        return False
    tf = ty.flags
    if not tf.writeable or not (tf.c_contiguous or not y.flags.c_contiguous):
        return False
    for t in tangents:
        if t is ty or (type(t) is _NDARRAY and t.base is not None and buffer_root(t) is ty):
            return False
    return True
