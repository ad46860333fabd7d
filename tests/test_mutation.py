"""Code that writes into arrays: writes with every index kind, in-place operators, out=,
buffer constructors, views and aliasing, input mutation; gradients against finite differences
and functional equivalents, HVPs against differences of the gradient, forward mode; the error
paths."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.suite import naive_map_sin_cos_exp

rng = np.random.default_rng(7)


# --- helpers ------------------------------------------------------------------------------------
def fd_grad(f, x, h=1e-6):
    """Central differences; ``f`` gets a fresh copy each time, since it may write into it."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def fd_hvp(f, x, v, h=1e-5):
    g = mp.grad(f)
    return (g(x + h * v) - g(x - h * v)) / (2 * h)


def check(f, x, ref=None, hvp=True, jvp=True, rtol=1e-6, atol=1e-8):
    """mp.grad against finite differences (and against ``ref``, the gradient of a functional
    equivalent, if given); mp.hvp against differences of the gradient; mp.jvp against g·v."""
    x0 = x.copy()
    g = mp.grad(f)(x.copy())
    np.testing.assert_allclose(g, fd_grad(f, x0), rtol=rtol, atol=atol)
    if ref is not None:
        np.testing.assert_allclose(g, mp.grad(ref)(x0.copy()), rtol=1e-12, atol=1e-12)
    v = rng.standard_normal(x.shape)
    if hvp:
        np.testing.assert_allclose(mp.hvp(f)(x0.copy(), v), fd_hvp(f, x0, v), rtol=1e-5,
                                   atol=1e-7)
    if jvp:
        y, dy = mp.jvp(f, (x0.copy(),), (v.copy(),))
        np.testing.assert_allclose(y, f(x0.copy()), rtol=1e-14)
        np.testing.assert_allclose(dy, np.sum(g * v), rtol=1e-10, atol=1e-12)
    return g


X = rng.standard_normal((4, 5))
W = rng.standard_normal((4, 5))


# --- every index kind -----------------------------------------------------------------------------
KEYS = [
    ("int", 2, ()),
    ("negative int", -1, ()),
    ("int pair", (1, 3), ()),
    ("slice", slice(1, 3), ()),
    ("step slice", slice(None, None, 2), (5,)),
    ("negative step", (slice(None), slice(None, None, -2)), ()),
    ("ellipsis", (Ellipsis, 0), ()),
    ("newaxis", (None, 1), (1, 5)),
    ("int array", np.array([0, 3]), ()),
    ("list", [1, 2], (5,)),
    ("2-d int arrays", (np.array([[0], [2]]), np.array([1, 4])), ()),
    ("advanced and slice", (slice(1, 3), np.array([0, 4, 2])), (3,)),
    ("separated advanced", (np.array([0, 1]), slice(None), ), ()),
    ("bool mask", X > 0, ()),
    ("bool rows", np.array([True, False, True, True]), (5,)),
    ("everything", Ellipsis, ()),
    ("empty", np.array([], dtype=np.intp), ()),
]


@pytest.mark.parametrize("name,key,vshape", KEYS, ids=[k[0] for k in KEYS])
def test_write_every_index_kind(name, key, vshape):
    region = np.shape(X[key])
    shape = vshape if vshape else region

    def f(x):
        y = x * 2.0
        v = np.sin(x[0, 0]) * np.ones(shape)  # a tracked value, broadcast into the region
        y[key] = v * np.cos(np.sum(x))
        return np.sum(W * y ** 2)
    check(f, X)


@pytest.mark.parametrize("name,key,vshape", KEYS[:9], ids=[k[0] for k in KEYS[:9]])
def test_write_matches_functional_equivalent(name, key, vshape):
    mask = np.zeros(X.shape, dtype=bool)
    mask[key] = True

    def f(x):
        y = np.exp(x)
        y[key] = np.tanh(x[key])
        return np.sum(W * y)

    def functional(x):
        return np.sum(W * np.where(mask, np.tanh(x), np.exp(x)))
    check(f, X, ref=functional, hvp=False, jvp=False)


