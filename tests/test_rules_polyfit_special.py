"""Rules for functions real programs call: np.polyfit, np.pad's linear_ramp and
reflect_type='odd', scipy.special.betainc (in x), yn and gammasgn, and
mooncake_py.scipy.stats.multivariate_normal's entropy and allow_singular=True. Each against
central finite differences, frule/rrule consistency and forward-over-reverse (test_rule), on
broadcast and non-contiguous inputs, and HVPs against finite differences of the gradient."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import check_grads, fd_gradient, test_rule

RNG = np.random.default_rng(0)


def _hvp_matches_fd_of_grad(f, x, v, h=1e-5, rtol=1e-6):
    hv = mp.hvp(f)(x, v)
    g = mp.grad(f)
    fd = (g(x + h * v) - g(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=rtol, atol=rtol * np.max(np.abs(fd)))


# --- np.polyfit ------------------------------------------------------------------------------------
PX = np.linspace(-1.0, 2.0, 9)
PY = np.cos(PX) + 0.1 * RNG.standard_normal(9)
PW = RNG.uniform(0.5, 2.0, 9)


@pytest.mark.parametrize("kw", [{}, {"w": PW}, {"rcond": 1e-10}], ids=["plain", "w", "rcond"])
@pytest.mark.parametrize("deg", [0, 1, 3])
def test_polyfit_matches_numpy_exactly_enough(deg, kw):
    from mooncake_py.rules.interpolation import _polyfit
    for y in (PY, np.stack([PY, PY ** 2], axis=1)):
        want = np.polyfit(PX, y, deg, **kw)
        np.testing.assert_allclose(_polyfit(PX, y, deg, **kw), want, rtol=1e-12, atol=1e-14)
        # and on tracked values, the same numbers
        y_val = mp.vjp(lambda y: np.polyfit(PX, y, deg, **kw), y)[0]
        np.testing.assert_allclose(y_val, want, rtol=1e-12, atol=1e-14)


def test_polyfit_rules_in_x_y_and_w():
    test_rule(np.polyfit, PX, PY, 3)  # in x and y
    test_rule(lambda x, y, w: np.polyfit(x, y, 2, w=w), PX, np.stack([PY, PY ** 2], 1), PW)
    # a non-contiguous y column and a broadcast-made weight
    test_rule(lambda y, w: np.polyfit(PX, y, 2, w=w), np.stack([PY, PY], 1)[:, 0],
              np.broadcast_to(np.float64(1.5), (9,)))


def test_polyfit_second_order():
    f = lambda y: np.sum(np.polyfit(PX, y, 2, w=PW) ** 2)  # noqa: E731
    check_grads(f, PY)
    _hvp_matches_fd_of_grad(f, PY, RNG.standard_normal(9))
    g = lambda x: np.sum(np.polyfit(x, PY, 2) ** 2)  # noqa: E731
    _hvp_matches_fd_of_grad(g, PX, RNG.standard_normal(9), rtol=1e-5)


def test_polyfit_full_and_cov_are_named_errors():
    for kw in ({"full": True}, {"cov": True}):
        with pytest.raises(mp.MissingRuleError, match="np.polyfit"):
            mp.grad(lambda y, kw=kw: np.sum(np.polyfit(PX, y, 1, **kw)[0]))(PY)


# --- np.pad: linear_ramp and reflect_type='odd' ------------------------------------------------------
X = RNG.uniform(-3.0, 3.0, (3, 4))


@pytest.mark.parametrize("width", [1, 2, 7, ((1, 5), (3, 0))])
@pytest.mark.parametrize("mode", ["reflect", "symmetric"])
def test_pad_odd_reflection(mode, width):
    # (7 > the length: NumPy's repeated reflections of the padded values)
    test_rule(np.pad, X, width, mode=mode, reflect_type="odd")
    y = mp.vjp(lambda x: np.pad(x, width, mode=mode, reflect_type="odd"), X)[0]
    np.testing.assert_allclose(y, np.pad(X, width, mode=mode, reflect_type="odd"), rtol=1e-14,
                               atol=1e-13)


@pytest.mark.parametrize("end_values", [0, 2.5, ((1.0, -2.0), (0.5, 3.0))], ids=str)
@pytest.mark.parametrize("width", [2, ((1, 2), (3, 0))])
def test_pad_linear_ramp(width, end_values):
    test_rule(np.pad, X, width, mode="linear_ramp", end_values=end_values)
    y = mp.vjp(lambda x: np.pad(x, width, mode="linear_ramp", end_values=end_values), X)[0]
    np.testing.assert_allclose(y, np.pad(X, width, mode="linear_ramp", end_values=end_values),
                               rtol=1e-14, atol=1e-14)


def test_pad_new_modes_keep_float32_and_second_order():
    x32 = X.astype(np.float32)
    assert mp.grad(lambda x: np.sum(np.pad(x, 2, mode="linear_ramp") ** 2))(x32).dtype == \
        np.float32
    f = lambda x: np.sum(np.pad(x, 3, mode="reflect", reflect_type="odd") ** 3)  # noqa: E731
    _hvp_matches_fd_of_grad(f, X, RNG.standard_normal(X.shape))


def test_pad_singleton_axis_odd_and_sparse_pattern():
    test_rule(np.pad, X[:1], ((2, 1), (1, 1)), mode="reflect", reflect_type="odd")
    H = mp.hessian(lambda x: np.sum(np.pad(x, 2, mode="linear_ramp", end_values=1.0) ** 2))(
        np.arange(1.0, 4.0))
    assert np.allclose(H, H.T) and H[0, 2] == 0.0


# --- scipy.special: betainc, yn, gammasgn ---------------------------------------------------------
U = RNG.uniform(0.1, 0.9, (3, 4))


def test_betainc_in_x_broadcast_against_a_and_b():
    sps = pytest.importorskip("scipy.special")
    test_rule(lambda x: sps.betainc(2.5, np.array([1.5, 3.0, 0.7, 4.0]), x), U)
    test_rule(lambda x: sps.betainc(np.array([[0.6], [2.0], [5.0]]), 1.5, x), U[0])
    test_rule(lambda x: mp.special.betainc(2.0, 3.0, x), U)
    _hvp_matches_fd_of_grad(lambda x: np.sum(sps.betainc(2.5, 1.5, x) ** 2), U[0],
                            RNG.standard_normal(4))


def test_betainc_edges_and_shape_parameters():
    sps = pytest.importorskip("scipy.special")
    g = mp.grad(lambda x: np.sum(sps.betainc(1.0, 1.0, x)))(np.array([0.0, 0.5, 1.0]))
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0])  # uniform: the density 1 at the edges
    for call, param in [(lambda a: sps.betainc(a, 3.0, 0.5), "'a'"),
                        (lambda b: sps.betainc(2.0, b, 0.5), "'b'")]:
        with pytest.raises(mp.MissingRuleError, match=param):
            mp.grad(call)(2.0)
        with pytest.raises(mp.MissingRuleError, match=param):
            mp.jvp(call, (2.0,), (1.0,))


def test_yn_and_gammasgn():
    sps = pytest.importorskip("scipy.special")
    test_rule(lambda x: sps.yn(2, x), U + 1.0)
    test_rule(lambda x: mp.special.yn(np.array([0, 1, 3, 2]), x), U + 1.0)
    test_rule(lambda x: sps.gammasgn(x) * x, U - 2.0)
    np.testing.assert_array_equal(mp.grad(lambda x: np.sum(sps.gammasgn(x)))(U - 2.0), 0.0)
    _hvp_matches_fd_of_grad(lambda x: np.sum(sps.yn(1, x) ** 2), U[0] + 1.0,
                            RNG.standard_normal(4))
    with pytest.raises(mp.MissingRuleError, match="'n'"):
        mp.grad(lambda n: sps.yn(n, 2.0))(1.0)


# --- multivariate_normal: entropy and allow_singular=True ------------------------------------------
def test_mvn_entropy_matches_scipy_and_differentiates():
    ss = pytest.importorskip("scipy.stats")
    from mooncake_py.scipy import stats
    A = RNG.standard_normal((3, 3))
    C = A @ A.T + np.eye(3)
    e = lambda C: stats.multivariate_normal.entropy(cov=C)  # noqa: E731
    assert np.isclose(mp.value_and_grad(e)(C)[0], ss.multivariate_normal.entropy(cov=C),
                      rtol=1e-13)
    check_grads(e, np.tril(C))  # one triangle read: finite differences at a non-symmetric input
    check_grads(lambda d: stats.multivariate_normal.entropy(np.zeros(3), d),
                np.array([1.0, 2.0, 0.5]))
    check_grads(lambda s: stats.multivariate_normal(np.zeros(3), s * C).entropy(), 1.5)
    _hvp_matches_fd_of_grad(lambda d: stats.multivariate_normal.entropy(np.zeros(3), d),
                            np.array([1.0, 2.0, 0.5]), RNG.standard_normal(3))


def _singular_cov():
    B = RNG.standard_normal((4, 2))
    return B, B @ B.T


def test_mvn_allow_singular_values_match_scipy():
    ss = pytest.importorskip("scipy.stats")
    from mooncake_py.scipy import stats
    B, C = _singular_cov()
    X = np.stack([B @ RNG.standard_normal(2) for _ in range(3)] + [RNG.standard_normal(4)])
    m = np.zeros(4)
    want = ss.multivariate_normal.logpdf(X, m, C, allow_singular=True)
    assert np.isneginf(want[-1])  # off the range: SciPy's -inf, kept
    got = mp.vjp(lambda m: stats.multivariate_normal.logpdf(X, m, C, allow_singular=True), m)[0]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    d = np.array([1.0, 0.0, 2.0])  # a singular diagonal covariance
    Xd = RNG.standard_normal((2, 3)) * [1.0, 0.0, 1.0]
    z = np.zeros(3)
    got = mp.vjp(lambda d: stats.multivariate_normal.logpdf(Xd, z, d, allow_singular=True),
                 d)[0]
    np.testing.assert_allclose(got, ss.multivariate_normal.logpdf(Xd, z, d, allow_singular=True))
    h = mp.value_and_grad(lambda C: stats.multivariate_normal.entropy(cov=C))(C)[0]
    assert np.isclose(h, ss.multivariate_normal.entropy(cov=C), rtol=1e-12)


def test_mvn_allow_singular_derivatives_along_the_range():
    pytest.importorskip("scipy.stats")
    from mooncake_py.scipy import stats
    B, C = _singular_cov()
    X = np.stack([B @ RNG.standard_normal(2) for _ in range(3)])
    f = lambda m: np.sum(stats.multivariate_normal.logpdf(X, m, C, allow_singular=True))  # noqa: E731
    m0 = B @ np.array([0.3, -0.2])  # the mean moves along the range: the points stay in support
    g = mp.grad(f)(m0)
    for v in (B[:, 0], B[:, 1]):
        fd = (f(m0 + 1e-6 * v) - f(m0 - 1e-6 * v)) / 2e-6
        assert np.isclose(g @ v, fd, rtol=1e-6)
    # the covariance along perturbations that keep its range: C(t) = B (I + t S) Bᵀ
    S = np.array([[0.4, 0.1], [0.1, -0.3]])
    phi = lambda t: np.sum(stats.multivariate_normal.logpdf(  # noqa: E731
        X, None, B @ (np.eye(2) + t * S) @ B.T, allow_singular=True))
    d1 = mp.grad(phi)(0.0)
    assert np.isclose(d1, (phi(1e-6) - phi(-1e-6)) / 2e-6, rtol=1e-6)
    d2 = mp.hessian(phi)(0.0)
    assert np.isclose(d2, (phi(1e-4) - 2 * phi(0.0) + phi(-1e-4)) / 1e-8, rtol=1e-4)
    e = lambda t: stats.multivariate_normal.entropy(cov=B @ (np.eye(2) + t * S) @ B.T)  # noqa: E731
    assert np.isclose(mp.grad(e)(0.0), (e(1e-6) - e(-1e-6)) / 2e-6, rtol=1e-6)
    assert np.isclose(fd_gradient(e, np.array(0.0)), mp.grad(e)(0.0), rtol=1e-6)
