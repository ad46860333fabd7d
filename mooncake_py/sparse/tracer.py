"""PatternArray: a value that knows which inputs each of its elements depends on.

Sparsity detection runs ``f`` once on a :class:`PatternArray`, which goes through the same
dispatch as the tape and the dual numbers (it registers in ``WRAPPER_TYPES``). Each one carries

- its primal value (so shapes, dtypes, comparisons and ``if`` statements behave exactly as in a
  plain call: the pattern found is the one of the control-flow path taken at ``x``), and
- its dependency rows, a boolean ``(size, n_inputs)`` CSR matrix (:mod:`.rows`).

Every op looks up a *pattern rule* in :data:`PATTERN_RULES` (filled by :mod:`.pattern_rules`),
which computes the output's rows from the inputs' rows and, for the Hessian, reports the pairs of
inputs its second derivative couples to the :class:`Trace`. The trace accumulates those pairs
globally (not per element): the Hessian pattern is the union of ``Lᵀ·R`` over every nonlinear
op, a superset of the true pattern that never misses an entry on the path taken.
"""
import warnings

import numpy as np

from ..core.arguments import kwargs_to_positional
from ..core.array_ops import WRITTEN_INTO_PLAIN, ArrayOps, buffer_root, has_buffer, write_out
from ..core.dispatch import WRAPPER_TYPES, dispatch, new_level
from ..errors import MissingRuleError, MutationError, TrackingLostError
from ..rules.derivative_table import load_for
from ..rules.mutation import LIKE_CONSTRUCTORS, MUTATORS, call_like
from ..rules.registry import COMPOSITES, ZERO_DERIVATIVE, fn_name, missing_rule_message
from . import rows as R

_SEQ = (list, tuple)

#: fn -> rule(trace, fn, args, kwargs) returning the call's output (PatternArrays where float).
PATTERN_RULES = {}


class DenseFallbackWarning(UserWarning):
    """Sparsity detection met a function with no pattern rule and assumed dense dependence."""


class Trace:
    """One sparsity detection: its nesting level, input count and the Hessian pairs found.

    ``strict=True`` makes an op with no pattern rule raise :class:`MissingRuleError` instead of
    falling back to dense dependence with a :class:`DenseFallbackWarning`.
    """
    __slots__ = (
        "last_write",
        "left",
        "level",
        "n",
        "owners",
        "right",
        "strict",
        "sym",
        "writes",
    )

    def __init__(self, n, strict=False):
        self.level = new_level()
        self.n = n
        self.strict = strict
        self.sym, self.left, self.right = [], [], []
        self.writes = 0
        self.last_write = {}
        self.owners = {}  # id(buffer) -> the PatternArray whose value is that buffer

    def add_pairs(self, L, Rm):
        """Record that the second derivative couples every input of row ``L[r]`` with every input
        of row ``Rm[r]`` (for each r); the Hessian pattern gains ``Lᵀ·Rm`` and its transpose."""
        if L.nnz and Rm.nnz:
            if L is Rm:  # a pure term: LᵀL is symmetric already
                self.sym.append(L)
            else:
                self.left.append(L)
                self.right.append(Rm)

    def hessian_pattern(self):
        """The accumulated symmetric ``(n, n)`` boolean CSR pattern, canonical (sorted indices)."""
        sp = R.sparse()
        H = sp.csr_matrix((self.n, self.n), dtype=bool)
        if self.sym:
            S = sp.vstack(self.sym, format="csr")
            H = H + (S.T.tocsr() @ S)
        if self.left:
            L = sp.vstack(self.left, format="csr")
            Rm = sp.vstack(self.right, format="csr")
            A = (L.T.tocsr() @ Rm).tocsr()
            H = H + A + A.T.tocsr()
        H = H.tocsr()
        H.sum_duplicates()
        H.sort_indices()
        return H

    def wrap(self, value, rows):
        """``value`` as a PatternArray with ``rows`` if it is floating point, else as it is."""
        dt = getattr(value, "dtype", None)
        if type(value) is float:
            value = np.float64(value)
        elif dt is None or dt.kind != "f":
            return value
        return PatternArray(value, rows, self)

    def constant_rows(self, size):
        return R.empty_rows(size, self.n)


