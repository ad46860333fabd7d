"""Checks for rule authors: ``test_rule`` for one function's rules, ``check_grads`` for a whole
function's gradient. Both compare against central finite differences on random directions;
``fd_gradient`` is the whole finite-difference gradient, one coordinate at a time.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.testing import test_rule
    >>> test_rule(np.tanh, np.linspace(-1, 1, 5))   # raises AssertionError on a wrong rule
"""
import copy

import numpy as np

from .core.arguments import is_float_leaf
from .core.pytree import flatten
from .dual import DualArray, Tag
from .transforms.forward import jvp
from .transforms.reverse import grad, vjp

_STEPS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)


def fd_gradient(f, x, eps=1e-6):
    """The central finite-difference gradient of a scalar ``f`` at a float array ``x``, one
    coordinate at a time: ``(f(x + eps e_i) - f(x - eps e_i)) / (2 eps)`` (2·x.size calls).

    Example:
        >>> import numpy as np
        >>> g = fd_gradient(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]))
        >>> np.allclose(g, [3.0, 12.0])
        True
    """
    x = np.asarray(x)
    g = np.zeros(x.shape)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def _strided(x):
    """The same values as ``x`` in a non-contiguous array (every other element of a buffer)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0 or x.dtype.kind not in "fc":
        return x
    buf = np.empty(x.shape + (2,), dtype=x.dtype)
    view = buf[..., 0]
    view[...] = x
    return view


def _float_positions(leaves):
    return [i for i, l in enumerate(leaves) if is_float_leaf(l)]


def _perturbed(tree, leaves, pos, dirs, h):
    new = list(leaves)
    for i, d in zip(pos, dirs):
        new[i] = leaves[i] + h * d
    return tree.unflatten(new)


def _inner(a, b):
    """``Re Σ conj(a)·b``: the real inner product, C treated as R²."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        return float(np.real(np.sum(np.conjugate(a.astype(np.complex128)) *
                                    b.astype(np.complex128))))
    return float(np.sum(a.astype(np.float64) * b.astype(np.float64)))


def _normal(shape, like, rng):
    """Standard normal numbers of ``shape``: complex ones (real and imaginary parts each
    standard normal) where ``like`` is complex, so that every real coordinate is perturbed."""
    d = rng.standard_normal(shape)
    if getattr(like, "dtype", None) is not None and like.dtype.kind == "c" or \
            type(like) is complex:
        d = d + 1j * rng.standard_normal(shape)
    return d


def _sq(d):
    return np.abs(d) ** 2


def _real_vector(o):
    """A value as a float64 vector over R: real and imaginary parts for a complex one."""
    a = np.asarray(o)
    if a.dtype.kind == "c":
        return np.concatenate([np.ravel(a.real).astype(np.float64),
                               np.ravel(a.imag).astype(np.float64)])
    return np.ravel(a.astype(np.float64))


def _fd_best(phi, analytic, rtol, atol):
    """Central differences over several steps; the estimate closest to ``analytic``."""
    best = None
    for h in _STEPS:
        est = (phi(h) - phi(-h)) / (2 * h)
        err = abs(est - analytic)
        if best is None or err < best[1]:
            best = (est, err)
    est, err = best
    return est, err <= atol + rtol * max(abs(est), abs(analytic))


def _tolerances(leaves, rtol, atol):
    low = any(getattr(l, "dtype", np.float64) in (np.float32, np.float16, np.complex64)
              for l in leaves)
    return (rtol if rtol is not None else (2e-2 if low else 1e-5),
            atol if atol is not None else (1e-3 if low else 1e-7))


def _describe(fn):
    return getattr(fn, "__name__", None) or repr(fn)


def _setup(fn, args, kwargs, rtol, atol):
    """``(f, leaves, tree, float positions, rtol, atol)`` for checking ``fn`` on ``args``."""
    f = (lambda *a: fn(*a, **kwargs))
    leaves, tree = flatten(args)
    pos = _float_positions(leaves)
    if not pos:
        raise AssertionError(f"test_rule({_describe(fn)}): no floating-point argument to check.")
    rtol, atol = _tolerances([leaves[i] for i in pos], rtol, atol)
    return f, leaves, tree, pos, rtol, atol


