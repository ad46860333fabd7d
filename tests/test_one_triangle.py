"""np.linalg.cholesky, eigh and eigvalsh read one triangle of their input: their derivatives are
with respect to the entries read, checked against finite differences at
non-symmetric inputs in every mode; on symmetric directions nothing changes."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, fd_gradient


def _spd_unsym(n, seed=0, batch=(), cplx=False):
    """A positive definite matrix plus a non-symmetric perturbation (so the triangle read
    matters), optionally complex and batched."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(batch + (n, n))
    if cplx:
        b = b + 1j * rng.standard_normal(batch + (n, n))
    a = b @ np.conjugate(np.swapaxes(b, -1, -2)) + n * np.eye(n)
    p = rng.standard_normal(batch + (n, n))
    if cplx:
        p = p + 1j * rng.standard_normal(batch + (n, n))
    return a + 0.3 * p


def _eigvecs_sq(a, UPLO="L"):
    return np.abs(np.linalg.eigh(a, UPLO)[1]) ** 2  # sign- and phase-invariant


CASES = [
    (np.linalg.cholesky, {}),
    (np.linalg.cholesky, {"upper": True}),
    (np.linalg.eigvalsh, {}),
    (np.linalg.eigvalsh, {"UPLO": "U"}),
    (_eigvecs_sq, {}),
    (_eigvecs_sq, {"UPLO": "U"}),
]


@pytest.mark.parametrize("fn,kw", CASES)
@pytest.mark.parametrize("n", [3, 20])  # 20: the BLAS paths of the Cholesky rules
def test_one_triangle_rules_match_finite_differences(fn, kw, n):
    test_rule(fn, _spd_unsym(n), **kw)


@pytest.mark.parametrize("fn,kw", CASES)
def test_one_triangle_rules_batched_and_complex(fn, kw):
    test_rule(fn, _spd_unsym(3, seed=1, batch=(2,)), **kw)
    test_rule(fn, _spd_unsym(3, seed=2, cplx=True), **kw)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_gradient_is_that_of_the_entries_read(uplo):
    a, c = _spd_unsym(4), np.random.default_rng(3).standard_normal((4, 4))
    upper = uplo == "U"
    fs = [lambda a: np.sum(np.linalg.cholesky(a, upper=upper) * c),
          lambda a: np.sum(np.linalg.eigvalsh(a, uplo) * c[0]),
          lambda a: np.sum(_eigvecs_sq(a, uplo) * c)]
    for f in fs:
        g = mp.grad(f)(a)
        np.testing.assert_allclose(g, fd_gradient(f, a), atol=1e-6)
        other = np.tril(g, -1) if upper else np.triu(g, 1)
        assert not other.any()  # the triangle not read has no influence


def test_symmetric_directions_unchanged():
    a = _spd_unsym(4)
    a = (a + a.T) / 2
    v = np.random.default_rng(4).standard_normal((4, 4))
    v = v + v.T
    f = lambda a: np.sum(np.log(np.diag(np.linalg.cholesky(a)))) + np.sum(np.linalg.eigvalsh(a) ** 3)
    g = mp.grad(f)(a)
    gsym = (g + g.T) / 2
    # the symmetric-input gradient: the same inner product with every symmetric direction
    np.testing.assert_allclose(np.sum(g * v), np.sum(gsym * v), rtol=1e-12)
    np.testing.assert_allclose(mp.jvp(f, (a,), (v,))[1], np.sum(g * v), rtol=1e-10)
    hv = mp.hvp(f)(a, v)
    fd = (mp.grad(f)(a + 1e-6 * v) - mp.grad(f)(a - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(hv, fd, atol=1e-5)