def test_value_with_extra_leading_axes():
    def f(x):
        y = x.copy()
        y[2] = np.exp(x[:1])       # shape (1, 5) into a row of shape (5,): NumPy drops the axis
        y[:, 0] = x[None, :, 1]    # (1, 4) into (4,)
        return np.sum(W * y ** 2)
    check(f, X)


# --- repeated indices, overlapping writes -------------------------------------------------------
def test_repeated_integer_index_only_the_landed_value_gets_a_cotangent():
    def f(x):
        y = np.zeros_like(x)
        y[[0, 0, 2]] = x ** 2  # NumPy keeps the last write to position 0: x[1] ** 2
        return np.sum(y * np.array([1.0, 10.0, 100.0]))
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f(x), 4.0 + 900.0)
    g = check(f, x)
    np.testing.assert_allclose(g, [0.0, 4.0, 600.0])


def test_repeated_indices_with_a_broadcast_scalar_and_2d_keys():
    def f(x):
        y = np.ones_like(x)
        y[[0, 0, 1], [1, 1, 2]] = x[0, 0] * 3.0
        y[np.array([[2, 2], [3, 3]])] = x[1]
        return np.sum(np.sin(y) * x)
    check(f, X)


def test_overlapping_writes_and_a_write_from_its_own_buffer():
    def f(x):
        y = x.copy()
        y[1:] = y[:-1] * 2.0        # reads the buffer it overwrites (NumPy copies first)
        y[:, 1:] = y[:, :-1] + y[:, 1:]
        y[1:3, 1:4] = np.exp(y[0:2, 2:5])
        y[2] = y[2] * y[1]
        return np.sum(y ** 3)
    check(f, X)


def test_many_writes_into_one_position():
    def f(x):
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[0] = y[0] * x[i] + x[i] ** 2
        return y[0] + np.sum(y)
    check(f, np.linspace(0.1, 1.0, 6))


# --- views ----------------------------------------------------------------------------------------
def test_write_through_a_row_view_updates_the_array():
    def f(x):
        y = np.zeros_like(x)
        for i in range(x.shape[0]):
            row = y[i]
            row[:] = x[i] ** 2
            row[0] = np.sin(x[i, 0])
        return np.sum(y * x)
    check(f, X)


def test_chained_indexing_writes():
    def f(x):
        y = np.zeros_like(x)
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                y[i][j] = x[i, j] * x[0, 0]
        return np.sum(np.sin(y))
    check(f, X, ref=lambda x: np.sum(np.sin(x * x[0, 0])))


def test_nested_views_and_a_view_read_after_its_base_was_written():
    def f(x):
        y = x.copy()
        block = y[1:3]
        row = block[0]
        row[1:4] = np.cos(row[1:4])   # through two levels of views
        y[1, 0] = x[0, 0] ** 2        # through the base: block and row see it
        return np.sum(block ** 2) + np.sum(row * x[3]) + np.sum(y)
    check(f, X)


def test_write_into_a_view_of_an_intermediate_result():
    def f(x):
        z = (x * 2.0)[1:]
        z[0] = 1.0
        return np.sum(z ** 2)
    check(f, X)


def test_iterating_rows_and_writing_them():
    def f(x):
        y = np.zeros_like(x)
        for k, row in enumerate(y):
            row[...] = x[k] * (k + 1.0)
            row[k] = np.exp(x[k, k])
        return np.sum(y ** 2)
    check(f, X)


def test_a_copy_laid_out_differently_then_written_through_a_reshape():
    def f(x):
        y = x.T.copy()            # C order (ndarray.copy), from a transposed view
        y.reshape(-1)[3] = x[0, 0] ** 2
        z = y.T.reshape(-1)       # a copy in NumPy: writing into it leaves y alone
        z[0] = 2.0
        return np.sum(y * x.T) + np.sum(z * z)
    check(f, X)


def test_forward_write_through_a_view_whose_tangent_is_a_copy_is_refused():
    def f(x):
        y = np.copy(x, order="F")
        z = y.T.reshape(-1)   # a view of y's primal; the tangent (laid out in C order) copies
        z[0] = 1.0
        return z
    with pytest.raises(mp.MutationError, match="write through this view of a dual value"):
        mp.jvp(f, (X,), (W,))
    np.testing.assert_allclose(mp.grad(lambda x: np.sum(f(x)))(X)[0, 0], 0.0)  # fine in reverse


