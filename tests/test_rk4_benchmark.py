"""The RK4 benchmark case (benchmarks/rk4.py): its gradient and HVP agree with the JAX twin
and finite differences, and the script runs."""
import numpy as np

import mooncake_py as mp
from benchmarks import rk4


def test_rk4_derivatives_and_script(capsys):
    f = rk4.make_rk4(8)
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    g, hv = mp.grad(f)(th), mp.hvp(f)(th, v)
    eps = 1e-6
    fd = np.array([(f(th + eps * e) - f(th - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    np.testing.assert_allclose(hv, (mp.grad(f)(th + eps * v) - mp.grad(f)(th - eps * v))
                               / (2 * eps), rtol=1e-5)
    rk4.main(["--steps", "8", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "HVP compiled" in out and "primal" in out
