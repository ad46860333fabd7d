"""Sparse Hessians and Jacobians: detection, coloring, compressed evaluation and decompression.

The oracle is always the dense result (mp.hessian / mp.jacobian): the sparse one must equal it,
and the detected pattern must contain every nonzero it has.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import mooncake_py as mp
from mooncake_py.sparse import DenseFallbackWarning
from mooncake_py.sparse.coloring import column_coloring, greedy_coloring, is_column_coloring, is_star_coloring, largest_first_order, row_coloring, star_coloring
from benchmarks.sparse import PROBLEMS, problem

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _dense_nonzeros(M):
    return np.abs(np.asarray(M)) > 0


def _assert_superset(P, M):
    P = P.toarray().astype(bool)
    missing = _dense_nonzeros(M) & ~P
    assert not missing.any(), f"pattern misses nonzeros at {np.argwhere(missing)[:5]}"


def _check_hessian(f, x, *args):
    H = mp.sparse_hessian(f)(x, *args)
    Hd = np.reshape(mp.hessian(f)(x, *args), (x.size, x.size))
    np.testing.assert_allclose(H.toarray(), Hd, rtol=1e-10, atol=1e-10)
    _assert_superset(mp.hessian_sparsity(f, x, *args), Hd)
    return H


def _check_jacobian(f, x):
    y = f(x)
    Jd = np.reshape(mp.jacobian(f, mode="forward")(x), (np.size(y), x.size))
    P = mp.jacobian_sparsity(f, x)
    _assert_superset(P, Jd)
    for mode in ("forward", "reverse"):
        J = mp.sparse_jacobian(f, mode=mode)(x)
        np.testing.assert_allclose(J.toarray(), Jd, rtol=1e-10, atol=1e-12)


# --- known structures: exact patterns -----------------------------------------------------------
def test_chained_objective_has_an_exact_tridiagonal_pattern_and_three_colors():
    f = lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2) + np.sum(np.sin(x))
    x = np.linspace(-1, 1, 30)
    P = mp.hessian_sparsity(f, x).toarray()
    want = np.abs(np.subtract.outer(np.arange(30), np.arange(30))) <= 1
    np.testing.assert_array_equal(P, want)
    c = mp.prepare_sparse_hessian_cache(f, x)
    assert c.n_colors == 3
    _check_hessian(f, x)


def test_arrowhead_pattern_is_exact_and_needs_two_colors():
    f = lambda x: x[0] * np.sum(x[1:] ** 2) + np.sum(np.exp(x))
    x = np.linspace(0.1, 1, 12)
    P = mp.hessian_sparsity(f, x).toarray()
    want = np.eye(12, dtype=bool)
    want[0, :] = want[:, 0] = True
    np.testing.assert_array_equal(P, want)
    assert mp.prepare_sparse_hessian_cache(f, x).n_colors == 2
    _check_hessian(f, x)


def test_separable_function_is_diagonal_and_linear_function_is_empty():
    x = np.linspace(0.5, 2, 7)
    P = mp.hessian_sparsity(lambda x: np.sum(np.log(x) + 3 * x), x).toarray()
    np.testing.assert_array_equal(P, np.eye(7, dtype=bool))
    lin = lambda x: np.sum(2.0 * x[1:] - x[:-1] / 3.0) + np.mean(x)
    assert mp.hessian_sparsity(lin, x).nnz == 0
    y, g, H = mp.value_gradient_and_sparse_hessian(mp.prepare_sparse_hessian_cache(lin, x),
                                                   lin, x)
    assert H.nnz == 0 and H.shape == (7, 7)
    np.testing.assert_allclose(g, mp.grad(lin)(x))


def test_power_with_exponent_one_is_linear_and_x_times_x_is_not():
    x = np.linspace(0.5, 2, 4)
    assert mp.hessian_sparsity(lambda x: np.sum(x ** 1.0), x).nnz == 0
    assert mp.hessian_sparsity(lambda x: np.sum(x * x), x).nnz == 4


def test_float32_stays_float32():
    f = lambda x: np.sum(x[1:] * x[:-1] ** 2)
    x = np.linspace(1, 2, 6, dtype=np.float32)
    H = mp.sparse_hessian(f)(x)
    assert H.dtype == np.float32
    np.testing.assert_allclose(H.toarray(), mp.hessian(f)(x), rtol=1e-5)


# --- random compositions (hypothesis) ----------------------------------------------------------
_UNARY = [np.sin, np.tanh, np.square, np.exp, lambda v: v]


@st.composite
def _hessian_problems(draw):
    n = draw(st.integers(4, 14))
    seed = draw(st.integers(0, 2 ** 16))
    kinds = draw(st.lists(st.sampled_from(["band", "arrow", "block", "index", "matmul",
                                           "where", "clip"]), min_size=1, max_size=4))
    return n, seed, kinds


def _term(kind, n, rng):
    g = _UNARY[rng.integers(len(_UNARY))]
    if kind == "band":
        k = int(rng.integers(1, min(3, n - 1) + 1))
        return lambda x: np.sum(g(x[k:]) * x[:-k])
    if kind == "arrow":
        i = int(rng.integers(n))
        return lambda x: x[i] * np.sum(g(x))
    if kind == "block":
        b = int(rng.integers(2, 4))
        m = n // b
        return lambda x: np.sum(np.prod(np.reshape(x[:m * b], (m, b)), axis=1))
    if kind == "index":
        a, c = rng.integers(0, n, size=(2, int(rng.integers(1, n))))
        return lambda x: np.sum(g(x[a]) * x[c])
    if kind == "matmul":
        A = rng.standard_normal((3, n)) * (rng.random((3, n)) < 0.3)
        return lambda x: np.sum(np.tanh(A @ x))
    if kind == "where":
        return lambda x: np.sum(np.where(x > 0, x[::-1] ** 2, g(x)))
    return lambda x: np.sum(np.clip(x, -0.5, 0.5) * np.roll(x, 1))


@SETTINGS
@given(_hessian_problems())
def test_random_compositions_give_the_dense_hessian(spec):
    n, seed, kinds = spec
    rng = np.random.default_rng(seed)
    terms = [_term(k, n, rng) for k in kinds]
    f = lambda x: sum(t(x) for t in terms)
    x = rng.uniform(-1, 1, n)
    c = mp.prepare_sparse_hessian_cache(f, x)
    assert is_star_coloring(c.pattern, c.colors)
    _check_hessian(f, x)


@st.composite
def _jacobian_problems(draw):
    n = draw(st.integers(3, 12))
    seed = draw(st.integers(0, 2 ** 16))
    kinds = draw(st.lists(st.sampled_from(["band", "index", "matmul", "cumsum", "scalar",
                                           "where"]), min_size=1, max_size=3))
    return n, seed, kinds


def _vector_term(kind, n, rng):
    g = _UNARY[rng.integers(len(_UNARY))]
    if kind == "band":
        k = int(rng.integers(1, n))
        return lambda x: g(x[k:]) * x[:-k]
    if kind == "index":
        a, c = rng.integers(0, n, size=(2, int(rng.integers(1, n))))
        return lambda x: g(x[a]) - x[c] ** 3
    if kind == "matmul":
        A = rng.standard_normal((4, n)) * (rng.random((4, n)) < 0.3)
        return lambda x: np.sin(A @ x)
    if kind == "cumsum":
        return lambda x: np.cumsum(x[: n // 2 + 1])
    if kind == "scalar":
        return lambda x: np.reshape(np.sum(g(x)), (1,))
    return lambda x: np.where(x > 0, x, np.exp(x))


@SETTINGS
@given(_jacobian_problems())
def test_random_compositions_give_the_dense_jacobian(spec):
    n, seed, kinds = spec
    rng = np.random.default_rng(seed)
    terms = [_vector_term(k, n, rng) for k in kinds]
    f = lambda x: np.concatenate([t(x) for t in terms])
    _check_jacobian(f, rng.uniform(-1, 1, n))


# --- the benchmark problems ---------------------------------------------------------------------
@pytest.mark.parametrize("name", PROBLEMS)
def test_benchmark_problems_match_dense_and_prepared_cache_reuses_the_pattern(name):
    f, x, args = problem(name, 64, seed=3)
    H = _check_hessian(f, x, *args)
    c = mp.prepare_sparse_hessian_cache(f, x, *args)
    assert c.n_colors < x.size // 2
    x2 = x + 0.1 * np.random.default_rng(1).standard_normal(x.size)
    y, g, H2 = mp.value_gradient_and_sparse_hessian(c, f, x2, *args)
    np.testing.assert_allclose(H2.toarray(), mp.hessian(f)(x2, *args), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(g, mp.grad(f)(x2, *args), rtol=1e-12)
    assert np.isclose(y, f(x2, *args))
    assert H.nnz == c.pattern.nnz


def test_chunked_sweeps_give_the_same_hessian():
    f, x, args = problem("logistic", 40, seed=2)
    c = mp.prepare_sparse_hessian_cache(f, x, *args, chunk_size=3)
    assert c.n_colors > 3
    _, _, H = mp.value_gradient_and_sparse_hessian(c, f, x, *args)
    np.testing.assert_allclose(H.toarray(), mp.hessian(f)(x, *args), rtol=1e-10, atol=1e-12)


# --- one case per pattern rule --------------------------------------------------------------
_C = np.arange(1.0, 7.0)
_M = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])


def _buffer(x):
    out = np.zeros_like(x, shape=(3,))
    out[0] = x[1] * x[2]
    out[1:] = x[4:] ** 2
    out += x[:3]
    return out


def _buffer_like(x):
    b = np.zeros(4, like=x)
    b[::2] = x[:2]
    return b * x[5]


def _add_at(x):
    out = np.zeros_like(x)
    np.add.at(out, [0, 0, 2], x[:3] ** 2)
    return out


def _out_kwarg(x):
    out = np.empty_like(x[:3])
    np.multiply(x[:3], x[3:], out=out)
    return out


def _setitem_fancy(x):
    y = x.copy()
    y[[0, 5]] = np.sin(x[2:4])
    y[y > 10] = 0.0
    return y


def _mutators(x):
    y = np.zeros_like(x)
    np.copyto(y, x ** 2, where=np.array([True, False] * 3))
    np.put(y, [1, 3], x[4:] * x[0])
    m = np.zeros_like(x, shape=(2, 2))
    np.fill_diagonal(m, x[2:4])
    return np.concatenate([y, m.ravel()])


VECTOR_CASES = {
    "einsum": lambda x: np.concatenate([
        np.einsum("ij,j->i", _M, x[:3]), np.einsum("i,i", x[:3], x[3:]).reshape(1),
        np.einsum("ij,jk->ik", np.reshape(x[:4], (2, 2)), np.reshape(x[2:], (2, 2))).ravel(),
        np.einsum("ii->i", np.reshape(x[:4], (2, 2))), np.einsum("i,j", x[:2], x[4:]).ravel()]),
    "batched_matmul": lambda x: np.concatenate([
        (np.reshape(x, (3, 1, 2)) @ np.reshape(x[:4], (2, 2))).ravel(),
        (np.reshape(x[:4], (2, 1, 2)) @ np.reshape(x[2:], (2, 2, 1))).ravel(),
        (x[:2] @ np.ones((3, 2, 2))).ravel()]),
    "tensordot": lambda x: np.concatenate([
        np.tensordot(np.reshape(x, (2, 3)), _M, axes=([1], [1])).ravel(),
        np.tensordot(np.reshape(x[:4], (2, 2)), np.reshape(x[2:], (2, 2)), axes=1).ravel(),
        np.reshape(np.tensordot(x, x, axes=1), (1,))]),
    "copyto_put_fill_diagonal": _mutators,
    "median_block_ptp": lambda x: np.concatenate([
        np.reshape(np.median(x[:5] ** 2), (1,)),
        np.block([[x[:2], x[2:4] * x[4:]]]).ravel(), np.reshape(np.ptp(x), (1,))]),
    "getitem_fancy_bool": lambda x: x[[4, 0, 0]] * x[np.array([1, 0, 1, 0, 1, 1], bool)][:3],
    "reshape_transpose": lambda x: np.ravel(np.reshape(x, (2, 3)).T @ _M),
    "concat_constant": lambda x: np.concatenate([x[:2], _C[:2], x[4:] ** 2]),
    "stack_split": lambda x: np.stack(np.split(x, 3), axis=1).ravel() * x[0],
    "pad_tril_diag": lambda x: np.ravel(np.tril(np.diag(np.pad(x[:3], 1)))),
    "roll_flip_repeat_tile": lambda x: (np.roll(np.flip(np.repeat(x[:2], 2)), 1)
                                        * np.tile(x[2:4], 2)),
    "take_along": lambda x: np.take(x, [5, 1]) + np.take_along_axis(x, np.array([0, 3]), 0),
    "sum_axis": lambda x: np.sum(np.reshape(x, (2, 3)) ** 2, axis=0),
    "mean_prod_max": lambda x: np.stack([np.mean(x), np.prod(x[:3]), np.max(x[3:])]),
    "var_std_norm": lambda x: np.stack([np.var(x), np.std(x[:3]), np.linalg.norm(x[3:])]),
    "cumsum_cumprod": lambda x: np.cumsum(x[:3]) * np.cumprod(x[3:]),
    "sort": lambda x: np.sort(np.reshape(x, (3, 2)) ** 3, axis=0).ravel(),
    "softmax_logsumexp": lambda x: np.concatenate([mp.special.softmax(x[:3]),
                                                    mp.special.logsumexp(x[3:], keepdims=True)]),
    "const_matmul": lambda x: _M @ x[:3],
    "matmul_const": lambda x: x[:2] @ _M,
    "pattern_matmul": lambda x: np.ravel(np.reshape(x[:4], (2, 2)) @ np.reshape(x[2:], (2, 2))),
    "vector_dot": lambda x: np.reshape(np.dot(x[:3], x[3:]), (1,)),
    "outer_kron": lambda x: np.concatenate([np.outer(x[:2], x[4:]).ravel(),
                                            np.kron(np.reshape(x[:2], (1, 2)),
                                                    np.reshape(x[2:4], (2, 1))).ravel()]),
    "trace_where_clip": lambda x: np.concatenate([
        np.reshape(np.trace(np.reshape(x[:4], (2, 2))), (1,)),
        np.where(x[:3] > 0, x[3:], -x[:3]), np.clip(x[3:], -0.2, 0.2)]),
    "buffers": _buffer,
    "buffer_like": _buffer_like,
    "add_at": _add_at,
    "out_kwarg": _out_kwarg,
    "setitem_fancy": _setitem_fancy,
    "solve": lambda x: np.linalg.solve(np.eye(2) + np.diag(x[:2] ** 2), x[2:4]),
    "ufunc_reduce_accumulate": lambda x: np.concatenate([
        np.add.reduce(np.reshape(x, (2, 3))), np.multiply.accumulate(x[:3])]),
    "solve_triangular": lambda x: mp.linalg.solve_triangular(np.triu(np.ones((3, 3))) + np.eye(3),
                                                             x[:3] * x[3:]),
    "astype_expand": lambda x: np.expand_dims(x.astype(np.float32).astype(np.float64), 0)[0],
}


@pytest.mark.filterwarnings("error::mooncake_py.sparse.DenseFallbackWarning")
@pytest.mark.parametrize("name", sorted(VECTOR_CASES))
def test_pattern_rule_cases_match_the_dense_jacobian(name):
    f = VECTOR_CASES[name]
    x = np.array([0.3, -0.7, 1.1, 0.5, -0.2, 0.9])
    _check_jacobian(f, x)


@pytest.mark.filterwarnings("error::mooncake_py.sparse.DenseFallbackWarning")
@pytest.mark.parametrize("name", sorted(VECTOR_CASES))
def test_pattern_rule_cases_match_the_dense_hessian(name):
    f = VECTOR_CASES[name]
    x = np.array([0.3, -0.7, 1.1, 0.5, -0.2, 0.9])
    w = np.linspace(1, 2, np.size(f(x)))
    _check_hessian(lambda x: np.sum(f(x) * w), x)


def test_elementwise_entries_of_the_derivative_table():
    from mooncake_py.rules.derivative_table import BY_UFUNC
    x = np.array([0.3, 0.45, 0.6, 0.7])
    for ufunc, e in BY_UFUNC.items():
        if e.constant:  # an order (iv's v, gammainc's a) has no derivative: MissingRuleError
            continue
        if e.nin == 1:
            f = lambda x: np.sum(ufunc(x[1:] * x[:-1]))
        else:
            f = lambda x: np.sum(ufunc(x[1:] + 0.1, x[:-1] + 0.2))
        with np.errstate(all="ignore"):
            H = mp.hessian(f)(x)
        if not np.all(np.isfinite(H)):
            continue
        _assert_superset(mp.hessian_sparsity(f, x), H)
        if e.nin == 1 and e.d2 == ("0",):
            assert mp.hessian_sparsity(lambda x: np.sum(ufunc(x)), x).nnz == 0, e.name


# --- control flow and mutation ------------------------------------------------------------------
def test_pattern_follows_the_branch_taken_at_x():
    def f(x):
        if x[0] > 0:
            return np.sum(x[1:] * x[:-1])
        return np.sum(x ** 2)
    up, down = np.array([1.0, 2, 3]), np.array([-1.0, 2, 3])
    assert mp.hessian_sparsity(f, up).toarray()[0, 1] and not mp.hessian_sparsity(f, up)[0, 0]
    np.testing.assert_array_equal(mp.hessian_sparsity(f, down).toarray(), np.eye(3, dtype=bool))
    _check_hessian(f, up)
    _check_hessian(f, down)


def test_loop_code_with_scalar_writes():
    def f(x):
        out = np.empty_like(x)
        out[0] = x[0]
        for i in range(1, len(x)):
            out[i] = out[i - 1] * 0.5 + np.sin(x[i])
        return np.sum(out ** 2)
    _check_hessian(f, np.linspace(-1, 1, 6))


def _through_views(x):
    y = x.copy()
    y[1:] += x[:-1] ** 2                 # in-place on a slice: a write through a view
    v = y[::2]
    v *= x[0]
    z = np.reshape(y, (2, 3)).T          # a transposed view, written into
    z[0, 1] = np.sin(x[5])
    w = y[1:]
    y[...] = y * x[2]                    # w is stale now: it catches up when read
    return np.sum(y ** 2) + np.sum(w) * np.sum(v) + np.sum(z)


def _into_fortran_buffer(x):
    b = np.copy(np.reshape(x, (2, 3)).T, order="F")   # a root laid out in Fortran order
    b[1:, 0] = x[:2] * x[4]
    return np.sum(b ** 3)


def _stale_view(x):
    y = x.copy()
    w = y[1:]
    y[...] = x[::-1] * x[0]              # w's elements now depend on other inputs entirely
    return np.sum(w ** 2)


@pytest.mark.parametrize("f", [_through_views, _into_fortran_buffer, _stale_view])
def test_writes_through_views_reach_the_array_they_view(f):
    x = np.array([0.3, -0.7, 1.1, 0.5, -0.2, 0.9])
    _check_hessian(f, x)
    _check_jacobian(lambda x: np.reshape(f(x), (1,)), x)


# --- errors and fallbacks -----------------------------------------------------------------------
def test_op_without_a_rule_falls_back_to_dense_with_a_warning_or_raises_when_strict():
    f = lambda x: np.sum(np.einsum("...i,...i->...i", x[:2], x[2:4])) + np.sum(x[4:] ** 2)
    x = np.linspace(1, 2, 6)
    with pytest.warns(DenseFallbackWarning, match="einsum"):
        P = mp.hessian_sparsity(f, x).toarray()
    assert P[:4, :4].all() and not P[0, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DenseFallbackWarning)
        _check_hessian(f, x)
    with pytest.raises(mp.MissingRuleError, match=r"einsum.*pattern_rule"):
        mp.hessian_sparsity(f, x, strict=True)


def test_bad_inputs_raise_named_errors():
    with pytest.raises(mp.NonDifferentiableInputError):
        mp.sparse_hessian(lambda x: np.sum(x))(np.arange(3))
    with pytest.raises(mp.OutputTypeError):
        mp.sparse_hessian(lambda x: x ** 2)(np.ones(3))
    with pytest.raises(mp.OutputTypeError):
        mp.hessian_sparsity(lambda x: x ** 2, np.ones(3))
    with pytest.raises(mp.TrackingLostError):
        mp.hessian_sparsity(lambda x: float(x[0]) * x[1], np.ones(3))
    f = lambda x: np.sum(x ** 3)
    c = mp.prepare_sparse_hessian_cache(f, np.ones(3))
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_gradient_and_sparse_hessian(c, f, np.ones(4))
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_gradient_and_sparse_hessian(c, lambda x: np.sum(x), np.ones(3))
    with pytest.raises(ValueError, match="mode"):
        mp.sparse_jacobian(np.sin, mode="sideways")(np.ones(3))
    with pytest.raises(mp.TangentError):
        mp.prepare_sparse_hessian_cache(f, np.ones(3), pattern=np.eye(4, dtype=bool))


def test_given_pattern_skips_detection():
    f = lambda x: np.sum(x ** 3)
    x = np.linspace(1, 2, 5)
    P = np.eye(5, dtype=bool) | np.eye(5, k=1, dtype=bool) | np.eye(5, k=-1, dtype=bool)
    c = mp.prepare_sparse_hessian_cache(f, x, pattern=P)
    _, _, H = mp.value_gradient_and_sparse_hessian(c, f, x)
    np.testing.assert_allclose(H.toarray(), np.diag(6 * x))
    assert H.nnz == P.sum()


def test_jacobian_cache_picks_the_mode_with_fewer_colors():
    wide = lambda x: np.reshape(np.sum(x ** 2), (1,))         # one dense row: reverse, 1 color
    tall = lambda x: np.concatenate([x, x ** 2, np.sin(x)])    # diagonal blocks: forward, 1
    x = np.linspace(0, 1, 5)
    cw, ct = mp.prepare_sparse_jacobian_cache(wide, x), mp.prepare_sparse_jacobian_cache(tall, x)
    assert (cw.mode, cw.n_colors) == ("reverse", 1)
    assert (ct.mode, ct.n_colors) == ("forward", 1)
    for f, c in ((wide, cw), (tall, ct)):
        y, J = mp.value_and_sparse_jacobian(c, f, x)
        np.testing.assert_allclose(J.toarray(), mp.jacobian(f)(x))


# --- colorings ----------------------------------------------------------------------------------
@st.composite
def _symmetric_patterns(draw):
    n = draw(st.integers(1, 25))
    density = draw(st.floats(0.0, 0.5))
    seed = draw(st.integers(0, 2 ** 16))
    A = np.random.default_rng(seed).random((n, n)) < density
    return A | A.T | np.eye(n, dtype=bool)


@SETTINGS
@given(_symmetric_patterns())
def test_star_coloring_is_a_star_coloring_that_recovers_the_matrix(P):
    for algorithm in ("stars", "simple"):
        for order in ("largest_first", "natural"):
            assert is_star_coloring(P, star_coloring(P, order, algorithm))
    rng = np.random.default_rng(0)
    H = np.where(P, rng.standard_normal(P.shape), 0.0)
    H = H + H.T
    c = mp.prepare_sparse_hessian_cache(lambda x: 0.5 * x @ (H @ x), np.ones(P.shape[0]),
                                        pattern=P)
    _, _, Hs = mp.value_gradient_and_sparse_hessian(c, c.spec.f, np.ones(P.shape[0]))
    np.testing.assert_allclose(Hs.toarray(), H, atol=1e-12)


@SETTINGS
@given(st.integers(1, 20), st.integers(1, 20), st.floats(0, 0.6), st.integers(0, 2 ** 16))
def test_column_and_row_colorings_are_valid(m, n, density, seed):
    J = np.random.default_rng(seed).random((m, n)) < density
    assert is_column_coloring(J, column_coloring(J))
    assert is_column_coloring(J.T, row_coloring(J))


def test_the_two_star_algorithms_on_a_grid_and_a_random_pattern():
    f, x, args = problem("laplacian", 400)
    P = mp.hessian_sparsity(f, x, *args)
    assert star_coloring(P, algorithm="stars").max() + 1 == 5   # the optimum for a 5-point stencil
    assert star_coloring(P, algorithm="simple").max() + 1 == 6
    f, x, args = problem("logistic", 300, seed=1)
    c = mp.prepare_sparse_hessian_cache(f, x, *args, coloring="simple")
    assert is_star_coloring(c.pattern, c.colors)
    np.testing.assert_allclose(mp.value_gradient_and_sparse_hessian(c, f, x, *args)[2].toarray(),
                               mp.hessian(f)(x, *args), rtol=1e-10, atol=1e-12)
    best = star_coloring(P, algorithm="best")
    assert best.max() + 1 == 5 and is_star_coloring(P, best)
    with pytest.raises(ValueError, match="algorithm"):
        star_coloring(P, algorithm="fastest")


def test_is_star_coloring_rejects_a_bicolored_path():
    P = np.eye(4, dtype=bool) | np.eye(4, k=1, dtype=bool) | np.eye(4, k=-1, dtype=bool)
    assert not is_star_coloring(P, np.array([0, 1, 0, 1]))
    assert not is_star_coloring(P, np.array([0, 0, 1, 2]))  # not even proper


def test_color_counts_against_networkx():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(7)
    for trial in range(6):
        n = 30
        J = rng.random((40, n)) < 0.08
        C = (J.T.astype(int) @ J.astype(int)) > 0
        G = nx.Graph()
        G.add_nodes_from(range(n))
        G.add_edges_from((i, j) for i, j in zip(*np.nonzero(np.triu(C, 1))))
        nx_colors = nx.greedy_color(G, strategy="largest_first")
        ours = column_coloring(J)
        # same order, same greedy rule: the very same coloring
        assert ours.max() + 1 == max(nx_colors.values()) + 1
        assert all(ours[v] == c for v, c in nx_colors.items())
        # a star coloring needs at most the colors of a distance-2 coloring of the same graph
        star = star_coloring(C)
        d2 = nx.greedy_color(nx.power(G, 2), strategy="largest_first")
        assert star.max() + 1 <= max(d2.values()) + 1
    # and far fewer on an arrowhead, where every distance-2 coloring needs n colors
    n = 20
    arrow = np.eye(n, dtype=bool)
    arrow[0] = arrow[:, 0] = True
    G = nx.from_numpy_array(arrow.astype(int) - np.eye(n, dtype=int))
    assert max(nx.greedy_color(nx.power(G, 2)).values()) + 1 == n
    assert star_coloring(arrow).max() + 1 == 2


def test_largest_first_order_and_given_orders():
    A = np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=bool)
    np.testing.assert_array_equal(largest_first_order(A), [0, 1, 2])
    np.testing.assert_array_equal(greedy_coloring(A, order=[1, 2, 0]), [1, 0, 0])
    with pytest.raises(ValueError):
        greedy_coloring(A, order=[0, 0, 1])


def test_benchmark_runs_and_checks_against_dense():
    from benchmarks.sparse import run
    rows = run([30], budget=0.001, use_jax=False, log=lambda line: None)
    assert {r["problem"] for r in rows} == set(PROBLEMS)
    for r in rows:
        assert r["max_abs_diff"] < 1e-9 and r["colors"] >= 2 and r["sparse_mem"] > 0


def test_detection_runs_through_a_nested_gradient_and_matrix_inputs():
    g = lambda x: np.sum((x[1:] - x[:-1] ** 2) ** 2)
    x = np.linspace(0, 1, 6)
    # the Jacobian of the gradient is the Hessian: a tape inside f records pattern values
    np.testing.assert_array_equal(mp.jacobian_sparsity(mp.grad(g), x).toarray(),
                                  mp.hessian_sparsity(g, x).toarray())
    np.testing.assert_allclose(mp.sparse_jacobian(mp.grad(g))(x).toarray(), mp.hessian(g)(x),
                               atol=1e-12)
    X = np.linspace(0, 1, 12).reshape(3, 4)
    f = lambda X: np.sum(np.sin(X[:, 1:] * X[:, :-1])) + np.sum(X.T @ X)
    H = mp.sparse_hessian(f)(X)
    assert H.shape == (12, 12)
    np.testing.assert_allclose(H.toarray(), mp.hessian(f)(X).reshape(12, 12), atol=1e-12)