class PatternArray(ArrayOps):
    """A primal value with, per element, the set of inputs it depends on (see module docs).

    Made by :func:`mooncake_py.sparse.hessian_sparsity` and friends; use it like an ndarray.
    """
    __slots__ = ("_rows", "_stamp", "_trace", "_value")

    def __init__(self, value, rows, trace):
        self._value = value
        self._rows = rows
        self._trace = trace
        self._stamp = trace.writes

    def _mc_level(self):
        return self._trace.level

    @staticmethod
    def _mc_apply(top, fn, args, kwargs):
        return _apply(top._trace, fn, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return dispatch(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in LIKE_CONSTRUCTORS:
            return _like(self, func, args, kwargs)
        return dispatch(func, args, kwargs)

    @property
    def rows(self):
        """The dependency rows: a boolean ``(size, n_inputs)`` CSR matrix, C order."""
        return self._rows

    def __repr__(self):
        return (f"PatternArray(shape={tuple(np.shape(self._value))}, "
                f"dependencies={self._rows.nnz})")

    def _lost(self, what):
        v = self._value
        desc = (f"A value under sparsity detection (PatternArray of dtype {v.dtype}, shape "
                f"{tuple(np.shape(v))}) was {what}")
        if what is WRITTEN_INTO_PLAIN:
            return TrackingLostError(desc + ".")
        return TrackingLostError(
            f"{desc}, which would hide which inputs it depends on. Use np. functions on it "
            "(np.sin(x), not math.sin(x)); build arrays with np.stack, not np.array([x[0], ...]); "
            "create buffers with np.zeros_like(x, shape=...) or np.zeros(n, like=x).")

    def _mc_setitem(self, key, value):
        """``self[key] = value``: the written region takes the value's dependencies. A write
        through a view lands in the array it views (its *owner*); other views of that array
        catch up when next read (:func:`_check_fresh`)."""
        trace = self._trace
        p = self._value
        if not has_buffer(p):
            p[key] = value  # a NumPy scalar: NumPy's own error
        _check_fresh(self)
        if type(value) in _SEQ and any(_is_ours(b, trace) for b in value):
            value = np.stack(value)
        if _is_ours(value, trace):
            _check_fresh(value)
        root = buffer_root(p)
        owner = self if root is p else trace.owners.get(id(root))
        if owner is None:
            raise MutationError(
                "sparsity detection cannot write through this view: the array it views is not "
                "one that detection tracks (views of constants cannot hold dependencies). Write "
                "into an array made from the input (x.copy(), np.zeros_like(x)) instead.")
        region = _positions(root, p)[key]
        owner._rows = _written(trace, owner._rows, region, value)
        p[key] = value._value if _is_ours(value, trace) else value
        trace.writes += 1
        trace.owners[id(root)] = owner
        trace.last_write[id(root)] = (root, trace.writes)
        owner._stamp = trace.writes
        if owner is not self:
            self._rows = R.gather(owner._rows, _positions(root, p))
            self._stamp = trace.writes


def _positions(root, view):
    """For every element of ``view`` (a NumPy view of ``root``'s memory, or ``root`` itself), its
    flat C-order index in ``root``: the view's own layout applied to an index array laid out in
    memory as ``root`` is."""
    if view is root:
        return np.arange(root.size).reshape(root.shape)
    layout = np.empty_like(root, dtype=np.intp)  # root's memory order ("K")
    layout[...] = np.arange(root.size).reshape(root.shape)
    mem = layout.ravel(order="K")
    f = root.itemsize
    offset = (view.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // f
    return np.lib.stride_tricks.as_strided(
        mem[offset:], shape=view.shape, strides=tuple(st // f * mem.itemsize
                                                      for st in view.strides))


def _written(trace, rows, region, value):
    """``rows`` after the elements at flat positions ``region`` took ``value``'s rows."""
    size = rows.shape[0]
    pos = np.arange(size)
    if _is_ours(value, trace):
        vp = value._value
        pos[region] = np.arange(int(np.size(vp))).reshape(np.shape(vp)) + size
        table = R.sparse().vstack([rows, value._rows], format="csr")
    else:
        pos[region] = size
        table = R.sparse().vstack([rows, trace.constant_rows(1)], format="csr")
    return R.gather(table, pos)


WRAPPER_TYPES.add(PatternArray)


def _is_ours(a, trace):
    return type(a) is PatternArray and a._trace is trace


def _check_fresh(a):
    """Bring a view read after its buffer was written up to date from the buffer's owner."""
    trace = a._trace
    if trace.last_write and a._stamp < trace.writes:
        root = buffer_root(a._value)
        written = trace.last_write.get(id(root))
        if written is not None and written[1] > a._stamp:
            owner = trace.owners.get(id(root))
            if owner is None or owner is a:  # pragma: no cover  (every write registers one)
                raise MutationError("sparsity detection lost track of a written buffer.")
            a._rows = R.gather(owner._rows, _positions(root, a._value))
            a._stamp = trace.writes


def register_views(trace, out, args):
    """Record which PatternArray owns the buffer that the views in ``out`` look into, so that
    writes through them reach it."""
    for o in (out if isinstance(out, _SEQ) else (out,)):
        if type(o) is PatternArray and getattr(o._value, "base", None) is not None:
            root = buffer_root(o._value)
            if id(root) not in trace.owners:
                for a in patterns_in(args, trace):
                    if a._value is root:
                        trace.owners[id(root)] = a
                        break


def primal(a):
    """The primal value of a PatternArray (anything else as it is).

    Example:
        >>> t = Trace(2)
        >>> primal(PatternArray(np.ones(2), R.identity_rows(2), t)), primal(3.0)
        (array([1., 1.]), 3.0)
    """
    return a._value if type(a) is PatternArray else a


def primals(args):
    """``args`` with PatternArrays (also inside one level of lists/tuples) replaced by primals.

    Example:
        >>> p = PatternArray(np.zeros(1), R.identity_rows(1), Trace(1))
        >>> primals([p, (p, 2)])
        [array([0.]), (array([0.]), 2)]
    """
    out = []
    for a in args:
        if type(a) is PatternArray:
            out.append(a._value)
        elif type(a) in _SEQ:
            out.append(type(a)(primal(b) for b in a))
        else:
            out.append(a)
    return out


def _like(x, func, args, kwargs):
    """``np.zeros(shape, like=x)`` and friends: a buffer that depends on no input (``np.full``
    with a pattern fill value depends on the fill)."""
    trace = x._trace
    fill = None
    if func is np.full:
        if len(args) > 1 and _is_ours(args[1], trace):
            fill, args = args[1], (args[0], 0.0) + tuple(args[2:])
        elif _is_ours(kwargs.get("fill_value"), trace):
            fill, kwargs = kwargs["fill_value"], dict(kwargs, fill_value=0.0)
    out = call_like(func, args, kwargs, x._value)
    b = trace.wrap(out, trace.constant_rows(int(np.size(out))))
    if fill is not None:
        b[...] = fill
    return b


def _apply(trace, fn, args, kwargs):
    if kwargs:
        if "out" in kwargs:
            o = kwargs["out"]
            if o is not None and not (type(o) is tuple and all(u is None for u in o)):
                rest = {k: v for k, v in kwargs.items() if k not in ("out", "where")}
                r = _apply(trace, fn, args, rest)
                return write_out(o, r, kwargs.get("where", True),
                                 lambda ri: ri._lost(WRITTEN_INTO_PLAIN))
            kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        if any(_is_ours(v, trace) for v in kwargs.values()):
            args, kwargs = kwargs_to_positional(fn, args, kwargs,
                                                lambda v: _is_ours(v, trace), "pattern")
    if trace.last_write:
        for a in args:
            if _is_ours(a, trace):
                _check_fresh(a)
    rule = PATTERN_RULES.get(fn)
    if rule is not None:
        return rule(trace, fn, args, kwargs)
    impl = MUTATORS.get(fn) or COMPOSITES.get(fn)
    if impl is not None:
        return impl(*args, **kwargs)
    if fn in ZERO_DERIVATIVE:
        return _call(fn, primals(args), kwargs)
    if getattr(fn, "__mooncake_primitive__", False):
        try:  # a user primitive: its body, if written with np. calls, shows its pattern
            return fn.__wrapped__(*args, **kwargs)
        except TrackingLostError:
            pass
    if load_for(fn):  # a scipy.special ufunc: the table's section (and its rules) loads lazily
        return _apply(trace, fn, args, kwargs)
    return dense_fallback(trace, fn, args, kwargs)


def _call(fn, args, kwargs):
    if type(fn) is tuple:
        return getattr(fn[0], fn[1])(*args, **kwargs)
    return fn(*args, **kwargs)


def call_primal(fn, args, kwargs):
    """``fn`` called on the primal values of its arguments.

    Example:
        >>> p = PatternArray(np.ones(2), R.identity_rows(2), Trace(2))
        >>> call_primal(np.add, (p, 1.0), {})
        array([2., 2.])
    """
    return _call(fn, primals(args), {k: primal(v) for k, v in kwargs.items()})


def patterns_in(args, trace):
    """Every PatternArray of ``trace`` among ``args`` (and one level into lists/tuples).

    Example:
        >>> t = Trace(1)
        >>> p = PatternArray(np.ones(1), R.identity_rows(1), t)
        >>> len(patterns_in([p, [p, 1.0], np.ones(1)], t))
        2
    """
    found = []
    for a in args:
        if _is_ours(a, trace):
            found.append(a)
        elif type(a) in _SEQ:
            found.extend(b for b in a if _is_ours(b, trace))
    return found


def dense_fallback(trace, fn, args, kwargs, nonlinear=True, warn=True):
    """The conservative rule for an op with no pattern rule: every output element depends on
    every input any argument depends on, and (if ``nonlinear``) all of those inputs interact.

    Warns with :class:`DenseFallbackWarning` (Python shows it once per function), or raises
    :class:`MissingRuleError` when the trace is strict.

    Example (every output of an unknown op depends on inputs 0 and 1):
        >>> t = Trace(3)
        >>> p = PatternArray(np.ones(2), R.identity_rows(3)[:2], t)
        >>> y = dense_fallback(t, np.cumsum, (p,), {}, warn=False)
        >>> y.rows.toarray().astype(int)
        array([[1, 1, 0],
               [1, 1, 0]])
        >>> t.hessian_pattern().toarray().astype(int)
        array([[1, 1, 0],
               [1, 1, 0],
               [0, 0, 0]])
    """
    if warn:
        name = fn_name(fn)
        short = name.replace("numpy.", "np.")
        how = (f"Register a pattern rule: mooncake_py.sparse.pattern_rule({short})"
               " on a function rule(trace, fn, args, kwargs) -> output (see mooncake_py/sparse/"
               "pattern_rules.py for examples)")
        if trace.strict:
            raise MissingRuleError(
                f"sparsity detection has no pattern rule for {name} (strict mode). "
                f"{how}, or run detection with strict=False to assume that every output "
                "element depends on every input of its arguments. " +
                missing_rule_message(fn, args, kwargs, "forward").split(" Add one")[0])
        warnings.warn(
            f"sparsity detection has no pattern rule for {name}: assuming every output element "
            f"depends on every input of its arguments (correct, but possibly much denser than "
            f"necessary, so more colors). {how}.", DenseFallbackWarning, stacklevel=4)
    out = call_primal(fn, args, kwargs)
    found = patterns_in(list(args) + list(kwargs.values()), trace)
    U = R.any_row(R.union([R.any_row(p._rows) for p in found])) if found \
        else trace.constant_rows(1)
    if nonlinear:
        trace.add_pairs(U, U)

    def wrap(o):
        if isinstance(o, _SEQ):
            items = [wrap(v) for v in o]
            return type(o)(*items) if hasattr(o, "_fields") else type(o)(items)
        return trace.wrap(o, U[np.zeros(int(np.size(o)), dtype=np.intp)])
    return wrap(out)


def pattern_rule(fn):
    """Register a sparsity-detection rule for ``fn``.

    The rule is called as ``rule(trace, fn, args, kwargs)`` with the call's arguments as they
    are (PatternArrays included) and returns the output, float parts wrapped with
    ``trace.wrap(value, rows)``; a nonlinear rule reports its coupled inputs with
    ``trace.add_pairs(L, R)``.

    Example (a function that adds its two arguments elementwise):
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.sparse.tracer import pattern_rule, primal
        >>> @mp.primitive
        ... def plus(a, b):
        ...     return np.asarray(a) + np.asarray(b)
        >>> @pattern_rule(plus)
        ... def _(trace, fn, args, kwargs):
        ...     a, b = args
        ...     return trace.wrap(primal(a) + primal(b), a.rows + b.rows)
        >>> mp.jacobian_sparsity(lambda x: plus(x[:2], x[1:]), np.ones(3)).toarray().astype(int)
        array([[1, 1, 0],
               [0, 1, 1]])
    """
    def register(rule):
        PATTERN_RULES[fn] = rule
        return rule
    return register
