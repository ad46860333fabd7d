"""Logistic regression by Newton's method over data made on Dask workers.

Each shard (rows of a design matrix and their labels) is generated on a worker and stays
there; SciPy's trust-krylov takes the loss and gradient from ``obj.fun_and_jac`` and
Hessian-vector products from ``obj.hessp``, each one task per worker, summed in shard order.
The same fit in this process (the loss on all rows at once, mp.value_and_grad / mp.hessp)
takes the same iterations to the same θ.

    python examples/distributed_newton.py            # 4 × 50k rows, 2 workers (~20 s)
    python examples/distributed_newton.py --big      # 8 × 1.25M rows × 20 features
"""
import argparse
import time

import numpy as np
from scipy.optimize import minimize

import mooncake_py as mp
from mooncake_py import distributed as md

FEATURES = 20
TRUE_THETA = np.linspace(-1.0, 1.0, FEATURES)


def make_shard(spec):
    """Rows of shard ``seed``: runs on a worker, so the data never crosses the network."""
    seed, rows = spec
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, FEATURES))
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-X @ TRUE_THETA))).astype(np.float64)
    return X, y


def loss(theta, X, y):
    """This shard's share of the mean negative log-likelihood plus a ridge penalty."""
    z = X @ theta
    return (np.sum(np.logaddexp(0.0, z) - y * z) / SIZE["rows"]
            + 1e-3 * np.sum(theta ** 2) / SIZE["shards"])


# set by main before the loss is pickled: a function's globals travel frozen at that moment
SIZE = {"rows": 1, "shards": 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big", action="store_true", help="8 shards of 1.25M rows")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    shards, rows = (8, 1_250_000) if a.big else (4, 50_000)
    SIZE.update(rows=shards * rows, shards=shards)
    specs = [(seed, rows) for seed in range(shards)]
    opts = {"gtol": 1e-7}

    t = time.perf_counter()
    client = md.connect(n_workers=a.workers)
    S = md.shards(make_shard, specs, client=client)
    with md.objective(loss, S) as obj:
        r = minimize(obj.fun_and_jac, np.zeros(FEATURES), jac=True, hessp=obj.hessp,
                     method="trust-krylov", options=opts)
    t_dist = time.perf_counter() - t
    client.close()

    t = time.perf_counter()
    data = [make_shard(s) for s in specs]

    def total(theta):
        return sum(loss(theta, X, y) for X, y in data)   # the same shard-order sum
    r1 = minimize(mp.value_and_grad(total), np.zeros(FEATURES), jac=True,
                  hessp=mp.hessp(total), method="trust-krylov", options=opts)
    t_one = time.perf_counter() - t

    print(f"{shards} shards × {rows} rows × {FEATURES} features")
    print(f"distributed ({a.workers} workers): {r.nit} iterations, {t_dist:.1f} s "
          f"(cluster start included)")
    print(f"single process:          {r1.nit} iterations, {t_one:.1f} s")
    print("θ distributed   :", np.array2string(r.x[:5], precision=6), "...")
    print("θ single process:", np.array2string(r1.x[:5], precision=6), "...")
    print(f"max |Δθ| = {np.max(np.abs(r.x - r1.x)):.2e}")
    assert r.success and r1.success, (r.message, r1.message)
    assert r.nit == r1.nit
    assert np.allclose(r.x, r1.x, rtol=1e-9, atol=1e-12)


if __name__ == "__main__":
    main()
