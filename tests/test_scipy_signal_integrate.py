"""mooncake_py.scipy.signal (convolve, correlate, lfilter) and mooncake_py.scipy.integrate
(trapezoid, simpson, cumulative_trapezoid): SciPy's values, every mode of differentiation."""
import numpy as np
import pytest

ss = pytest.importorskip("scipy.signal")
si = pytest.importorskip("scipy.integrate")

import mooncake_py as mp  # noqa: E402
from mooncake_py.scipy import signal, integrate
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape)


# --- convolve, correlate ------------------------------------------------------------------------
SHAPES = [((7,), (3,)), ((3,), (6,)), ((6,), (4,)), ((5, 4), (2, 3)), ((2, 3), (4, 5)),
          ((3, 4, 2), (2, 2, 2))]


@pytest.mark.parametrize("fn", [signal.convolve, signal.correlate])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_convolve_correlate(fn, mode, sa, sb):
    test_rule(lambda a, b: fn(a, b, mode), rand(*sa), rand(*sb), ndirs=1)


def test_plain_calls_are_scipy():
    a, b = rand(6, 3), rand(2, 2)
    for mode in ("full", "same", "valid"):
        np.testing.assert_array_equal(signal.convolve(a, b, mode), ss.convolve(a, b, mode))
        np.testing.assert_array_equal(signal.correlate(a, b, mode), ss.correlate(a, b, mode))
    x = rand(8)
    np.testing.assert_array_equal(signal.lfilter([1.0, 0.5], [1.0, -0.2], x),
                                  ss.lfilter([1.0, 0.5], [1.0, -0.2], x))
    np.testing.assert_array_equal(integrate.simpson(x, dx=0.1), si.simpson(x, dx=0.1))


def test_convolve_method_keyword_and_constant_kernel():
    k = rand(3)
    test_rule(lambda a: signal.convolve(a, k, "same", method="fft"), rand(9), rtol=1e-6)
    # convolution with a fixed kernel is linear: its Jacobian is the Toeplitz matrix of k
    jac = mp.jacobian(lambda a: signal.convolve(a, k, "full"))(np.zeros(4))
    want = np.array([[k[i - j] if 0 <= i - j < 3 else 0.0 for j in range(4)] for i in range(6)])
    np.testing.assert_allclose(jac, want, atol=1e-14)