def _random_cotangent(y, rng):
    """A random cotangent for output ``y``: ``(leaves, treedef)`` (zeros for non-float leaves)."""
    outs, otree = flatten(y)
    ybar = [_normal(np.shape(o), o, rng).astype(getattr(o, "dtype", np.result_type(o)))
            if is_float_leaf(o) else np.zeros(np.shape(o)) for o in outs]
    if not isinstance(y, (tuple, list, dict)) and np.ndim(y) == 0:
        ybar = [np.asarray(ybar[0]).astype(getattr(outs[0], "dtype",
                                                  np.result_type(outs[0])))[()]]
    return ybar, otree


def _assert_unmutated(fn, args, before, rule):
    for a, b in zip(flatten(args)[0], flatten(before)[0]):
        if isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True):
            raise AssertionError(f"test_rule({_describe(fn)}): the {rule} mutated an input.")


def _check_rrule(fn, args, kwargs, rtol, atol, ndirs, rng):
    f, leaves, tree, pos, rtol, atol = _setup(fn, args, kwargs, rtol, atol)
    before = copy.deepcopy(args)
    y_plain = f(*args)
    y, pullback = vjp(f, *args)
    _assert_same_output(fn, y, y_plain)
    _assert_unmutated(fn, args, before, "rule")
    ybar, otree = _random_cotangent(y, rng)
    cots = pullback(otree.unflatten(ybar))
    cot_by_arg = _cotangents_by_leaf(args, cots)
    for _ in range(ndirs):
        dirs = [_normal(np.shape(leaves[i]), leaves[i], rng) for i in pos]
        norm = np.sqrt(sum(np.sum(_sq(d)) for d in dirs)) or 1.0
        dirs = [d / norm for d in dirs]
        analytic = sum(_inner(cot_by_arg[i], d) for i, d in zip(pos, dirs)
                       if cot_by_arg[i] is not None)

        def phi(h, dirs=dirs):
            yh = f(*_perturbed(tree, leaves, pos, dirs, h))
            return sum(_inner(b, o) for b, o in zip(ybar, flatten(yh)[0]) if is_float_leaf(o))
        est, ok = _fd_best(phi, analytic, rtol, atol)
        if not ok:
            raise AssertionError(
                f"test_rule({_describe(fn)}): reverse rule disagrees with finite differences: "
                f"<ȳ, J·ẋ> by finite differences = {est!r}, <Jᵀ·ȳ, ẋ> from the pullback = "
                f"{analytic!r} (rtol={rtol}, atol={atol}).")


def _cotangents_by_leaf(args, cots):
    """Cotangents aligned with ``flatten(args)`` leaves (None where there is none)."""
    out = []
    for a, c in zip(args, cots):
        la = flatten(a)[0]
        lc = [None] * len(la) if c is None else flatten(c)[0]
        if len(lc) != len(la):
            raise AssertionError("the pullback's cotangent structure does not match the arguments")
        out.extend(lc)
    return out


def _assert_same_output(fn, y, y_plain):
    a, ta = flatten(y)
    b, tb = flatten(y_plain)
    if ta != tb:
        raise AssertionError(f"test_rule({_describe(fn)}): output structure {ta!r} differs from "
                             f"NumPy's {tb!r}.")
    for u, v in zip(a, b):
        if np.shape(u) != np.shape(v):
            raise AssertionError(f"test_rule({_describe(fn)}): output shape {np.shape(u)} differs "
                                 f"from NumPy's {np.shape(v)}.")
        du, dv = getattr(u, "dtype", None), getattr(v, "dtype", None)
        if du is not None and dv is not None and du != dv:
            raise AssertionError(f"test_rule({_describe(fn)}): output dtype {du} differs from "
                                 f"NumPy's {dv}.")
        if not np.allclose(u, v, rtol=1e-12, atol=0, equal_nan=True):
            raise AssertionError(f"test_rule({_describe(fn)}): output values differ from NumPy's.")


