"""Sparse Jacobians and Hessians: detect the pattern, color it, evaluate compressed, decompress.

``sparse_hessian(f)(x)`` runs ``f`` once on a PatternArray (the Hessian pattern), star-colors
the pattern, pushes one seed direction per color through a single ``hvp(lanes=True)`` sweep and
reads every nonzero directly out of the compressed products. A banded 10⁵-dimensional Hessian
thus costs one sweep with a handful of lanes instead of 10⁵ directions.

The pattern is found for the control-flow path that ``f`` takes at ``x`` (comparisons and
``if`` statements see the true values); ``np.where`` takes both branches. A prepared cache reuses
the pattern and the coloring while ``f`` takes the path it was detected on: its sweeps replay
a recording under the guards of the other prepared caches (the branches ``f`` took, and by
identity the globals and closure variables it reads). When a guard fails the sweep records
``f`` again, and the pattern is detected again at that point: one that is not contained in the
cache's widens it (the union, colored again) and the call is evaluated on it, so a branch taken
at a new point never drops an entry. (A reverse-mode Jacobian cache detects the pattern again on
every call. A ``pattern=`` given by the caller is trusted: it is never detected again.)
"""
import functools

import numpy as np

from ..core.arguments import fname
from ..errors import NonDifferentiableInputError, OutputTypeError, TangentError
from ..replay.forward import DerivativeReplayer
from ..replay.outside import OutsideGuard
from ..replay.plans import Replayer
from ..transforms.caches import CacheSpec
from ..transforms.reverse import value_and_grad, vjp
from ..transforms.second_order import _chunk, _value_gradient_hvp
from ..transforms.transformed import Transformed
from . import rows as R
from .coloring import _adjacency, _pair_counts, column_coloring, row_coloring, star_coloring
from .tracer import PatternArray, Trace


def _check_input(f, x, what):
    dt = getattr(x, "dtype", None)
    if type(x) is float:
        return np.float64(x)
    if dt is None or dt.kind != "f":
        raise NonDifferentiableInputError(
            f"{what} of {fname(f)}: the first argument is a {type(x).__name__}"
            f"{'' if dt is None else f' of dtype {dt}'}; it must be a floating-point array (the "
            "variables); pass constants as further arguments.")
    return x


def _trace(f, x, args, strict):
    """Run ``f(x, *args)`` on a PatternArray: (trace, output)."""
    x = np.asarray(x)
    n = int(x.size)
    trace = Trace(n, strict=strict)
    px = PatternArray(np.array(x, copy=True), R.identity_rows(n), trace)
    return trace, f(px, *args)


def _output_rows(trace, y, f, what):
    if type(y) is PatternArray and y._trace is trace:
        return y._rows
    dt = getattr(y, "dtype", None)
    if type(y) is float or (dt is not None and dt.kind == "f"):
        return trace.constant_rows(int(np.size(y)))
    raise OutputTypeError(f"{what} needs {fname(f)} to return a floating-point array; it "
                          f"returned {type(y).__name__}.")


def jacobian_sparsity(f, x, *args, strict=False):
    """The Jacobian pattern of ``f`` at ``x``: a boolean ``(y.size, x.size)`` CSR matrix.

    ``f(x, *args)`` is differentiated in its first argument (other arguments are constants);
    ``x`` and ``y`` count in C order. Found by running ``f`` once on pattern values; an op with
    no pattern rule is taken as dense with a :class:`DenseFallbackWarning` (``strict=True``:
    :class:`~mooncake_py.errors.MissingRuleError` instead).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> P = mp.jacobian_sparsity(lambda x: x[1:] * x[:-1], np.ones(4))
        >>> P.toarray().astype(int)
        array([[1, 1, 0, 0],
               [0, 1, 1, 0],
               [0, 0, 1, 1]])
    """
    x = _check_input(f, x, "jacobian_sparsity")
    trace, y = _trace(f, x, args, strict)
    J = _output_rows(trace, y, f, "jacobian_sparsity").tocsr()
    J.sum_duplicates()
    J.sort_indices()
    return J


