"""Gradient of a small NumPy function, printed next to a central finite-difference check."""
import numpy as np

import mooncake_py as mp


def f(x):
    """A log-density-like scalar function written in plain NumPy."""
    return np.sum(np.sin(x) * x ** 2) - 0.5 * np.sum(np.tanh(x) ** 2) + np.log1p(x @ x)


x = np.linspace(-1.0, 2.0, 5)
g = mp.grad(f)(x)

h = 1e-6
fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])

print(f"f(x) = {f(x):.6f}")
print(f"{'i':>2} {'mp.grad':>14} {'finite diff':>14} {'abs error':>10}")
for i, (a, b) in enumerate(zip(g, fd)):
    print(f"{i:>2} {a:>14.8f} {b:>14.8f} {abs(a - b):>10.2e}")
assert np.allclose(g, fd, rtol=1e-6, atol=1e-8), "gradient does not match finite differences"
print("gradient matches finite differences")
