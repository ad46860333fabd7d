"""Full Hessians: k directions per sweep (lanes) against one HVP sweep per column.

``python -m benchmarks.hessian_lanes`` prints a Markdown table for n = 10, 100, 1000 on
``sum(sin(x) * x**2)`` and on simple_mlp's loss differentiated with respect to a first-layer
weight matrix of n entries.
"""
import numpy as np

import mooncake_py as mp

from .timing import measure, format_time

SHAPES = {10: (2, 5), 100: (10, 10), 1000: (25, 40)}  # first-layer weights (hidden, inputs)


def sum_sin(x):
    return np.sum(np.sin(x) * x ** 2)


def mlp_loss(W1, W2, X, Y):
    return np.sum((Y - W2 @ np.maximum(W1 @ X, 0.0)) ** 2)


def cases(rng):
    for n, (h, d) in SHAPES.items():
        yield "sum(sin(x)*x^2)", n, sum_sin, rng.standard_normal(n)
        X, Y, W2 = rng.standard_normal((d, 70)), rng.standard_normal((8, 70)), \
            rng.standard_normal((8, h))
        yield "simple_mlp (W1)", n, (lambda W1, W2=W2, X=X, Y=Y: mlp_loss(W1, W2, X, Y)), \
            rng.standard_normal((h, d))


def per_column(f, x):
    hvp = mp.hvp(f)
    eye = np.eye(x.size).reshape((x.size,) + x.shape)
    return np.stack([np.reshape(hvp(x, e), -1) for e in eye])


def main(budget=0.5):
    rng = np.random.default_rng(0)
    print("| Function | n | mp.hessian (lanes) | one HVP sweep per column | speed-up |")
    print("|:---|---:|---:|---:|---:|")
    for name, n, f, x in cases(rng):
        H = mp.hessian(f)(x).reshape(n, n)
        Hc = per_column(f, x)
        assert np.allclose(H, Hc, rtol=1e-10, atol=1e-10), "lanes and columns disagree"
        t_l = measure(lambda: mp.hessian(f)(x), budget)["median_s"]
        t_c = measure(lambda: per_column(f, x), budget)["median_s"]
        print(f"| {name} | {n} | {format_time(t_l)} | {format_time(t_c)} | {t_c / t_l:.1f}× |")


if __name__ == "__main__":
    main()