def hessian_sparsity(f, x, *args, strict=False):
    """The Hessian pattern of a scalar ``f`` at ``x``: a symmetric boolean ``(n, n)`` CSR matrix.

    A superset of the true nonzeros on the control-flow path taken at ``x``: every nonlinear
    operation met couples the inputs its operands depend on (structurally, from the derivative
    table), whether or not its result reaches the output. See :func:`jacobian_sparsity` for
    ``args`` and ``strict``.

    Example (a chained objective: tridiagonal):
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2)
        >>> mp.hessian_sparsity(f, np.ones(4)).toarray().astype(int)
        array([[1, 1, 0, 0],
               [1, 1, 1, 0],
               [0, 1, 1, 1],
               [0, 0, 1, 1]])
    """
    x = _check_input(f, x, "hessian_sparsity")
    trace, y = _trace(f, x, args, strict)
    if int(np.size(y)) != 1:
        raise OutputTypeError(f"hessian_sparsity needs {fname(f)} to return a scalar; it "
                              f"returned shape {tuple(np.shape(y))}.")
    _output_rows(trace, y, f, "hessian_sparsity")
    return trace.hessian_pattern()


# --- decompression plans ----------------------------------------------------------------------
def _seeds(colors, k, shape, dtype):
    """``(k,) + shape`` 0/1 directions: seed c is the indicator of the variables of color c."""
    S = np.zeros((k, colors.size), dtype=dtype)
    S[colors, np.arange(colors.size)] = 1
    return S.reshape((k,) + tuple(shape))


class _HessianPlan:
    """Pattern, star coloring and, for each stored entry, where to read it in ``HV`` (k, n)."""

    def __init__(self, pattern, order, algorithm):
        P = _adjacency(pattern)
        self.pattern = P
        self.n = P.shape[0]
        self.colors = star_coloring(P, order, algorithm) if self.n else np.zeros(0, np.int64)
        self.k = int(self.colors.max()) + 1 if self.n and P.nnz else 0
        if self.k:
            i, j, counts, kk = _pair_counts(P, self.colors)
            own = counts[i * kk + self.colors[j]] == 1
            other = counts[j * kk + self.colors[i]] == 1
            if not np.all(own | other):  # pragma: no cover  (a star coloring always passes)
                raise AssertionError("internal error: the coloring is not a star coloring")
            # H[i, j] = (H S)[i, c(j)] where j is alone in its color in row i, else its mirror.
            self.src = np.where(own, self.colors[j] * self.n + i, self.colors[i] * self.n + j)

    def decompress(self, HV):
        sp = R.sparse()
        P = self.pattern
        data = np.reshape(HV, (self.k, self.n)).ravel()[self.src] if self.k else \
            np.zeros(P.nnz, dtype=HV.dtype if HV is not None else np.float64)
        return sp.csr_array((data, P.indices.copy(), P.indptr.copy()), shape=P.shape)


class _JacobianPlan:
    """Pattern, column (forward) or row (reverse) coloring, and where each entry is read."""

    def __init__(self, pattern, mode, order):
        J = pattern.tocsr()
        J.sum_duplicates()
        J.sort_indices()
        self.pattern = J
        m, n = J.shape
        if mode == "auto":
            cf = column_coloring(J, order) if n else np.zeros(0, np.int64)
            cr = row_coloring(J, order) if m else np.zeros(0, np.int64)
            kf = int(cf.max()) + 1 if cf.size else 0
            kr = int(cr.max()) + 1 if cr.size else 0
            mode, colors = ("forward", cf) if kf <= kr else ("reverse", cr)
        elif mode == "forward":
            colors = column_coloring(J, order) if n else np.zeros(0, np.int64)
        elif mode == "reverse":
            colors = row_coloring(J, order) if m else np.zeros(0, np.int64)
        else:
            raise ValueError(f"sparse_jacobian: mode must be 'auto', 'forward' or 'reverse', "
                             f"not {mode!r}.")
        self.mode, self.colors = mode, colors
        self.k = int(colors.max()) + 1 if colors.size and J.nnz else 0
        i = np.repeat(np.arange(m), np.diff(J.indptr))
        j = J.indices
        # forward: (J S)[i, c(j)] stored as JV[c(j), i]; reverse: (Sᵀ J)[c(i), j]
        self.src = colors[j] * m + i if mode == "forward" else colors[i] * n + j

    def decompress(self, compressed, dtype):
        sp = R.sparse()
        J = self.pattern
        data = np.ravel(compressed)[self.src] if self.k else np.zeros(J.nnz, dtype=dtype)
        return sp.csr_array((data, J.indices.copy(), J.indptr.copy()), shape=J.shape)