MODES = ("reverse", "forward", "forward_over_reverse")


def test_rule(fn, *args, rtol=None, atol=None, ndirs=3, seed=0, noncontiguous=True,
              modes=("reverse", "forward", "forward_over_reverse"), **kwargs):
    """Check ``fn``'s rules on ``args`` (with ``kwargs`` passed through to ``fn``).

    Checks that the primal output equals plain NumPy's (values, shape, dtype), that inputs are
    not mutated, and, per mode in ``modes``:

    - ``"reverse"``: the rrule agrees with central finite differences: ``<ȳ, J·ẋ>`` (finite
      differences over several step sizes) equals ``<Jᵀ·ȳ, ẋ>`` (pullback) on random ``ȳ`` and
      random unit ``ẋ``;
    - ``"forward"``: the frule's ``J·ẋ`` agrees with central finite differences on random
      directions, with one direction and with k = 3 lanes at once, and (if ``"reverse"`` is also
      checked) is consistent with the pullback: ``<ȳ, J·ẋ> = <Jᵀ·ȳ, ẋ>``;
    - ``"forward_over_reverse"``: the pullback run on dual numbers (what ``hvp`` does) gives the
      directional derivative of ``Jᵀ·ȳ`` that finite differences of the pullback give. This
      catches pullbacks not written with differentiable ``np.`` calls.

    With ``noncontiguous=True`` every array argument is also checked as a strided
    (non-contiguous) copy. Raises AssertionError on a failure. Use float64 inputs: float32 gets
    loose tolerances. Complex arguments and outputs are checked on C treated as R²: directions
    and cotangents are complex, finite differences move real and imaginary parts together, and
    inner products are ``Re Σ conj(a)·b``.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.testing import test_rule
        >>> test_rule(np.multiply, np.ones((2, 3)), np.arange(3.0))   # broadcasting included
        >>> test_rule(np.tanh, np.linspace(-1, 1, 4), modes=("reverse", "forward"))
    """
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    for m in modes:
        if m not in MODES:
            raise ValueError(f"test_rule: unknown mode {m!r}; choose from {MODES}.")
    rng = np.random.default_rng(seed)
    variants = [args]
    if noncontiguous and any(isinstance(a, np.ndarray) and a.ndim for a in flatten(args)[0]):
        leaves, tree = flatten(args)
        variants.append(tree.unflatten([_strided(a) for a in leaves]))
    for a in variants:
        if "reverse" in modes:
            _check_rrule(fn, a, kwargs, rtol, atol, ndirs, rng)
        if "forward" in modes:
            _check_frule(fn, a, kwargs, rtol, atol, rng, consistency="reverse" in modes)
        if "forward_over_reverse" in modes:
            _check_forward_over_reverse(fn, a, kwargs, rtol, atol, rng)


test_rule.__test__ = False  # not a pytest test despite its name


def _random_like(x, lanes, rng):
    """A random direction for float leaf ``x`` (unit norm per lane), in ``x``'s dtype."""
    shape = tuple(np.shape(x))
    dt = getattr(x, "dtype", np.result_type(x))
    d = _normal(((lanes,) if lanes else ()) + shape, x, rng)
    norm = np.sqrt(np.sum(_sq(d), axis=tuple(range(1 if lanes else 0, d.ndim)), keepdims=True))
    return (d / np.where(norm == 0, 1.0, norm)).astype(dt)


def _flat_floats(tree_obj):
    """The float leaves of an output, concatenated into one float64 vector."""
    return np.concatenate([_real_vector(o) for o in flatten(tree_obj)[0] if is_float_leaf(o)]
                          or [np.zeros(0)])