# --- in-place operators -------------------------------------------------------------------------
INPLACE = {
    "+=": lambda y, v: y.__iadd__(v), "-=": lambda y, v: y.__isub__(v),
    "*=": lambda y, v: y.__imul__(v), "/=": lambda y, v: y.__itruediv__(v),
    "**=": lambda y, v: y.__ipow__(v),
}
FUNCTIONAL = {"+=": np.add, "-=": np.subtract, "*=": np.multiply, "/=": np.divide,
              "**=": np.power}


@pytest.mark.parametrize("op", list(INPLACE))
def test_inplace_operators(op):
    x = np.abs(X) + 0.5

    def f(x):
        y = x.copy()
        r = INPLACE[op](y, np.cos(x[0]))
        assert r is y
        return np.sum(W * y)

    def functional(x):
        return np.sum(W * FUNCTIONAL[op](x, np.cos(x[0])))
    check(f, x, ref=functional)


def test_inplace_matmul_and_the_aliases_see_it():
    def f(x):
        y = x[:, :4].copy()
        head = y[:2]
        y @= x[:, 1:] @ x[:, 1:].T
        return np.sum(head ** 2) + np.sum(y)
    check(f, X)


def test_inplace_operator_on_a_scalar_rebinds_and_stays_linear():
    def f(x):
        s = 0.0
        t = np.sum(x)
        for i in range(len(x)):
            s += x[i] * x[i]
            t *= 0.5
        return s + t
    x = np.linspace(-1.0, 1.0, 7)
    check(f, x)
    with mp.Tape() as tape:
        f(tape.track(np.ones(100)))
    assert len(tape) < 6 * 100  # O(n) nodes: a scalar += is one recorded op


def test_element_inplace_operator():
    def f(x):
        y = x.copy()
        for i in range(1, len(y)):
            y[i] += y[i - 1]      # tmp = y[i]; tmp = tmp + y[i-1]; y[i] = tmp
            y[i] *= 0.9
        return np.sum(y ** 2)
    check(f, np.linspace(0.2, 1.0, 6))


def test_inplace_operators_on_dual_values():
    x, v = np.abs(X) + 0.5, rng.standard_normal(X.shape)

    def f(x):
        y = x.copy()
        y += x ** 2
        y *= np.sin(x)
        y /= 2.0 + x
        y -= 1.0
        y **= 2
        return y

    _, dy = mp.jvp(f, (x,), (v,))
    d = 1e-6
    np.testing.assert_allclose(dy, (f(x + d * v) - f(x - d * v)) / (2 * d), rtol=1e-6, atol=1e-8)


def test_zero_dimensional_buffers():
    def f(x):
        s = np.zeros_like(np.sum(x))     # a 0-d array, writable
        s[()] = x[0, 0] * 2.0
        s += np.sum(x ** 2)
        s[...] = s * x[1, 1]
        return s
    check(f, X)


def test_advanced_index_inplace_add_counts_repeats_once_as_numpy():
    def f(x):
        y = x[0].copy()
        y[[0, 0, 2]] += x[1, :3] ** 2    # tmp = y[[0, 0, 2]]; tmp += ...; y[[0, 0, 2]] = tmp
        return np.sum(y * np.arange(1.0, 6.0))
    check(f, X)


def test_inplace_shape_mismatch_is_numpys_error():
    def f(x):
        y = x[0].copy()
        y += x          # (5,) += (4, 5): NumPy refuses
        return np.sum(y)
    with pytest.raises(ValueError, match="non-broadcastable output"):
        mp.grad(f)(X)


# --- ufunc out= and functions that write ----------------------------------------------------------
def test_ufunc_out_argument():
    def f(x):
        y = np.empty_like(x)
        r = np.sin(x, out=y)
        assert r is y
        np.multiply(y, x, out=y)
        np.add(y, 1.0, out=(y,), where=x > 0)
        s = np.zeros_like(x, shape=(5,))
        np.sum(y, axis=0, out=s)
        return np.sum(y) + np.sum(s ** 2)

    def functional(x):
        y = np.where(x > 0, np.sin(x) * x + 1.0, np.sin(x) * x)
        return np.sum(y) + np.sum(np.sum(y, axis=0) ** 2)
    check(f, X, ref=functional)


