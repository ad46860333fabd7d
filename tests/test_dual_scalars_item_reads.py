"""Item reads ``x[i]`` of dual scalars in the reverse sweep (forward-over-reverse of scalar loops).

The sweep adds each read's dual cotangent into a dense dual buffer it owns (``tape._item_add``,
mixed/dual_scalars.py's ``item_add``) instead of collecting sparse contributions and scattering
them at the end. Checked here: bitwise equality with the general path (the hook switched off),
that the hook actually takes the reads, and the numbers against a ``replay=False`` cache, finite
differences of the gradient and closed forms.
"""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.rk4 import make_rk4
from mooncake_py.mixed import dual_scalars
from mooncake_py.tape import tape as tape_module

RNG = np.random.default_rng(11)


def _bitwise(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


def _general(monkeypatch):
    monkeypatch.setattr(tape_module, "_item_add", tape_module._no_item_add)


def _counting(monkeypatch):
    """Count the reads the hook added in place."""
    taken = []

    def item_add(cts, owned, p, key, shape, g):
        done = dual_scalars.item_add(cts, owned, p, key, shape, g)
        taken.append(done)
        return done
    monkeypatch.setattr(tape_module, "_item_add", item_add)
    return taken


def repeated_one(x):  # one element read many times, another once
    s = 0.0
    for _ in range(20):
        s = s + x[0] * x[0] * 0.5 - np.sin(x[0])
    return s * x[1]


def several_arrays(x):  # reads of the input and of two arrays computed from it
    z = np.exp(x)
    w = x * x
    s = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            s = s + x[i] * z[j] - w[i] * x[j] / 3.0
    return s


def two_d(x):  # reads of a 2-d array computed from x, with ints of both kinds
    a = np.reshape(x, (2, 3)) * 1.5
    s = 0.0
    for i in range(2):
        for j in np.arange(3):
            s = s + a[i, j] * a[1 - i, 2 - j] + a[i, j] * x[j]
    return s


def mixed_dense(x):  # a dense contribution to x between the reads
    s = np.sum(x * x)
    for i in range(len(x)):
        s = s + x[i] * x[(i + 1) % len(x)]
    return s * x[0]


def writes(x):  # reads of an array f writes into (an owned state buffer in the sweep)
    y = np.zeros_like(x, shape=(5, 2))
    y[0, 0], y[0, 1] = 1.0, 0.5
    for i in range(4):
        u, v = y[i, 0], y[i, 1]
        y[i + 1, 0] = u + 0.1 * (x[0] * u - x[1] * u * v)
        y[i + 1, 1] = v + 0.1 * (x[2] * u * v - x[3] * v)
    return np.sum(y * y)


CASES = [(repeated_one, 2), (several_arrays, 4), (two_d, 6), (mixed_dense, 5), (writes, 4),
         (make_rk4(30), 4)]


@pytest.mark.parametrize("f, n", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_bitwise_equal_to_general_path(f, n, monkeypatch):
    x = np.abs(RNG.standard_normal(n)) * 0.5 + 0.2
    v = RNG.standard_normal(n)
    taken = _counting(monkeypatch)
    fast = mp.hvp(f)(x, v)
    assert any(taken)  # (else this compares the general path with itself)
    _general(monkeypatch)
    _bitwise(fast, mp.hvp(f)(x, v))


@pytest.mark.parametrize("f, n", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_against_unreplayed_cache_and_finite_differences(f, n):
    x = np.abs(RNG.standard_normal(n)) * 0.5 + 0.2
    v = RNG.standard_normal(n)
    hv = mp.hvp(f)(x, v)
    _, _, want = mp.value_and_hvp(mp.prepare_hvp_cache(f, x, replay=False), f, v, x)
    np.testing.assert_allclose(hv, want, rtol=1e-12, atol=1e-12)
    grad = mp.grad(f)
    eps = 1e-6
    fd = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6 * (1 + np.abs(fd).max()))


def test_closed_form_repeated_reads():
    # f = sum_k x[k]^2 x[k+1] over a ring of reads, each element read three times
    def f(x):
        s = 0.0
        for k in range(len(x)):
            s = s + x[k] * x[k] * x[(k + 1) % len(x)]
        return s
    x = RNG.standard_normal(5)
    v = RNG.standard_normal(5)
    n = len(x)
    H = np.zeros((n, n))
    for k in range(n):
        j = (k + 1) % n
        H[k, k] += 2 * x[j]
        H[k, j] += 2 * x[k]
        H[j, k] += 2 * x[k]
    np.testing.assert_allclose(mp.hvp(f)(x, v), H @ v, rtol=1e-13, atol=1e-13)


def test_single_read_stays_sparse(monkeypatch):
    # one read: nothing to add into, its contribution stays sparse (no dense buffer made)
    x = np.array([0.3, 0.7, 1.1])
    v = np.array([1.0, -2.0, 0.5])
    taken = _counting(monkeypatch)
    hv = mp.hvp(lambda x: np.sin(x[1]) * 3.0)(x, v)
    assert taken == [False]
    _bitwise(hv, np.array([0.0, -3.0 * np.sin(0.7) * -2.0, 0.0]))


def test_reads_of_distinct_elements_and_inputs_untouched(monkeypatch):
    # three elements read once each: the second read makes the dense buffer, the third adds
    x = np.array([0.3, 0.7, 1.1])
    v = np.array([1.0, -2.0, 0.5])
    x0, v0 = x.copy(), v.copy()
    taken = _counting(monkeypatch)
    hv = mp.hvp(lambda x: x[0] * x[1] * x[2])(x, v)
    assert taken == [False, True, True]
    want = np.array([[0, x[2], x[1]], [x[2], 0, x[0]], [x[1], x[0], 0]]) @ v
    np.testing.assert_allclose(hv, want, rtol=1e-15)
    _bitwise(x, x0)
    _bitwise(v, v0)


def test_result_is_an_owned_array():
    # the returned H·v is the sweep's buffer: a second call must not write into the first result
    f = CASES[0][0]
    x, v = np.array([0.4, 0.9]), np.array([1.0, 0.5])
    h1 = mp.hvp(f)(x, v)
    keep = h1.copy()
    h2 = mp.hvp(f)(x, 2 * v)
    _bitwise(h1, keep)
    np.testing.assert_allclose(h2, 2 * h1, rtol=1e-14)