@pytest.mark.parametrize("name", ["convolve2d", "correlate2d", "fftconvolve"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("sa,sb", [((5, 6), (2, 3)), ((3, 2), (4, 4)), ((6, 5), (4, 2))])
def test_2d_and_fft_spellings(name, mode, sa, sb):
    fn = getattr(signal, name)
    a, b = rand(*sa), rand(*sb)
    np.testing.assert_array_equal(fn(a, b, mode), getattr(ss, name)(a, b, mode))
    test_rule(lambda a, b: fn(a, b, mode), a, b, ndirs=1)


def test_2d_and_fft_refusals():
    with pytest.raises(mp.MissingRuleError, match="boundary"):
        mp.grad(lambda a: np.sum(signal.convolve2d(a, a, boundary="wrap")))(rand(3, 3))
    with pytest.raises(mp.MissingRuleError, match="axes"):
        mp.grad(lambda a: np.sum(signal.fftconvolve(a, a, axes=0)))(rand(3, 3))


def test_convolve_errors():
    with pytest.raises(ValueError, match="mode"):
        mp.grad(lambda a: np.sum(signal.convolve(a, a, "bogus")))(rand(3))
    with pytest.raises(ValueError, match="dimensionality"):
        mp.grad(lambda a: np.sum(signal.convolve(a, np.ones((2, 2)))))(rand(3))


# --- lfilter ------------------------------------------------------------------------------------
A_STABLE = np.array([1.2, -0.5, 0.2])


@pytest.mark.parametrize("sb,sa,sx,axis", [((3,), (3,), (9,), -1), ((2,), (1,), (8,), -1),
                                           ((4,), (2,), (2, 7), -1), ((2,), (3,), (6, 3), 0),
                                           ((5,), (3,), (3,), -1)])
def test_lfilter(sb, sa, sx, axis):
    a = A_STABLE[:sa[0]] if sa[0] <= 3 else rand(*sa)
    test_rule(lambda b, a, x: signal.lfilter(b, a, x, axis=axis), rand(*sb), a, rand(*sx))


def test_lfilter_coefficient_lists_and_scalar_a():
    x = rand(7)
    test_rule(lambda p, x: signal.lfilter([1.0, p], [1.0, -0.3 * p], x), 0.7, x)
    test_rule(lambda b, x: signal.lfilter(b, 2.0, x), rand(3), x)


def test_lfilter_closed_form():
    # one-pole filter y[n] = x[n] + p y[n-1] on an impulse: y[n] = pⁿ, dΣy/dp = Σ n pⁿ⁻¹
    p, n = 0.6, np.arange(6)
    g = mp.grad(lambda p: np.sum(signal.lfilter([1.0], [1.0, -p], np.eye(6)[0])))(p)
    np.testing.assert_allclose(g, np.sum(n * p ** np.maximum(n - 1, 0)), rtol=1e-12)


def test_lfilter_second_order():
    x = rand(6)
    f = lambda a1: np.sum(signal.lfilter([1.0, 0.5], np.stack([1.0, a1]), x) ** 2)  # noqa: E731
    h = mp.hessian(f)(-0.4)
    eps = 1e-5
    fd = (mp.grad(f)(-0.4 + eps) - mp.grad(f)(-0.4 - eps)) / (2 * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-6)


def test_complex_values():
    c = lambda *s: rand(*s) + 1j * rand(*s)  # noqa: E731
    test_rule(lambda a, b: signal.convolve(a, b, "same"), c(5), c(3))
    test_rule(lambda a, b: signal.convolve(a, b), c(4, 2), rand(2, 2))
    test_rule(signal.lfilter, c(2), np.array([1.0, -0.3 + 0.2j]), c(6))
    test_rule(lambda a, b: signal.correlate(a, b, "same"), c(5), c(3))  # conjugates b
    test_rule(lambda a, b: signal.correlate(a, b), rand(4, 2), c(2, 2))


def test_sosfilt():
    sos = np.array([[0.3, 0.2, 0.1, 1.0, -0.4, 0.1], [1.0, -0.5, 0.2, 1.0, 0.3, 0.05]])
    x = rand(3, 8)
    np.testing.assert_allclose(signal.sosfilt(sos, x), ss.sosfilt(sos, x), rtol=1e-13)
    free = np.delete(sos, 3, axis=1)  # a0 must stay 1 (SciPy checks it)

    def with_a0(p):
        return np.concatenate([p[:, :3], np.ones((len(p), 1)), p[:, 3:]], axis=1)
    test_rule(lambda p, x: signal.sosfilt(with_a0(p), x), free, x)
    test_rule(lambda p, x: signal.sosfilt(with_a0(p), x, axis=0), free[:1], rand(6, 2))
    with pytest.raises(ValueError, match="ones"):
        mp.grad(lambda s: np.sum(signal.sosfilt(s, x)))(2 * sos)


@pytest.mark.parametrize("nb,na,shape,axis", [(3, 3, (7,), -1), (2, 4, (6,), -1),
                                              (4, 2, (2, 5), -1), (3, 3, (5, 2), 0),
                                              (5, 3, (2,), -1)])
def test_lfilter_initial_state(nb, na, shape, axis):
    b, a, x = rand(nb), np.r_[1.3, 0.3 * rand(na - 1)], rand(*shape)
    zshape = list(shape)
    zshape[axis] = max(na, nb) - 1
    zi = rand(*zshape)
    test_rule(lambda b, a, x, zi: signal.lfilter(b, a, x, axis=axis, zi=zi), b, a, x, zi)


def test_lfilter_state_continues_a_split_signal():
    # filtering x in two pieces, handing the state on, is filtering it whole
    b, a, x = rand(3), np.array([1.0, -0.4, 0.1]), rand(10)

    def pieces(x):
        y1, z = signal.lfilter(b, a, x[:4], zi=0 * x[:2])
        return np.concatenate([y1, signal.lfilter(b, a, x[4:], zi=z)[0]])
    np.testing.assert_allclose(pieces(x), ss.lfilter(b, a, x), rtol=1e-12)
    np.testing.assert_allclose(mp.jacobian(pieces)(x),
                               mp.jacobian(lambda x: signal.lfilter(b, a, x))(x), atol=1e-12)


def test_lfilter_zi():
    test_rule(signal.lfilter_zi, np.array([0.2, 0.3, 0.1]), np.array([1.0, -0.5, 0.2]))
    test_rule(signal.lfilter_zi, rand(4), np.array([2.0, 0.5, -0.1]))


@pytest.mark.parametrize("kw,shape", [({}, (20,)), (dict(padtype="even"), (20,)),
                                      (dict(padtype="constant"), (3, 20)),
                                      (dict(padtype=None), (15,)), (dict(padlen=4, axis=0), (12, 2))])
def test_filtfilt(kw, shape):
    b, a, x = np.array([0.2, 0.3, 0.1]), np.array([1.0, -0.5, 0.2]), rand(*shape)
    np.testing.assert_allclose(signal.filtfilt(b, a, x, **kw), ss.filtfilt(b, a, x, **kw),
                               rtol=1e-12)
    test_rule(lambda b, a, x: signal.filtfilt(b, a, x, **kw), b, a, x, ndirs=1)


def test_filtfilt_refusals():
    with pytest.raises(mp.MissingRuleError, match="gust"):
        mp.grad(lambda x: np.sum(signal.filtfilt([1.0], [1.0, -0.2], x, method="gust")))(rand(20))
    with pytest.raises(ValueError, match="padlen"):
        mp.grad(lambda x: np.sum(signal.filtfilt([1.0], [1.0, -0.2], x)))(rand(5))


def test_float32():
    x = rand(6).astype(np.float32)
    for f in (lambda x: signal.convolve(x, x, "same"),
              lambda x: signal.lfilter(np.ones(2, np.float32), np.array([1, -.5], np.float32), x),
              lambda x: integrate.cumulative_trapezoid(x)):
        assert f(x).dtype == np.float32
        assert mp.grad(lambda x: np.sum(f(x)))(x).dtype == np.float32
        check_grads(lambda x: np.sum(f(x)), x)


# --- integrate ----------------------------------------------------------------------------------
XS = np.sort(RNG.random(7)) * 3


@pytest.mark.parametrize("fn", [integrate.trapezoid, integrate.simpson,
                                integrate.cumulative_trapezoid])
@pytest.mark.parametrize("n", [2, 3, 6, 7])
def test_integrate_y_and_x(fn, n):
    test_rule(lambda y, x: fn(y, x=x), rand(n), XS[:n])
    test_rule(lambda y, dx: fn(y, dx=dx), rand(n), 0.3)


@pytest.mark.parametrize("fn", [integrate.trapezoid, integrate.simpson,
                                integrate.cumulative_trapezoid])
def test_integrate_axes_and_nd_x(fn):
    test_rule(lambda y, x: fn(y, x, axis=0), rand(6, 2), XS[:6])
    test_rule(lambda y, x: fn(y, x), rand(2, 5), np.sort(RNG.random((2, 5)), axis=1))
    test_rule(lambda y: fn(y, axis=1), rand(2, 6, 2))


def test_integrate_lists_of_tracked_samples():
    x = [0.0, 0.5, 1.5, 2.0]
    for fn in (integrate.trapezoid, integrate.simpson):
        f = lambda t: fn([t, t ** 2, np.sin(t), 1.0], x=x)  # noqa: E731
        test_rule(f, 0.7)
        assert np.isclose(f(0.7), fn([0.7, 0.49, np.sin(0.7), 1.0], x=x))


CUMSIMP = [((7,), {}), ((6,), dict(x=XS[:6])), ((7,), dict(dx=0.3)),
           ((6, 2), dict(x=XS[:6], axis=0)), ((2, 5), dict(initial=0.5)), ((2,), {}),
           ((2,), dict(initial=0))]


@pytest.mark.parametrize("shape,kw", CUMSIMP)
def test_cumulative_simpson(shape, kw):
    y = rand(*shape)
    tracked, _ = mp.vjp(lambda y: integrate.cumulative_simpson(y, **kw), y)
    np.testing.assert_allclose(tracked, si.cumulative_simpson(y, **kw), rtol=1e-12, atol=1e-14)
    test_rule(lambda y: integrate.cumulative_simpson(y, **kw), y)


def test_cumulative_simpson_nodes_spacing_initial():
    y = rand(7)
    test_rule(lambda y, x: integrate.cumulative_simpson(y, x=x), y, XS)
    test_rule(lambda y, dx: integrate.cumulative_simpson(y, dx=dx), y, 0.3)
    test_rule(lambda y, c: integrate.cumulative_simpson(y, initial=c), y, 0.5)
    with pytest.raises(ValueError, match="increasing"):
        mp.grad(lambda y: np.sum(integrate.cumulative_simpson(y, x=XS[::-1])))(y)


def test_cumulative_trapezoid_initial():
    test_rule(lambda y: integrate.cumulative_trapezoid(y, initial=0), rand(5))
    with pytest.raises(ValueError, match="initial"):
        mp.grad(lambda y: np.sum(integrate.cumulative_trapezoid(y, initial=1)))(rand(3))


def test_integrate_closed_forms():
    x = np.linspace(0.0, 2.0, 9)
    # Simpson integrates cubics exactly: d/dc ∫ c x³ = 4
    np.testing.assert_allclose(mp.grad(lambda c: integrate.simpson(c * x ** 3, x=x))(1.0), 4.0,
                               rtol=1e-12)
    # trapezoid in x: moving the last node by dx adds y_last · dx / 2 + ...; for y = 1, the
    # integral is x[-1] - x[0], so the gradient is (-1, 0, ..., 0, 1)
    g = mp.grad(lambda x: integrate.trapezoid(np.ones(9), x=x))(x)
    np.testing.assert_allclose(g, np.r_[-1.0, np.zeros(7), 1.0], atol=1e-14)
