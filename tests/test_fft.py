"""np.fft rules: every transform, norm, padding/truncation and axis choice against finite
differences (reverse, forward with lanes, forward-over-reverse), and closed forms."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule

RNG = np.random.default_rng(11)
Z = RNG.standard_normal((3, 6)) + 1j * RNG.standard_normal((3, 6))
X = RNG.standard_normal((3, 6))
X5 = RNG.standard_normal((4, 5))  # odd length: no Nyquist bin
F = np.fft


@pytest.fixture(autouse=True)
def _no_complex_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        yield


CASES = []
for _norm in (None, "ortho", "forward"):
    _k = dict(norm=_norm)
    CASES += [
        (F.fft, Z, _k), (F.fft, X, dict(_k, n=8)), (F.ifft, Z, dict(_k, n=4, axis=0)),
        (F.rfft, X, _k), (F.rfft, X5, _k), (F.rfft, X, dict(_k, n=9, axis=0)),
        (F.irfft, Z, _k), (F.irfft, Z, dict(_k, n=7)), (F.irfft, X, _k),
        (F.fftn, Z, _k), (F.ifftn, Z, dict(_k, s=(4, 4), axes=(0, 1))), (F.rfftn, X5, _k),
        (F.irfftn, Z, _k), (F.irfft2, Z, _k), (F.hfft, Z, _k), (F.ihfft, X, _k)]
CASES += [(F.rfft, X, dict(n=4)), (F.irfft, Z, dict(n=4, axis=0)),
          (F.rfftn, X, dict(s=(2, 7), axes=(0, 1))),
          (F.irfftn, Z, dict(s=(4, 5), axes=(0, 1))), (F.fftn, Z, dict(axes=(0,))), (F.fft2, Z, {}),
          (F.ifft2, Z, dict(s=(2, 8))), (F.rfft2, X5, {}), (F.fftshift, Z, {}),
          (F.ifftshift, X5, dict(axes=0)), (F.fftshift, X5, dict(axes=(1,)))]


@pytest.mark.parametrize("fn, x, kw", CASES,
                         ids=[f"{f.__name__}-{i}" for i, (f, _, _) in enumerate(CASES)])
def test_rule_fft(fn, x, kw):
    test_rule(fn, x, ndirs=2, **kw)


def test_parseval_gradient():
    # Σ|fft(x)|² = n·Σ|x|², so the gradient is 2n·x (real x: real gradient)
    g = mp.grad(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2))(X)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * 6 * X)
    gz = mp.grad(lambda z: np.sum(np.abs(np.fft.fft2(z, norm="ortho")) ** 2))(Z)
    np.testing.assert_allclose(gz, 2 * Z)


def test_rfft_roundtrip_and_float32():
    x = X.astype(np.float32)
    g = mp.grad(lambda x: np.sum(np.fft.irfft(np.fft.rfft(x), n=6) * x))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x, rtol=1e-5)


def test_hvp_through_fft_matches_finite_differences():
    f = lambda x: np.sum(np.abs(np.fft.rfft(x * x)) ** 3)  # noqa: E731
    v = RNG.standard_normal(X.shape)
    h = 1e-5
    fd = (mp.grad(f)(X + h * v) - mp.grad(f)(X - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(X, v), fd, rtol=1e-6, atol=1e-8)
