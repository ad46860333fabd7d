"""Mixed plans number their nodes afresh when made (``compiled._renumber``) and run lean
when short (``lean.attach``): the results must be bitwise those of the same mixed plan kept
with the recording's numbering and run by ``Plan.run`` (gradient and HVP caches, plans with
writes, guards and several segments), and the compile report must name the same steps."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.rk4 import make_rk4
from benchmarks.suite import CASES
from mooncake_py.replay import compiled

pytest.importorskip("numba")

_VARIANTS = ("recorded numbering", "renumbered", "renumbered, lean")


def _variant(mp_ctx, which):
    """Make mixed plans as ``which`` says (``mp_ctx``: a monkeypatch context)."""
    if which == "recorded numbering":
        mp_ctx.setattr(compiled, "_renumber", lambda mixed: setattr(mixed, "origin", {}))
    if which != "renumbered, lean":
        mp_ctx.setattr(compiled, "attach", lambda plan, dual: plan)


def _two_segments(x, w):
    m = x.reshape(3, 4)
    s = 0.0
    for i in range(3):
        for j in range(4):
            s = s + np.tanh(m[i, j] * w[j]) / (1.0 + w[j] * w[j])
    t = np.sum(np.exp(x)) * s
    u = t
    for i in range(12):
        if x[i] > 0:  # a guard inside the second segment
            u = u * 0.9 + np.sin(x[i] - s)
        else:
            u = u - np.cos(x[i]) / 3
    return u + s


def _map(x):
    return CASES["map_sin_cos_exp"].bind(numpy_namespace())(x)


def _cases():
    rng = np.random.default_rng(3)
    x12, w = rng.standard_normal(12), rng.standard_normal(4)
    th = np.array([1.1, 0.4, 0.1, 0.4])
    return {
        "map_sin_cos_exp": (_map, [rng.standard_normal((10, 10)) for _ in range(3)]),
        "two_segments": (_two_segments, [(x12 * s, w) for s in (1.0, -1.0, 0.5)]),
        "rk4_writes": (make_rk4(20), [th, th * 1.1, th * 0.9]),
    }


def _args(a):
    return a if type(a) is tuple else (a,)


def _run(name, kind):
    """The results of a compile=True cache of case ``name`` over its inputs, and the plan."""
    f, inputs = _cases()[name]
    first = _args(inputs[0])
    out = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        if kind == "gradient":
            c = mp.prepare_gradient_cache(f, *first, compile=True)
            for a in [b for b in inputs for _ in range(2)]:
                y, g = mp.value_and_gradient(c, f, *_args(a))
                out.append((y,) + tuple(g))
        else:
            c = mp.prepare_hvp_cache(f, *first, compile=True)
            for a in [b for b in inputs for _ in range(2)]:
                a = _args(a)
                vs = tuple(np.cos(np.arange(np.size(b)) + 1.0).reshape(np.shape(b))
                           for b in a)
                y, g, hv = mp.value_and_hvp(c, f, vs if len(a) > 1 else vs[0], *a)
                out.append((y,) + tuple(g) + tuple(hv))
    return out, c


def _plan(c):
    plan = c._replay.plan
    return plan.base if type(plan).__name__ == "SourcePlan" else plan


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("name", ["map_sin_cos_exp", "two_segments", "rk4_writes"])
def test_renumbered_and_lean_plans_give_the_bits_of_the_recorded_numbering(
        kind, name, monkeypatch):
    results = {}
    for which in _VARIANTS:
        with monkeypatch.context() as m:
            _variant(m, which)
            results[which], c = _run(name, kind)
            plan = _plan(c)
            assert type(plan) is compiled.MixedPlan and c._replay.replays >= 2
            assert (which == "renumbered, lean") == ("run" in plan.__dict__) or \
                which == "renumbered, lean" and name == "rk4_writes"  # (writes: not lean)
    want = results[_VARIANTS[0]]
    for which in _VARIANTS[1:]:
        for a, b in zip(results[which], want):
            assert len(a) == len(b)
            for u, v in zip(a, b):
                if kind == "hvp":
                    u, v = (mp.primal(u), mp.tangent(u)), (mp.primal(v), mp.tangent(v))
                else:
                    u, v = (u,), (v,)
                for p, q in zip(u, v):
                    assert np.array_equal(np.asarray(p), np.asarray(q)), which


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("name", ["map_sin_cos_exp", "two_segments", "rk4_writes"])
def test_renumbered_plans_hold_only_the_nodes_they_use(kind, name):
    _, c = _run(name, kind)
    plan = _plan(c)
    base = plan.plan
    assert plan.n < base.n and len(plan.parents) == plan.n == len(plan.fns)
    assert plan.inputs == list(range(len(plan.inputs)))
    assert plan.ynode == plan.n - 1
    assert plan.writes == sorted(plan.writes) and plan.splits == sorted(plan.splits)
    assert all(0 <= w < plan.n for w in plan.writes + plan.splits)
    # every step the mixed plan keeps stands for one step of the plan it was made from
    kept = {id(st) for st in base.steps}
    assert all(id(plan.origin[id(st)]) in kept for st in plan.steps
               if st[1] not in (compiled._segment_forward, compiled._segment_output,
                                compiled._segment_buffer))


@pytest.mark.parametrize("name", ["map_sin_cos_exp", "two_segments"])
def test_compile_report_is_that_of_the_recorded_numbering(name, monkeypatch):
    _, c = _run(name, "gradient")
    new = str(c.compile_report())
    _variant(monkeypatch, _VARIANTS[0])
    _, c = _run(name, "gradient")
    assert str(c.compile_report()) == new


def test_a_lean_mixed_plan_after_a_bad_call_and_a_flipped_guard():
    f, inputs = _cases()["two_segments"]
    x, w = inputs[0]
    c = mp.prepare_gradient_cache(f, x, w, compile=True)
    for _ in range(3):
        mp.value_and_gradient(c, f, x, w)
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_gradient(c, f, x[:6], w)
    for a in inputs:  # (the second flips the branches: recorded again, then replayed)
        for _ in range(2):
            y, g = mp.value_and_gradient(c, f, *a)
            want = mp.value_and_grad(f, argnums=(0, 1))(*a)
            np.testing.assert_allclose(y, want[0], rtol=1e-12, atol=0)
            for p, q in zip(g, want[1]):
                np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-300)
    assert type(_plan(c)) is compiled.MixedPlan


def _reads_argument(x):
    s = 0.0  # (the segment reads the argument alone: the kernel reads it in place)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s = s + np.sin(x[i, j]) * x[i, j]
    return s + np.sum(np.cos(x))  # an array step: a mixed plan, not one kernel


@pytest.mark.parametrize("layout", ["C", "F", "strided", "read-only"])
def test_a_segment_reads_an_argument_of_any_layout(layout):
    rng = np.random.default_rng(5)
    base = rng.standard_normal((4, 10))

    def make(k):
        a = base * (1 + 0.1 * k)
        if layout == "F":
            return np.asfortranarray(a)
        if layout == "strided":
            return np.repeat(a, 2, axis=1)[:, ::2]
        if layout == "read-only":
            a.setflags(write=False)
        return a
    c = mp.prepare_gradient_cache(_reads_argument, make(0), compile=True)
    h = mp.prepare_hvp_cache(_reads_argument, make(0), compile=True)
    v = np.cos(np.arange(40.0)).reshape(4, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        for k in range(3):
            x = make(k)
            y, (g,) = mp.value_and_gradient(c, _reads_argument, x)
            want = mp.value_and_grad(_reads_argument)(x)
            np.testing.assert_allclose(y, want[0], rtol=1e-12, atol=0)
            np.testing.assert_allclose(g, want[1], rtol=1e-12, atol=1e-300)
            _, _, hv = mp.value_and_hvp(h, _reads_argument, v, x)
            np.testing.assert_allclose(hv, mp.hvp(_reads_argument)(x, v), rtol=1e-12,
                                       atol=1e-300)
    for cache in (c, h):
        plan = _plan(cache)
        assert type(plan) is compiled.MixedPlan and cache._replay.replays == 2
        seg, = plan.segments
        assert seg.nscalar == 0 and len(seg.arrays) == 1 and not seg.buffers