def test_copyto_put_fill_diagonal_add_at():
    def f(x):
        y = np.zeros_like(x)
        np.copyto(y, x ** 2, where=x > 0)
        np.put(y, [0, 5, 5], x[1, :3])
        y.put([7], x[0, 0] * 2.0)
        np.fill_diagonal(y, x[0, 0])
        np.add.at(y, ([0, 0, 1], [1, 1, 2]), x[2, :3])
        np.subtract.at(y, (3, slice(None)), x[3])
        return np.sum(y * x)
    check(f, X)


def test_fill_and_sort_in_place():
    def f(x):
        y = x.copy()
        y.sort(axis=1)
        z = np.empty_like(x)
        z.fill(0.0)
        z[0] = y[0]
        return np.sum(y * np.arange(5.0)) + np.sum(z ** 2)
    check(f, X)


# --- buffer constructors --------------------------------------------------------------------------
CONSTRUCTORS = {
    "empty_like": lambda x: np.empty_like(x),
    "zeros_like": lambda x: np.zeros_like(x),
    "ones_like": lambda x: np.ones_like(x),
    "full_like": lambda x: np.full_like(x, 3.0),
    "zeros_like shape": lambda x: np.zeros_like(x, shape=(2, 4, 5)),
    "empty_like shape": lambda x: np.empty_like(x, shape=(4, 5)),
    "zeros like=": lambda x: np.zeros((4, 5), like=x),
    "empty like=": lambda x: np.empty((4, 5), like=x),
    "ones like=": lambda x: np.ones(5, like=x),
    "full like=": lambda x: np.full((4, 5), 2.0, like=x),
    "eye like=": lambda x: np.eye(4, 5, like=x),
    "copy": lambda x: np.copy(x),
    ".copy()": lambda x: x.copy(),
}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_buffer_constructors(name):
    make = CONSTRUCTORS[name]

    def f(x):
        y = make(x)
        y[..., 1] = x[:, 0] if np.ndim(y) > 1 else x[0, 0]
        y[..., 2:4] = np.exp(x[0, 2:4])
        return np.sum(W[0, 1:4] * y[..., 1:4])  # only what was written: empty* is garbage
    check(f, X)


def test_constructors_with_a_tracked_fill_value():
    def f(x):
        a = np.full_like(x, x[2, 2])
        b = np.full((3,), x[1, 1], like=x)
        c = np.full(5, fill_value=np.sin(x[0, 0]), like=x)
        return np.sum(a * x) + np.sum(b * x[3, :3]) + np.sum(c * x[0])
    check(f, X)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_buffers_keep_the_dtype(dtype):
    x = X.astype(dtype)

    def f(x):
        y = np.empty_like(x)
        for i in range(len(x)):
            y[i] = np.sin(x[i])
        z = np.zeros(5, like=x, dtype=dtype)
        z += x[0]
        return np.sum(y) + np.sum(z)
    g = mp.grad(f)(x)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, np.cos(x) + (np.arange(4) == 0)[:, None], rtol=1e-6)


def test_non_float_buffers_stay_plain():
    def f(x):
        idx = np.zeros_like(x, dtype=np.intp)
        idx[0, 0] = 1
        assert type(idx) is np.ndarray
        return np.sum(x[idx[0]])
    np.testing.assert_allclose(mp.grad(f)(X)[1], np.full(5, 1.0))


# --- the programs of the issue --------------------------------------------------------------------
def test_naive_map_sin_cos_exp():
    x = rng.standard_normal((5, 6))
    check(lambda x: naive_map_sin_cos_exp(np, x), x,
          ref=lambda x: np.sum(np.sin(np.cos(np.exp(x)))))