def _fd_vector(phi, analytic, rtol, atol):
    """Central differences of a vector function over several steps; the estimate closest to
    ``analytic`` and whether it is within tolerance (norm-wise)."""
    best = None
    for h in _STEPS:
        est = (phi(h) - phi(-h)) / (2 * h)
        err = float(np.linalg.norm(est - analytic))
        if best is None or err < best[1]:
            best = (est, err)
    est, err = best
    scale = max(float(np.linalg.norm(est)), float(np.linalg.norm(analytic)))
    return est, err, err <= atol * np.sqrt(max(est.size, 1)) + rtol * scale


def _lane(t, l, lanes):
    return t if not lanes or t is None else t[l]


def _check_frule(fn, args, kwargs, rtol, atol, rng, consistency):
    f, leaves, tree, pos, rtol, atol = _setup(fn, args, kwargs, rtol, atol)
    before = copy.deepcopy(args)
    y_plain = f(*args)
    ybar = None
    if consistency:
        y0, pullback = vjp(f, *args)
        ybar, otree = _random_cotangent(y0, rng)
        cot_by_leaf = _cotangents_by_leaf(args, pullback(otree.unflatten(ybar)))
    for lanes in (0, 3):
        dirs = {i: _random_like(leaves[i], lanes, rng) for i in pos}
        tangents = tree.unflatten([dirs.get(i) for i in range(len(leaves))])
        y, ydot = jvp(f, args, tangents, lanes=bool(lanes))
        _assert_same_output(fn, y, y_plain)
        _assert_unmutated(fn, args, before, "frule")
        outs = flatten(y)[0]
        douts = flatten(ydot)[0] if flatten(ydot)[1] == flatten(y)[1] else None
        if douts is None:
            raise AssertionError(f"test_rule({_describe(fn)}): the tangent's structure differs "
                                 "from the output's.")
        for o, d in zip(outs, douts):
            if not is_float_leaf(o):
                continue
            want = ((lanes,) if lanes else ()) + tuple(np.shape(o))
            if tuple(np.shape(d)) != want or getattr(d, "dtype", None) != getattr(o, "dtype", None):
                raise AssertionError(
                    f"test_rule({_describe(fn)}): the frule's tangent has shape "
                    f"{tuple(np.shape(d))} and dtype {getattr(d, 'dtype', None)}; expected {want} "
                    f"and the output's dtype {getattr(o, 'dtype', None)}.")
        for l in range(lanes or 1):
            dl = [_lane(dirs[i], l, lanes) for i in pos]
            analytic = np.concatenate([_real_vector(_lane(d, l, lanes))
                                       for o, d in zip(outs, douts) if is_float_leaf(o)]
                                      or [np.zeros(0)])

            def phi(h, dl=dl):
                return _flat_floats(f(*_perturbed(tree, leaves, pos, dl, h)))
            est, err, ok = _fd_vector(phi, analytic, rtol, atol)
            if not ok:
                raise AssertionError(
                    f"test_rule({_describe(fn)}): forward rule disagrees with finite differences"
                    f"{f' (lane {l} of {lanes})' if lanes else ''}: |J·ẋ (frule) - finite "
                    f"differences| = {err:.3g}, |finite differences| = "
                    f"{np.linalg.norm(est):.3g} (rtol={rtol}, atol={atol}).")
            if consistency:
                fwd = sum(_inner(b, _lane(d, l, lanes)) for b, o, d in zip(ybar, outs, douts)
                          if is_float_leaf(o))
                rev = sum(_inner(cot_by_leaf[i], d) for i, d in zip(pos, dl)
                          if cot_by_leaf[i] is not None)
                scale = (sum(float(np.sum(np.abs(np.asarray(b) *
                                                 np.asarray(_lane(d, l, lanes)))))
                             for b, o, d in zip(ybar, outs, douts) if is_float_leaf(o)) + 1e-300)
                tol = 1e-4 if rtol > 1e-4 else 1e-9
                if abs(fwd - rev) > tol * scale + atol:
                    raise AssertionError(
                        f"test_rule({_describe(fn)}): forward and reverse rules are inconsistent: "
                        f"<ȳ, J·ẋ> from the frule = {fwd!r}, <Jᵀ·ȳ, ẋ> from the rrule = {rev!r}.")


