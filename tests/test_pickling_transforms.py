"""Transformed functions and prepared caches pickle (f by reference), so they go to a process
pool."""
import concurrent.futures
import inspect
import multiprocessing
import pickle

import numpy as np

import mooncake_py as mp


def loss(x):
    return np.sum(np.sin(x) ** 2)


def loss_a(x, a):
    return np.sum((x - a) ** 4)


def vec(x):
    return np.sin(x) * x


def _transforms():
    return [mp.grad(loss), mp.value_and_grad(loss), mp.hvp(loss), mp.hessian(loss),
            mp.jacobian(vec), mp.hessp(loss_a), mp.sparse_hessian(loss), mp.sparse_jacobian(vec),
            mp.grad(loss_a, argnums=(0, 1))]


def _args(i):
    x = np.linspace(0.1, 1.0, 4)
    return [(x,), (x,), (x, np.ones(4)), (x,), (x,), (x, np.ones(4), 0.5), (x,), (x,),
            (x, 0.5)][i]


def _same(a, b):
    la, lb = [np.asarray(getattr(v, "toarray", lambda v=v: v)()) for v in (a, b)]
    return np.allclose(la, lb)


def _flat(r):
    return r if isinstance(r, tuple) else (r,)


def test_transforms_pickle_and_keep_their_metadata():
    for i, t in enumerate(_transforms()):
        back = pickle.loads(pickle.dumps(t))
        assert back.__name__ == t.__name__ and back.__doc__ == t.__doc__
        for a, b in zip(_flat(t(*_args(i))), _flat(back(*_args(i)))):
            assert _same(a, b)
    assert list(inspect.signature(mp.grad(loss_a)).parameters) == ["x", "a"]


def test_a_transformed_function_on_a_class_is_a_method():
    class Model:
        g = mp.grad(loss_a)
    m = Model()
    assert m.g.__self__ is m  # (bound as a plain function would be)
    assert np.allclose(Model.g(np.ones(2), 0.0), 4.0)


def _run(job):
    kind, payload, x = job
    if kind == "transform":
        return payload(x)
    y, (g,) = mp.value_and_gradient(payload, loss, x)
    return g


def test_through_a_process_pool():
    x = np.linspace(0.0, 1.0, 3)
    cache = mp.prepare_gradient_cache(loss, x)
    mp.value_and_gradient(cache, loss, x)
    jobs = [("transform", mp.grad(loss), x), ("cache", cache, x)]
    # (spawn: a fresh interpreter loads f by reference; fork would copy threads other tests
    # started, JAX's say)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        out = list(pool.map(_run, jobs))
    assert np.allclose(out[0], mp.grad(loss)(x)) and np.allclose(out[1], mp.grad(loss)(x))