def cholesky_in_place(A):
    """Left-looking Cholesky, overwriting a copy of A in place, column by column."""
    L = A.copy()
    n = L.shape[0]
    for j in range(n):
        L[j, j] = np.sqrt(L[j, j] - L[j, :j] @ L[j, :j])
        L[j + 1:, j] = (L[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
        L[j, j + 1:] = 0.0
    return L


def _spd(n):
    B = rng.standard_normal((n, n))
    return B @ B.T + n * np.eye(n)


def test_in_place_cholesky():
    A = _spd(5)
    np.testing.assert_allclose(cholesky_in_place(A), np.linalg.cholesky(A), rtol=1e-12)
    C = rng.standard_normal((5, 5))

    def f(A):
        L = cholesky_in_place(A)
        return np.sum(np.log(np.diagonal(L))) + np.sum(C * L)

    def functional(A):
        L = np.linalg.cholesky(A)
        return np.sum(np.log(np.diagonal(L))) + np.sum(C * L)
    check(f, A, ref=None)
    # The loop reads only the lower triangle, np.linalg.cholesky's rule spreads the gradient
    # symmetrically: the two agree on every symmetric direction, i.e. their symmetric parts do.
    sym = lambda G: (G + G.T) / 2
    np.testing.assert_allclose(sym(mp.grad(f)(A)), sym(mp.grad(functional)(A)), rtol=1e-10,
                               atol=1e-12)
    V = sym(rng.standard_normal((5, 5)))
    np.testing.assert_allclose(sym(mp.hvp(f)(A, V)), sym(mp.hvp(functional)(A, V)), rtol=1e-8,
                               atol=1e-10)


def test_in_place_cholesky_of_the_input_itself():
    def f(A):
        n = A.shape[0]
        for j in range(n):            # overwrites the caller's array, as LAPACK's potrf does
            A[j, j] = np.sqrt(A[j, j] - A[j, :j] @ A[j, :j])
            A[j + 1:, j] = (A[j + 1:, j] - A[j + 1:, :j] @ A[j, :j]) / A[j, j]
        return np.sum(np.log(np.diagonal(A)))
    A = _spd(4)
    A0 = A.copy()
    g = mp.grad(f)(A)
    np.testing.assert_allclose(np.tril(A), np.linalg.cholesky(A0), rtol=1e-12)  # f's writes
    # d/dA log det(A)/2, all its weight on the lower triangle that the algorithm reads
    want = np.tril(np.linalg.inv(A0)) - 0.5 * np.diag(np.diag(np.linalg.inv(A0)))
    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g, fd_grad(f, A0), rtol=1e-6, atol=1e-8)
    V = rng.standard_normal((4, 4))
    np.testing.assert_allclose(mp.hvp(f)(A0.copy(), V), fd_hvp(f, A0, V), rtol=1e-5, atol=1e-7)


def euler(y0, theta, h=0.05, steps=40):
    """Explicit Euler for a damped nonlinear oscillator, writing into a preallocated trajectory."""
    traj = np.empty_like(y0, shape=(steps + 1,) + y0.shape)
    traj[0] = y0
    for k in range(steps):
        y = traj[k]
        dy = np.empty_like(y)
        dy[0] = y[1]
        dy[1] = -theta[0] * np.sin(y[0]) - theta[1] * y[1]
        traj[k + 1] = y + h * dy
    return traj


def euler_functional(y0, theta, h=0.05, steps=40):
    ys = [y0]
    for _ in range(steps):
        y = ys[-1]
        ys.append(y + h * np.stack([y[1], -theta[0] * np.sin(y[0]) - theta[1] * y[1]]))
    return np.stack(ys)


def test_explicit_euler_into_a_preallocated_trajectory():
    theta = np.array([2.0, 0.3])
    y0 = np.array([1.0, 0.0])
    np.testing.assert_allclose(euler(y0, theta), euler_functional(y0, theta), rtol=1e-14)
    p = np.concatenate([y0, theta])

    def f(p):
        return np.sum(euler(p[:2], p[2:])[::4] ** 2)

    def functional(p):
        return np.sum(euler_functional(p[:2], p[2:])[::4] ** 2)
    check(f, p, ref=functional)


def test_cumulative_sum_loop_with_inplace_add():
    def f(x):
        c = x.copy()
        for i in range(1, len(c)):
            c[i] += c[i - 1]
        return np.sum(np.sin(c) * c)

    def functional(x):
        c = np.cumsum(x)
        return np.sum(np.sin(c) * c)
    check(f, np.linspace(-1.0, 1.0, 8), ref=functional)


def test_cumulative_sum_of_rows_with_inplace_add():
    def f(x):
        c = x.copy()
        for i in range(1, len(c)):
            c[i] += c[i - 1]      # a row view, written in place and propagated to c
        return np.sum(c ** 3)
    check(f, X, ref=lambda x: np.sum(np.cumsum(x, axis=0) ** 3))


def test_hessian_of_a_write_loop_with_lanes():
    def f(x):
        c = np.zeros_like(x)
        c[0] = x[0]
        for i in range(1, len(x)):
            c[i] = c[i - 1] * 0.5 + x[i] ** 2
        c[np.array([0, 2])] = c[np.array([2, 0])]   # advanced indices, on every lane
        return np.sum(c ** 2)
    x = np.linspace(0.1, 0.9, 5)
    H = mp.hessian(f, chunk_size=3)(x)
    for k in range(5):
        e = np.zeros(5)
        e[k] = 1.0
        np.testing.assert_allclose(H[:, k], fd_hvp(f, x, e), rtol=1e-5, atol=1e-7)


def test_jvp_with_lanes_through_advanced_writes():
    def f(x):
        y = np.zeros_like(x, shape=(3, 4))
        y[[0, 2], 1:3] = x[:2, None] * x[2:4]
        y[..., np.array([3, 0])] = np.exp(x[:3, None])
        return y
    x = np.linspace(0.1, 0.9, 4)
    V = rng.standard_normal((3, 4))
    _, dY = mp.jvp(f, (x,), (V,), lanes=True)
    for k in range(3):
        _, dy = mp.jvp(f, (x,), (V[k],))
        np.testing.assert_allclose(dY[k], dy, rtol=1e-14)
    d = 1e-6
    np.testing.assert_allclose(dY[0], (f(x + d * V[0]) - f(x - d * V[0])) / (2 * d), rtol=1e-6,
                               atol=1e-9)


def test_forward_writes_reach_views_and_do_not_touch_other_tangents():
    def f(x):
        y = x + 1.0            # a fresh array whose tangent must not be x's
        head = y[:2]
        y[0] = 0.0
        y[1:] = x[1:] ** 2
        return np.sum(head) + np.sum(x)
    x, v = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
    _, dy = mp.jvp(f, (x,), (v.copy(),))
    assert dy == pytest.approx(0.0 + 2 * 2.0 + 3.0)


# --- inputs that f writes into -------------------------------------------------------------------
def test_mutating_an_input_of_grad():
    def f(x):
        x[0] = x[0] ** 2
        x *= 2.0
        return np.sum(np.sin(x))
    x = X.copy()
    g = mp.grad(f)(x)
    want_x = X.copy()
    want_x[0] = want_x[0] ** 2
    want_x *= 2.0
    np.testing.assert_array_equal(x, want_x)  # the caller's array holds what f wrote
    np.testing.assert_allclose(g, fd_grad(f, X), rtol=1e-6, atol=1e-8)  # at the entry value


def test_jvp_of_a_function_writing_into_its_input_and_reading_an_earlier_view():
    def f(x):
        head = x[:2]
        x[0] = 0.0            # head sees it, as in NumPy
        return np.sum(head * head) + np.sum(x)
    x, v = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])
    y, dy = mp.jvp(f, (x.copy(),), (v.copy(),))
    assert y == pytest.approx(4.0 + 5.0) and dy == pytest.approx(4.0 + 2.0)
    np.testing.assert_allclose(mp.grad(f)(x.copy()), [0.0, 5.0, 1.0])