def _check_forward_over_reverse(fn, args, kwargs, rtol, atol, rng):
    f, leaves, tree, pos, rtol, atol = _setup(fn, args, kwargs, rtol, atol)
    ybar, otree = _random_cotangent(f(*args), rng)
    seed = otree.unflatten(ybar)
    dirs = [_random_like(leaves[i], 0, rng) for i in pos]

    def cotangents(vals):
        _, pb = vjp(f, *vals)
        cots = _cotangents_by_leaf(vals, pb(seed))
        return [cots[i] for i in pos]

    tag = Tag(0)
    dual_leaves = list(leaves)
    for i, d in zip(pos, dirs):
        x = np.float64(leaves[i]) if type(leaves[i]) is float else \
            np.complex128(leaves[i]) if type(leaves[i]) is complex else leaves[i]
        dual_leaves[i] = DualArray(x, d, tag)
    got = cotangents(tree.unflatten(dual_leaves))
    analytic = np.concatenate([
        _real_vector(_as_leaf_kind(c._tangent if type(c) is DualArray and c._tag is tag
                                   else np.zeros(np.shape(leaves[i])), leaves[i]))
        for i, c in zip(pos, got)])

    def phi(h):
        cs = cotangents(_perturbed(tree, leaves, pos, dirs, h))
        return np.concatenate([_real_vector(_as_leaf_kind(
            (0.0 if c is None else np.asarray(c)) * np.ones(np.shape(leaves[i])), leaves[i]))
            for i, c in zip(pos, cs)])
    est, err, ok = _fd_vector(phi, analytic, rtol, atol)
    if not ok:
        raise AssertionError(
            f"test_rule({_describe(fn)}): the pullback run on dual numbers (forward-over-reverse, "
            f"as hvp does) disagrees with finite differences of the pullback: error {err:.3g}, "
            f"|finite differences| = {np.linalg.norm(est):.3g} (rtol={rtol}, atol={atol}).")


def _as_leaf_kind(v, leaf):
    """``v`` as complex where ``leaf`` is complex (so both sides have the same R coordinates)."""
    if type(leaf) is complex or getattr(getattr(leaf, "dtype", None), "kind", "") == "c":
        return np.asarray(v, dtype=np.complex128)
    return v


def check_grads(f, *args, rtol=None, atol=None, ndirs=3, seed=0):
    """Check ``mp.grad(f)`` with respect to every float argument against finite differences.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.testing import check_grads
        >>> check_grads(lambda x, y: np.sum(np.sin(x) * y), np.ones(3), 2.0)
    """
    rng = np.random.default_rng(seed)
    nums = tuple(i for i, a in enumerate(args) if any(map(is_float_leaf, flatten(a)[0])))
    gs = grad(f, argnums=nums)(*args)
    leaves, tree = flatten(args)
    pos = _float_positions(leaves)
    rtol, atol = _tolerances([leaves[i] for i in pos], rtol, atol)
    full = [None] * len(args)
    for i, g in zip(nums, gs):
        full[i] = g
    g_by_leaf = _cotangents_by_leaf(args, full)
    for _ in range(ndirs):
        dirs = [_normal(np.shape(leaves[i]), leaves[i], rng) for i in pos]
        norm = np.sqrt(sum(np.sum(_sq(d)) for d in dirs)) or 1.0
        dirs = [d / norm for d in dirs]
        analytic = sum(_inner(g_by_leaf[i], d) for i, d in zip(pos, dirs)
                       if g_by_leaf[i] is not None)
        est, ok = _fd_best(lambda h, dirs=dirs: float(f(*_perturbed(tree, leaves, pos, dirs, h))),
                           analytic, rtol, atol)
        if not ok:
            raise AssertionError(
                f"check_grads({_describe(f)}): gradient disagrees with finite differences: "
                f"directional derivative by finite differences = {est!r}, from the gradient = "
                f"{analytic!r} (rtol={rtol}, atol={atol}).")
