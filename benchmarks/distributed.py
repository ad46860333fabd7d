"""``python -m benchmarks.distributed``: mooncake_py.distributed against one process.

Per call: a logistic-regression gradient and HVP (prepared caches) at 10⁶ and 10⁷ rows × 20
features; Newton-CG end to end at 10⁶ rows; a dense Hessian of ``Σ tanh(A x)``, n = 3000, by
blocks of 128 lanes; each in this process, on a LocalCluster of 1 worker and of 2, with one
BLAS thread per process. Also the round trip of an empty task and of an objective call on a
tiny shard (the per-call overhead). Prints a table (ratios: time / single process) and saves a
plot when matplotlib is installed. ``--quick`` runs 10⁵ / 10⁶ rows and n = 1000.
"""
import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"   # before NumPy loads its BLAS: one thread, as in each worker

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import mooncake_py as mp  # noqa: E402

FEATURES, SHARDS = 20, 8


def make(spec):
    seed, rows = spec
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, FEATURES))
    y = (rng.random(rows) < 0.5).astype(np.float64)
    return X, y


def loss(theta, X, y):
    z = X @ theta
    return np.sum(np.logaddexp(0.0, z) - y * z) + 1e-3 * np.sum(theta ** 2)


def dense(x, A):
    return np.sum(np.tanh(A @ x))


def _median(fn, repeat):
    fn()  # warm: caches prepared, plans recorded
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def single(rows_list, n_hess, repeat):
    """Times in this process (allocator tuned, as the workers are): {case: seconds}."""
    mp.tune_allocator()
    out = {}
    theta, v = np.full(FEATURES, 0.1), np.ones(FEATURES)
    for rows in rows_list:
        X, y = (np.concatenate(p) for p in zip(*[make((s, rows // SHARDS))
                                                 for s in range(SHARDS)]))
        f = lambda t: loss(t, X, y)  # noqa: E731
        gc, hc = mp.prepare_gradient_cache(f, theta), mp.prepare_hvp_cache(f, theta)
        out[f"gradient {rows:.0e} rows"] = _median(lambda: mp.value_and_gradient(gc, f, theta),
                                                   repeat)
        out[f"HVP {rows:.0e} rows"] = _median(lambda: mp.value_and_hvp(hc, f, v, theta), repeat)
        if rows == rows_list[0]:
            out[f"Newton-CG {rows:.0e} rows"] = _median(lambda: _newton(
                lambda t: (lambda y, g: (y, g[0]))(*mp.value_and_gradient(gc, f, t)),
                lambda t, p: mp.value_and_hvp(hc, f, p, t)[2]), 1)
        del X, y
    A, x = _hess_problem(n_hess)
    out[f"Hessian n={n_hess}"] = _median(lambda: mp.hessian(dense, chunk_size=128)(x, A), 1)
    return out


def _hess_problem(n):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, n)) / np.sqrt(n), rng.normal(size=n)


def _newton(fun_and_jac, hessp):
    from scipy.optimize import minimize
    r = minimize(fun_and_jac, np.zeros(FEATURES), jac=True, hessp=lambda t, p: hessp(t, p),
                 method="Newton-CG", options={"xtol": 1e-8})
    return r.nit


def on_cluster(workers, rows_list, n_hess, repeat):
    """Times on a LocalCluster of ``workers`` processes: {case: seconds}."""
    from distributed import Client, LocalCluster
    from mooncake_py import distributed as md
    out = {}
    theta, v = np.full(FEATURES, 0.1), np.ones(FEATURES)
    with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as lc, \
            Client(lc) as client:
        md.connect(lc).close()
        client = md.client.prepare(client)
        out["round trip, empty task"] = _median(lambda: client.submit(
            int, 0, pure=False).result(), 3 * repeat)
        tiny = md.objective(loss, md.shards(make, [(s, 10) for s in range(SHARDS)],
                                            client=client))
        out["objective call, tiny shards"] = _median(lambda: tiny.value_and_grad(theta),
                                                     3 * repeat)
        tiny.close()
        for rows in rows_list:
            S = md.shards(make, [(s, rows // SHARDS) for s in range(SHARDS)], client=client)
            with md.objective(loss, S) as obj:
                out[f"gradient {rows:.0e} rows"] = _median(lambda: obj.value_and_grad(theta),
                                                           repeat)
                out[f"HVP {rows:.0e} rows"] = _median(lambda: obj.hvp(theta, v), repeat)
                if rows == rows_list[0]:
                    out[f"Newton-CG {rows:.0e} rows"] = _median(
                        lambda: _newton(obj.fun_and_jac, obj.hessp), 1)
            S.close()
        A, x = _hess_problem(n_hess)
        out[f"Hessian n={n_hess}"] = _median(
            lambda: md.hessian(dense, x, A, block=128, client=client), 1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="mooncake_py.distributed vs one process")
    ap.add_argument("--quick", action="store_true", help="10⁵/10⁶ rows, n = 1000")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--plot", default="distributed_benchmark.png",
                    help="where to save the plot (needs matplotlib; '' for none)")
    a = ap.parse_args(argv)
    rows_list, n_hess = ([10 ** 5, 10 ** 6], 1000) if a.quick else ([10 ** 6, 10 ** 7], 3000)
    cols = {"1 process": single(rows_list, n_hess, a.repeat)}
    for w in (1, 2):
        cols[f"{w} worker{'s' * (w > 1)}"] = on_cluster(w, rows_list, n_hess, a.repeat)
    cases = list(dict.fromkeys(k for c in cols.values() for k in c))
    print(f"{'case':32s}" + "".join(f"{c:>22s}" for c in cols))
    for k in cases:
        base = cols["1 process"].get(k)
        cells = []
        for c in cols.values():
            t = c.get(k)
            cells.append("" if t is None else f"{t * 1e3:10.1f} ms" +
                         (f" ({t / base:.2f}×)" if base and c is not cols["1 process"] else ""))
        print(f"{k:32s}" + "".join(f"{s:>22s}" for s in cells))
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return 0
        shown = [k for k in cases if k in cols["1 process"]]
        fig, ax = plt.subplots(figsize=(9, 4))
        for j, (c, times) in enumerate(cols.items()):
            ax.bar(np.arange(len(shown)) + 0.27 * (j - 1),
                   [times[k] / cols["1 process"][k] for k in shown], 0.27, label=c)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_xticks(np.arange(len(shown)), shown, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("time / one process")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
