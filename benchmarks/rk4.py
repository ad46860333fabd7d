"""RK4 Lotka–Volterra: a loop that writes into an array it allocated, against its JAX twin.

``python -m benchmarks.rk4 [--steps N] [--rounds R]`` integrates the Lotka–Volterra system
with classical RK4 for ``N`` steps (default 400), writing each state into ``y[i + 1]`` of an
array made by ``np.zeros_like``, and takes as the loss the sum of squares of the trajectory.
The parameters ``theta = (alpha, beta, delta, gamma)`` are differentiated. It prints the time
of one call, and its ratio to the NumPy primal, for: the primal; the unprepared gradient
(``mp.value_and_grad``) and HVP (``mp.hvp``); a prepared gradient and HVP cache (default
replay) and with ``compile=True``; and ``jax.jit`` of the ``lax.scan`` twin's gradient and HVP
(forward-over-reverse) when JAX is installed. JAX cannot write into arrays, so its twin scans
the same RK4 step and stacks the states; both compute the same numbers (checked). Minima over
rounds, variants timed back to back.
"""
import argparse
import warnings
from time import perf_counter

import numpy as np

import mooncake_py as mp

DT = 0.01
Y0 = (1.0, 0.5)


def lv(u, v, theta):
    """Lotka–Volterra right-hand side (prey u, predator v)."""
    a, b, d, g = theta[0], theta[1], theta[2], theta[3]
    return a * u - b * u * v, d * u * v - g * v


def make_rk4(steps):
    """The NumPy loss: RK4 for ``steps`` steps into ``y`` (written row by row)."""
    def loss(theta):
        y = np.zeros_like(theta, shape=(steps + 1, 2))
        y[0, 0], y[0, 1] = Y0
        for i in range(steps):
            u, v = y[i, 0], y[i, 1]
            k1u, k1v = lv(u, v, theta)
            k2u, k2v = lv(u + 0.5 * DT * k1u, v + 0.5 * DT * k1v, theta)
            k3u, k3v = lv(u + 0.5 * DT * k2u, v + 0.5 * DT * k2v, theta)
            k4u, k4v = lv(u + DT * k3u, v + DT * k3v, theta)
            y[i + 1, 0] = u + DT / 6 * (k1u + 2 * k2u + 2 * k3u + k4u)
            y[i + 1, 1] = v + DT / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        return np.sum(y * y)
    return loss


def make_jax(steps):
    """The ``lax.scan`` twin: (jit gradient, jit HVP), or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def loss(theta):
        def step(c, _):
            u, v = c
            k1u, k1v = lv(u, v, theta)
            k2u, k2v = lv(u + 0.5 * DT * k1u, v + 0.5 * DT * k1v, theta)
            k3u, k3v = lv(u + 0.5 * DT * k2u, v + 0.5 * DT * k2v, theta)
            k4u, k4v = lv(u + DT * k3u, v + DT * k3v, theta)
            n = (u + DT / 6 * (k1u + 2 * k2u + 2 * k3u + k4u),
                 v + DT / 6 * (k1v + 2 * k2v + 2 * k3v + k4v))
            return n, jnp.stack(n)
        c0 = (jnp.asarray(Y0[0]), jnp.asarray(Y0[1]))
        _, ys = jax.lax.scan(step, c0, None, length=steps)
        return jnp.sum(jnp.asarray(Y0) ** 2) + jnp.sum(ys * ys)
    g = jax.jit(jax.grad(loss))
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(loss), (x,), (v,))[1])
    return loss, g, hvp


def _best(variants, rounds):
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            t0 = perf_counter()
            fn()
            best[k] = min(best[k], perf_counter() - t0)
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    f = make_rk4(a.steps)
    th = np.array([1.1, 0.4, 0.1, 0.4])
    v = np.array([1.0, -0.5, 0.25, 2.0])
    caches = {}
    builds = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        for name, prep, call in (
                ("gradient replay", mp.prepare_gradient_cache,
                 lambda c: mp.value_and_gradient(c, f, th)),
                ("gradient compiled", lambda *x: mp.prepare_gradient_cache(*x, compile=True),
                 lambda c: mp.value_and_gradient(c, f, th)),
                ("HVP replay", mp.prepare_hvp_cache, lambda c: mp.value_and_hvp(c, f, v, th)),
                ("HVP compiled", lambda *x: mp.prepare_hvp_cache(*x, compile=True),
                 lambda c: mp.value_and_hvp(c, f, v, th))):
            t0 = perf_counter()
            c = prep(f, th)
            call(c)
            call(c)
            builds[name] = perf_counter() - t0
            caches[name] = (c, call)
    variants = {"primal": lambda: f(th),
                "gradient unprepared": lambda: mp.value_and_grad(f)(th),
                "HVP unprepared": lambda: mp.hvp(f)(th, v)}
    for name, (c, call) in caches.items():
        variants[name] = (lambda c=c, call=call: call(c))
    jx = make_jax(a.steps)
    if jx is not None:
        loss, jg, jh = jx
        np.testing.assert_allclose(float(loss(th)), f(th), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jg(th)), mp.grad(f)(th), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(jh(th, v)), mp.hvp(f)(th, v), rtol=1e-10)
        variants["gradient jax.jit"] = lambda: jg(th).block_until_ready()
        variants["HVP jax.jit"] = lambda: jh(th, v).block_until_ready()
    best = _best(variants, a.rounds)
    base = best["primal"]
    print(f"RK4 Lotka-Volterra, {a.steps} steps (minima of {a.rounds} rounds)")
    print(f"{'variant':<22} {'time':>10} {'/ primal':>9}")
    for k, t in best.items():
        print(f"{k:<22} {t * 1e3:>8.2f}ms {t / base:>9.2f}")
    for k, t in builds.items():
        print(f"build + 2 calls, {k}: {t:.2f} s;  {caches[k][0].compile_report().status}")


if __name__ == "__main__":
    main()
