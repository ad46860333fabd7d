"""Core tape behaviour: recording, accumulation, nesting, threads, errors."""
import threading

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import check_grads


def test_grad_matches_closed_form():
    x = np.array([0.3, -1.2, 2.0])
    g = mp.grad(lambda x: np.sum(np.sin(x) * x))(x)
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-14)


def test_scalar_loop_accumulates_repeated_reads():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * x[i] + x[0]
        return s
    x = np.arange(1.0, 5.0)
    g = mp.grad(f)(x)
    np.testing.assert_allclose(g, 2 * x + np.array([4.0, 0, 0, 0]))


def test_repeated_integer_index_accumulates():
    g = mp.grad(lambda x: np.sum(x[np.array([0, 0, 2])] ** 2))(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g, [4.0, 0.0, 6.0])


def test_float32_stays_float32():
    x = np.linspace(0, 1, 4, dtype=np.float32)
    v, g = mp.value_and_grad(lambda x: np.sum(np.exp(x) * 2.0))(x)
    assert g.dtype == np.float32 and v.dtype == np.float32


def test_python_float_input():
    g = mp.grad(lambda x: x * x * x)(2.0)
    assert isinstance(g, np.float64) and g == 12.0


def test_argnums_tuple_and_nested_structures():
    def f(p, data):
        return np.sum(p["w"] * data[0]) + p["b"][0] * data[1]
    p = {"w": np.array([1.0, 2.0]), "b": [3.0, 4]}
    data = (np.array([5.0, 6.0]), 7.0)
    gp, gd = mp.grad(f, argnums=(0, 1))(p, data)
    np.testing.assert_allclose(gp["w"], [5.0, 6.0])
    assert gp["b"][0] == 7.0 and gp["b"][1] is None
    np.testing.assert_allclose(gd[0], [1.0, 2.0])
    assert gd[1] == 3.0


def test_unused_input_gets_zeros():
    g = mp.grad(lambda x, y: np.sum(x), argnums=1)(np.ones(2), np.ones(3))
    np.testing.assert_array_equal(g, np.zeros(3))


def test_comparisons_give_plain_arrays_for_control_flow():
    def f(x):
        m = x > 0
        assert type(m) is np.ndarray
        return np.sum(np.where(m, x, -2 * x))
    np.testing.assert_allclose(mp.grad(f)(np.array([1.0, -1.0])), [1.0, -2.0])


def test_gradient_is_writable_and_not_aliased():
    g = mp.grad(lambda x: np.sum(x))(np.ones(3))
    g[0] = 5.0
    np.testing.assert_array_equal(mp.grad(lambda x: np.sum(x))(np.ones(3)), np.ones(3))


def test_vjp_with_several_outputs_and_repeat_calls():
    y, pb = mp.vjp(lambda x, w: (x * w, np.sum(x)), np.array([1.0, 2.0]), 3.0)
    gx, gw = pb((np.ones(2), 1.0))
    np.testing.assert_allclose(gx, [4.0, 4.0])
    assert gw == 3.0
    gx2, _ = pb((np.zeros(2), 2.0))
    np.testing.assert_allclose(gx2, [2.0, 2.0])


def test_explicit_tape_and_nested_tapes_do_not_mix():
    with mp.Tape() as outer:
        x = outer.track(np.array(2.0))
        inner_grad = mp.grad(lambda y: y * y)(3.0)  # an independent inner tape
        z = x * inner_grad
    gx, = outer.gradient(z, [x])
    assert gx == 6.0


def test_threads_have_independent_tapes():
    results = {}

    def work(k):
        x = np.full(50, float(k))
        results[k] = mp.grad(lambda x: np.sum(x ** 3))(x)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for k in range(1, 5):
        np.testing.assert_allclose(results[k], 3.0 * k * k)


def test_check_grads_on_a_composite():
    check_grads(lambda x, y: np.sum(np.tanh(x @ y)) + np.mean(np.exp(-x)),
                np.linspace(-1, 1, 6).reshape(2, 3), np.linspace(0, 1, 12).reshape(3, 4))