# --- evaluation ------------------------------------------------------------------------------
def _hessian_sweeps(f, x, args, plan, chunk_size, replayers=None):
    """(value, gradient, HV of shape (k, n)) in sweeps of at most ``chunk_size`` colors; with
    ``replayers`` (a dict: lane count -> Replayer, a prepared cache's) each sweep replays, and
    the result's fourth item says whether every sweep did (``f`` took the recorded path)."""
    if not plan.k:
        y, g = value_and_grad(f)(x, *args)
        return y, g, None, False
    n = plan.n
    per = max(1, min(_chunk(n, x.dtype.itemsize, chunk_size), plan.k))
    HV = np.empty((plan.k, n), dtype=x.dtype)
    value = grad = None
    replayed = True
    for c0 in range(0, plan.k, per):
        cs = np.arange(c0, min(plan.k, c0 + per))
        V = (plan.colors[None, :] == cs[:, None]).astype(x.dtype).reshape(
            (cs.size,) + x.shape)
        rp = None
        if replayers is not None:
            rp = replayers.get(cs.size)
            if rp is None:
                rp = replayers[cs.size] = Replayer(dual=True, kind="sparse Hessian")
            before = rp.replays
        value, gs, hvs = _value_gradient_hvp(f, (0,), (x,) + tuple(args), (V,), True, {},
                                             replayer=rp)
        replayed = replayed and rp is not None and rp.replays > before
        grad = gs[0]
        HV[c0:c0 + cs.size] = np.reshape(hvs[0], (cs.size, n))
    return value, grad, HV, replayed


def _scalar_output_check(f, y):
    if int(np.size(y)) != 1:
        raise OutputTypeError(f"sparse_hessian needs {fname(f)} to return a scalar; it returned "
                              f"shape {tuple(np.shape(y))}.")