def test_mutating_an_input_of_hvp_leaves_the_direction_alone():
    def f(x):
        x[1:] = x[1:] * x[:-1]
        return np.sum(x ** 3)
    x0, v = np.linspace(0.5, 1.5, 5), rng.standard_normal(5)
    x, v0 = x0.copy(), v.copy()
    hv = mp.hvp(f)(x, v)
    np.testing.assert_array_equal(v, v0)
    assert not np.array_equal(x, x0)
    np.testing.assert_allclose(hv, fd_hvp(f, x0, v0), rtol=1e-5, atol=1e-7)


def test_vjp_pullback_twice_with_writes_and_buffers_hold_final_values():
    def f(x):
        y = np.zeros_like(x)
        for i in range(len(x)):
            y[i] = np.sin(x[i]) * (y[i - 1] if i else 1.0)
        return y
    x = np.linspace(0.2, 1.0, 4)
    y, pb = mp.vjp(f, x)
    want = f(x.copy())
    np.testing.assert_allclose(y, want)
    g1, = pb(np.ones(4))
    g2, = pb(np.ones(4))
    np.testing.assert_allclose(g1, g2)
    np.testing.assert_allclose(y, want)  # restored and redone by each sweep
    np.testing.assert_allclose(g1, fd_grad(lambda x: np.sum(f(x)), x), rtol=1e-6)


