"""Prepared caches on a NumPy loop that writes into a buffer it allocates.

`energy` is written the way one writes it for NumPy alone: allocate a residual with
`np.empty_like`, fill it element by element in a Python loop, sum its squares. A prepared
gradient cache (and an HVP cache) records it once and replays the recording on later calls
without running the loop again; the script times unprepared against prepared calls (the
figures depend on the machine: they are printed, not checked) and checks the derivatives
against central finite differences.
"""
import time

import numpy as np

import mooncake_py as mp


STIFFNESS = 0.3


def energy(x):
    """0.5 * sum of squared residuals of a chain of nonlinear springs (x: positions)."""
    r = np.empty_like(x)
    r[0] = x[0]                                    # the first spring is tied to 0
    for i in range(1, x.shape[0]):
        r[i] = np.sin(x[i] - x[i - 1]) + STIFFNESS * np.tanh(x[i])
    return 0.5 * np.sum(r * r)


def best_time(fn, repeats=3, number=10):
    """Lowest mean seconds per call over `repeats` rounds of `number` calls."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


n = 100
rng = np.random.default_rng(0)
x = rng.standard_normal(n)
v = rng.standard_normal(n)

grad_cache = mp.prepare_gradient_cache(energy, x)
hvp_cache = mp.prepare_hvp_cache(energy, x)
# The first calls record `energy` (and, for the gradient, generate the replay's source code
# once); every later call with arguments of the same shapes replays.
mp.value_and_gradient(grad_cache, energy, x)
mp.value_and_hvp(hvp_cache, energy, v, x)

x2 = x + 0.1 * rng.standard_normal(n)        # a new point: the replay serves it
y, (g,) = mp.value_and_gradient(grad_cache, energy, x2)
y_h, g_h, Hv = mp.value_and_hvp(hvp_cache, energy, v, x2)

timings = {
    "gradient, mp.grad (records every call)": lambda: mp.grad(energy)(x2),
    "gradient, prepared cache (replay)": lambda: mp.value_and_gradient(grad_cache, energy, x2),
    "HVP, mp.hvp (records every call)": lambda: mp.hvp(energy)(x2, v),
    "HVP, prepared cache (replay)": lambda: mp.value_and_hvp(hvp_cache, energy, v, x2),
}
print(f"energy of a {n}-spring chain: {y:.6f}")
print(f"{'primal (plain NumPy)':<40} {best_time(lambda: energy(x2)) * 1e3:8.3f} ms")
for name, fn in timings.items():
    print(f"{name:<40} {best_time(fn) * 1e3:8.3f} ms")

# Checks: the replayed results against a fresh recording and central finite differences.
assert np.allclose(g, mp.grad(energy)(x2), rtol=1e-12, atol=1e-12)
assert np.allclose(Hv, mp.hvp(energy)(x2, v), rtol=1e-12, atol=1e-12)
assert np.allclose(g_h, g, rtol=1e-12, atol=1e-12) and np.isclose(y_h, y, rtol=1e-14)

h = 1e-6
eye = np.eye(n)
fd_g = np.array([(energy(x2 + h * e) - energy(x2 - h * e)) / (2 * h) for e in eye])
fd_hv = (mp.grad(energy)(x2 + h * v) - mp.grad(energy)(x2 - h * v)) / (2 * h)
err_g = np.max(np.abs(g - fd_g)) / np.max(np.abs(fd_g))
err_hv = np.max(np.abs(Hv - fd_hv)) / np.max(np.abs(fd_hv))
print(f"relative error against finite differences: gradient {err_g:.1e}, HVP {err_hv:.1e}")
assert err_g < 1e-7 and err_hv < 1e-7, "derivatives do not match finite differences"
print("prepared gradient and HVP match finite differences")