class _ColoredCache:
    """The spec of the prepared call and its colored plan, whose pattern and coloring the
    sparse caches expose read-only. ``detect`` holds how to detect the pattern again (a
    function of ``x`` and the arguments) when it was detected, None when the caller gave it.
    The replay state (and the guard on ``f``'s globals and closure variables) is not pickled:
    the first call after loading records again."""

    def __init__(self, kind, f, args, plan, detect=None):
        self.spec = CacheSpec(kind, f, args)
        self.plan = plan
        self._detect = detect
        self._start()

    def _start(self):
        self._replayers = {}
        self._outside = OutsideGuard(self.spec.f)

    def _checked(self):
        """Start the replay afresh when a global or closure variable of ``f`` was rebound."""
        if not self._outside.holds():
            self._start()

    def _widened(self, x, args):
        """Detect the pattern again at ``x`` (after ``f`` was recorded on another path); when
        it is not contained in the cache's, widen the cache's to the union. True if widened."""
        if self._detect is None:
            return False
        new = R.sparse().csr_matrix(self._detect(x, args), dtype=bool)
        old = self.plan.pattern
        if (new > R.sparse().csr_matrix(old, dtype=bool)).nnz == 0:
            return False
        self.plan = self._replan((new + old).astype(bool))
        self._replayers = {}
        return True

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_replayers", None)
        state.pop("_outside", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_detect", None)
        self._start()

    @property
    def pattern(self):
        return self.plan.pattern

    @property
    def colors(self):
        return self.plan.colors

    @property
    def n_colors(self):
        return self.plan.k


class SparseHessianCache(_ColoredCache):
    """Prepared by :func:`prepare_sparse_hessian_cache`: the function and argument spec, the
    Hessian pattern (``.pattern``), its star coloring (``.colors``, ``.n_colors``)."""

    def __init__(self, f, args, plan, chunk_size, detect=None, coloring=("largest_first",
                                                                          "stars")):
        super().__init__("sparse_hessian", f, args, plan, detect)
        self.chunk_size = chunk_size
        self._coloring = coloring

    def _replan(self, pattern):
        return _HessianPlan(pattern, *self._coloring)

    def seeds(self, dtype=np.float64):
        """The ``(n_colors, n)`` 0/1 directions whose HVPs hold the Hessian: row ``c`` is the
        indicator of the variables of color ``c``. With ``HV`` their products (``H @ seeds.T``
        transposed, computed anywhere: in sweeps, on other processes), :meth:`decompress`
        rebuilds H.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> f = lambda x: np.sum(x[1:] * x[:-1])
            >>> c = mp.prepare_sparse_hessian_cache(f, np.ones(4))
            >>> S = c.seeds()
            >>> HV = np.stack([mp.hvp(f)(np.ones(4), s) for s in S])
            >>> bool(np.array_equal(c.decompress(HV).toarray(), mp.hessian(f)(np.ones(4))))
            True
        """
        return _seeds(self.plan.colors, self.plan.k, (self.plan.n,), dtype)

    def decompress(self, HV):
        """The Hessian, a ``scipy.sparse.csr_array`` on the cache's pattern, from the products
        ``HV`` (shape ``(n_colors, n)``) of the Hessian with :meth:`seeds`. Example:
        :meth:`seeds`."""
        HV = np.asarray(HV)
        if HV.shape != (self.plan.k, self.plan.n):
            raise TangentError(f"decompress takes the products with the {self.plan.k} seeds, "
                               f"shape ({self.plan.k}, {self.plan.n}), not {HV.shape}.")
        return self.plan.decompress(HV)

    def __repr__(self):
        n, nnz = self.plan.n, self.plan.pattern.nnz
        return (f"SparseHessianCache({fname(self.spec.f)}, n={n}, nnz={nnz}, "
                f"colors={self.plan.k})")


def prepare_sparse_hessian_cache(f, x, *args, pattern=None, strict=False, order="largest_first",
                                 coloring="stars", chunk_size=None):
    """Detect the Hessian pattern of ``f(x, *args)`` at ``x`` and star-color it, for reuse.

    ``pattern`` (any ``(n, n)`` scipy sparse or boolean array) skips detection: give a known
    pattern, or a superset of it. ``order`` is the coloring's vertex order ("largest_first",
    "natural" or a permutation); ``coloring`` its algorithm: "stars" (O(n·d²) for maximum degree
    d, the default), "simple" (O(n·d³), sometimes fewer colors on irregular patterns) or
    "best" (both, the fewer colors kept; see
    :func:`~mooncake_py.sparse.coloring.star_coloring`). ``chunk_size`` caps the colors per
    sweep (default: as :func:`mooncake_py.hessian` chooses). Then
    :func:`value_gradient_and_sparse_hessian` costs one forward-over-reverse sweep with
    ``n_colors`` lanes. The cache checks the function and the arguments' shapes and dtypes on
    every call; the pattern is reused as found at preparation (see the module notes on control
    flow).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2)
        >>> c = mp.prepare_sparse_hessian_cache(f, np.ones(1000))
        >>> c.n_colors
        3
        >>> y, g, H = mp.value_gradient_and_sparse_hessian(c, f, np.ones(1000))
        >>> H.shape, H.nnz
        ((1000, 1000), 2998)
        >>> H[:3, :3].toarray()
        array([[ 8., -4.,  0.],
               [-4., 10., -4.],
               [ 0., -4., 10.]])
    """
    x = _check_input(f, x, "prepare_sparse_hessian_cache")
    detect = None
    if pattern is None:
        pattern = hessian_sparsity(f, x, *args, strict=strict)
        detect = functools.partial(_detect_hessian, f, strict)
    elif tuple(np.shape(pattern)) != (int(np.size(x)),) * 2:
        raise TangentError(f"prepare_sparse_hessian_cache: pattern has shape "
                           f"{tuple(np.shape(pattern))}; x has {int(np.size(x))} elements, so it "
                           f"must be ({int(np.size(x))}, {int(np.size(x))}).")
    return SparseHessianCache(f, (x,) + args, _HessianPlan(pattern, order, coloring), chunk_size,
                              detect, (order, coloring))


def _detect_hessian(f, strict, x, args):
    return hessian_sparsity(f, x, *args, strict=strict)


def value_gradient_and_sparse_hessian(cache, f, x, *args):
    """``(f(x, *args), ∇f, H)`` with H a ``scipy.sparse.csr_array`` on the prepared pattern
    (``x`` flattened in C order); see :func:`prepare_sparse_hessian_cache`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(x[1:] * x[:-1] ** 2)
        >>> c = mp.prepare_sparse_hessian_cache(f, np.ones(4))
        >>> y, g, H = mp.value_gradient_and_sparse_hessian(c, f, np.arange(1.0, 5.0))
        >>> float(y), H.nnz, H.toarray()[1]
        (50.0, 9, array([2., 6., 4., 0.]))
    """
    x = _check_input(f, x, "value_gradient_and_sparse_hessian")
    cache.spec.check(f, (x,) + args)
    cache._checked()
    y, g, HV, replayed = _hessian_sweeps(f, x, args, cache.plan, cache.chunk_size,
                                         cache._replayers)
    _scalar_output_check(f, y)
    if not replayed and cache._widened(x, args):  # (f took a path of a wider pattern)
        y, g, HV, _ = _hessian_sweeps(f, x, args, cache.plan, cache.chunk_size,
                                      cache._replayers)
    return y, g, cache.plan.decompress(HV)


def sparse_hessian(f, *, strict=False, order="largest_first", coloring="stars", chunk_size=None):
    """The Hessian of a scalar ``f``, a ``scipy.sparse.csr_array``: ``sparse_hessian(f)(x, *args)``.

    Detects the pattern at ``x``, star-colors it and evaluates it in one ``hvp(lanes=True)`` sweep
    with one lane per color. To differentiate many times at points where ``f`` takes the same
    control-flow path, prepare once with :func:`prepare_sparse_hessian_cache`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(x[0] * x ** 2)             # an arrowhead
        >>> mp.sparse_hessian(f)(np.array([1.0, 2.0, 3.0])).toarray()
        array([[6., 4., 6.],
               [4., 2., 0.],
               [6., 0., 2.]])
    """
    def sparse_hessian_f(x, *args):
        c = prepare_sparse_hessian_cache(f, x, *args, strict=strict, order=order,
                                         coloring=coloring, chunk_size=chunk_size)
        return value_gradient_and_sparse_hessian(c, f, x, *args)[2]
    return Transformed(sparse_hessian_f, functools.partial(
        sparse_hessian, strict=strict, order=order, coloring=coloring, chunk_size=chunk_size),
        (f,), f)


class SparseJacobianCache(_ColoredCache):
    """Prepared by :func:`prepare_sparse_jacobian_cache`: the spec, the Jacobian pattern
    (``.pattern``), the mode ("forward": columns colored; "reverse": rows) and ``.colors``."""

    def __init__(self, f, args, plan, out_shape, detect=None, order="largest_first"):
        super().__init__("sparse_jacobian", f, args, plan, detect)
        self.out_shape = out_shape
        self._order = order

    def _replan(self, pattern):
        return _JacobianPlan(pattern, self.plan.mode, getattr(self, "_order", "largest_first"))

    @property
    def mode(self):
        return self.plan.mode

    def __repr__(self):
        return (f"SparseJacobianCache({fname(self.spec.f)}, shape={self.plan.pattern.shape}, "
                f"nnz={self.plan.pattern.nnz}, mode={self.plan.mode!r}, colors={self.plan.k})")


def prepare_sparse_jacobian_cache(f, x, *args, mode="auto", pattern=None, strict=False,
                                  order="largest_first"):
    """Detect and color the Jacobian pattern of ``f(x, *args)`` at ``x``, for reuse.

    ``mode="forward"`` colors columns (one ``jvp(lanes=True)`` sweep, a lane per color),
    ``"reverse"`` colors rows (one recording, a pullback per color), ``"auto"`` takes the one
    with fewer colors. ``pattern`` (``(y.size, x.size)``) skips detection.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sin(x[1:]) * x[:-1]
        >>> c = mp.prepare_sparse_jacobian_cache(f, np.zeros(6), mode="forward")
        >>> c.n_colors
        2
        >>> y, J = mp.value_and_sparse_jacobian(c, f, np.ones(6))
        >>> J.shape, J.nnz
        ((5, 6), 10)
    """
    x = _check_input(f, x, "prepare_sparse_jacobian_cache")
    out_shape = None
    detect = None
    if pattern is None:
        detect = functools.partial(_detect_jacobian, f, strict)
        trace, y = _trace(f, x, args, strict)
        pattern = _output_rows(trace, y, f, "prepare_sparse_jacobian_cache")
        out_shape = tuple(np.shape(y))
    pattern = R.sparse().csr_matrix(pattern, dtype=bool)
    if pattern.shape[1] != int(np.size(x)):
        raise TangentError(f"prepare_sparse_jacobian_cache: pattern has {pattern.shape[1]} "
                           f"columns; x has {int(np.size(x))} elements.")
    return SparseJacobianCache(f, (x,) + args, _JacobianPlan(pattern, mode, order), out_shape,
                               detect, order)


def _detect_jacobian(f, strict, x, args):
    trace, y = _trace(f, x, args, strict)
    return _output_rows(trace, y, f, "value_and_sparse_jacobian")


def value_and_sparse_jacobian(cache, f, x, *args):
    """``(f(x, *args), J)`` with J a ``(y.size, x.size)`` ``scipy.sparse.csr_array`` on the
    prepared pattern; see :func:`prepare_sparse_jacobian_cache`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> h = lambda x: x[1:] * x[:-1]
        >>> c = mp.prepare_sparse_jacobian_cache(h, np.ones(4))
        >>> y, J = mp.value_and_sparse_jacobian(c, h, np.arange(1.0, 5.0))
        >>> J.toarray()
        array([[2., 1., 0., 0.],
               [0., 3., 2., 0.],
               [0., 0., 4., 3.]])
    """
    x = _check_input(f, x, "value_and_sparse_jacobian")
    cache.spec.check(f, (x,) + args)
    cache._checked()
    y, compressed, replayed = _jacobian_sweep(cache, f, x, args)
    if not replayed and cache._widened(x, args):  # (f took a path of a wider pattern)
        y, compressed, _ = _jacobian_sweep(cache, f, x, args)
    plan = cache.plan
    if plan.k and int(np.size(y)) != plan.pattern.shape[0]:
        raise OutputTypeError(f"value_and_sparse_jacobian: {fname(f)} returned {int(np.size(y))} "
                              f"elements; the cache was prepared for {plan.pattern.shape[0]}.")
    return y, plan.decompress(compressed, x.dtype)


def _jacobian_sweep(cache, f, x, args):
    """(y, the compressed Jacobian, whether a recording was replayed) on the cache's plan:
    forward mode replays a derivative plan (lanes, one per color); reverse mode records."""
    plan = cache.plan
    m, _n = plan.pattern.shape
    if not plan.k:
        return f(x, *args), None, False
    if plan.mode == "forward":
        V = _seeds(plan.colors, plan.k, x.shape, x.dtype)
        rp = cache._replayers.get(plan.k)
        if rp is None:
            rp = cache._replayers[plan.k] = DerivativeReplayer()
        before = rp.replays
        y, dY = rp.call(f, (x,) + tuple(args), (V,) + (None,) * len(args), plan.k)
        return y, np.reshape(dY, (plan.k, -1)), rp.replays > before
    else:
        y, pullback = vjp(lambda xx: f(xx, *args), x)
        yshape = tuple(np.shape(y))
        seeds = _seeds(plan.colors, plan.k, (m,), np.result_type(y))
        compressed = np.stack([np.reshape(pullback(np.reshape(s, yshape))[0], -1)
                               for s in seeds])
    return y, compressed, False


def sparse_jacobian(f, *, mode="auto", strict=False, order="largest_first"):
    """The Jacobian of ``f`` as a ``(y.size, x.size)`` ``scipy.sparse.csr_array``:
    ``sparse_jacobian(f)(x, *args)`` (x and y flattened in C order).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> J = mp.sparse_jacobian(lambda x: x[1:] ** 2 - x[:-1])(np.array([1.0, 2.0, 3.0]))
        >>> J.toarray()
        array([[-1.,  4.,  0.],
               [ 0., -1.,  6.]])
    """
    def sparse_jacobian_f(x, *args):
        c = prepare_sparse_jacobian_cache(f, x, *args, mode=mode, strict=strict, order=order)
        return value_and_sparse_jacobian(c, f, x, *args)[1]
    return Transformed(sparse_jacobian_f, functools.partial(
        sparse_jacobian, mode=mode, strict=strict, order=order), (f,), f)