def test_a_write_after_the_output_is_undone_for_the_sweep():
    def f(x):
        y = np.sin(x)
        out = np.sum(y * x)
        x[0] = 100.0      # sin's pullback must still read the entry value of x
        y[1] = 7.0
        return out
    g = mp.grad(f)(X.copy())
    np.testing.assert_allclose(g, np.sin(X) + X * np.cos(X), rtol=1e-14)


# --- errors ---------------------------------------------------------------------------------------
def _next_call_works():
    np.testing.assert_allclose(mp.grad(lambda x: np.sum(x ** 2))(X), 2 * X)


def test_write_into_a_plain_array_element_raises_the_helpful_error():
    def f(x):
        y = np.zeros(4)
        for i in range(4):
            y[i] = x[i, 0]
        return np.sum(y)
    # (NumPy re-raises it as "ValueError: setting an array element with a sequence"; grad
    # raises the TrackingLostError behind that)
    with pytest.raises(mp.TrackingLostError) as err:
        mp.grad(f)(X)
    msg = str(err.value)
    assert "written into a plain NumPy array" in msg
    assert "np.zeros_like(x, shape=" in msg and "like=x" in msg
    _next_call_works()


@pytest.mark.parametrize("write", [
    lambda y, x: y.__setitem__(slice(0, 2), x[0, :2]),
    lambda y, x: np.sin(x[0, :4], out=y),
    lambda y, x: y.__iadd__(x[0, :4]),
    lambda y, x: np.copyto(y, x[1, :4]),
], ids=["slice", "out=", "+=", "copyto"])
def test_writes_into_plain_arrays_raise_tracking_lost(write):
    def f(x):
        y = np.zeros(4)
        write(y, x)
        return np.sum(y)
    with pytest.raises(mp.TrackingLostError, match=r"plain NumPy array.*np\.zeros_like\(x, shape="):
        mp.grad(f)(X)
    _next_call_works()


def test_dual_written_into_a_plain_array():
    def f(x):
        y = np.zeros(3)
        y[0] = x[0]
        return y
    with pytest.raises(mp.TrackingLostError) as err:
        mp.jvp(f, (np.ones(3),), (np.ones(3),))
    assert "like=x" in str(err.value)
    y, dy = mp.jvp(lambda x: x * 2, (np.ones(3),), (np.ones(3),))
    np.testing.assert_allclose(dy, 2.0)


def test_writes_through_rearranging_views():
    def f(x):
        y = x.copy()
        t = y.T
        t[0, 1] = np.sin(x[0, 0])         # y[1, 0]
        flat = y.reshape(-1)
        flat[7] = x[3, 3] ** 2            # y[1, 2]
        y.ravel()[[0, 19]] = x[2, :2]     # chained: an index write into a raveled view
        np.swapaxes(y[None], 0, 2)[4, 1, 0] = 1.0   # y[1, 4]
        y[2, 2] = 5.0                     # t and flat are read after this: viewed again
        return np.sum(W * y ** 2) + np.sum(t[0] * x[:, 1]) + flat[12] * x[0, 0]
    check(f, X)


@pytest.mark.parametrize("view", [
    lambda y: y.T, lambda y: y.mT, lambda y: y.transpose(1, 0), lambda y: np.transpose(y),
    lambda y: y.reshape(2, 10), lambda y: np.reshape(y, -1), lambda y: y.ravel(),
    lambda y: np.ravel(y), lambda y: y.swapaxes(0, 1), lambda y: np.moveaxis(y[None], 0, 2),
    lambda y: np.expand_dims(y, 1), lambda y: y[:, None].squeeze(1),
    lambda y: np.squeeze(y[None], axis=0),
], ids=["T", "mT", "transpose()", "np.transpose", "reshape", "np.reshape", "ravel", "np.ravel",
        "swapaxes", "moveaxis", "expand_dims", "squeeze", "np.squeeze"])
def test_write_through_each_rearranging_view(view):
    def f(x):
        y = x.copy()
        v = view(y)
        v[(0,) * v.ndim] = x[1, 1] ** 2   # y[0, 0] in every one of these views
        v *= 2.0                          # all of y
        y[3, 4] = x[0, 1]                 # v is read again below: viewed again
        return np.sum(W * y ** 2) + np.sum(v * v)
    check(f, X)


def test_a_reshape_that_copies_is_independent():
    def f(x):
        y = x.T.copy()
        z = y.T.reshape(-1)   # y.T is not contiguous: reshape copies, as in NumPy
        z[0] = 100.0
        return np.sum(y * x.T) + np.sum(z)
    check(f, X)


def test_flatten_and_copy_are_independent_buffers():
    def f(x):
        a, b, c = x.flatten(), np.copy(x), x.copy()
        a[0] = b[1, 1] = c[2, 2] = 10.0
        return np.sum(x ** 2) + np.sum(a * b.ravel() * c.ravel())
    check(f, X)


def test_aliasing_through_views_without_provenance_is_a_mutation_error():
    def f(x):
        y = x.copy()
        a, b = np.split(y, 2)   # views of y, made inside a rule
        a[0, 0] = 1.0
        return np.sum(y)
    with pytest.raises(mp.MutationError, match="memory was overwritten.*np.split"):
        mp.grad(f)(X)
    _next_call_works()


def test_an_argument_passed_twice_and_written_is_a_mutation_error():
    def f(a, b):
        a[0, 0] = 1.0
        return np.sum(b)
    x = X.copy()
    with pytest.raises(mp.MutationError, match="argument passed twice"):
        mp.grad(f, argnums=(0, 1))(x, x)
    ga, gb = mp.grad(f, argnums=(0, 1))(X.copy(), X.copy())  # separate arrays: fine
    np.testing.assert_array_equal(gb, np.ones_like(X))
    _next_call_works()


def test_writing_into_a_stale_handle_is_a_mutation_error():
    def f(x):
        y = x.copy()
        a, b = np.split(y, 2)
        a[0, 0] = 2.0
        y[1, 1] = 3.0         # y's memory changed under it through a
        return np.sum(y)
    with pytest.raises(mp.MutationError, match="cannot write into"):
        mp.grad(f)(X)
    _next_call_works()


def test_read_only_buffer_is_numpys_error():
    def f(x):
        y = np.broadcast_to(x[0], (3, 5))
        y[0, 0] = 1.0
        return np.sum(y)
    with pytest.raises(ValueError, match="read-only"):
        mp.grad(f)(X)
    _next_call_works()


def test_no_write_means_no_copy_and_no_checks():
    with mp.Tape() as tape:
        x = tape.track(X)
        np.sum(x * 2)
    assert type(tape) is mp.Tape and x._value is X
    with mp.Tape() as tape:
        x = tape.track(X.copy())
        x[0, 0] = 1.0
    assert type(tape) is not mp.Tape  # the tape that saw a write checks for aliasing


def test_jvp_of_a_function_writing_its_input_leaves_the_direction_alone():
    def f(x):
        x[0] = 2 * x[1]
        return np.sum(x ** 2)
    x, v = np.array([1.0, 2.0, 3.0]), np.ones(3)
    y, dy = mp.jvp(f, (x,), (v,))
    assert y == 29.0 and dy == 26.0          # (2x₁)² + x₁² + x₂², along v
    np.testing.assert_array_equal(x, [4.0, 2.0, 3.0])  # the primal holds what f wrote
    np.testing.assert_array_equal(v, np.ones(3))      # the caller's direction does not
