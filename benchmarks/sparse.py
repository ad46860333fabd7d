"""Sparse Hessians: mp.sparse_hessian vs dense mp.hessian vs jax.jit(jax.hessian).

Three objectives with sparse Hessians, at n = 10³, 10⁴, 10⁵:

- ``rosenbrock``: the chained Rosenbrock function (tridiagonal Hessian);
- ``laplacian``: a 2-D Laplacian energy on an s×s grid, n = s², ``½Σ|∇u|² + ¼Σu⁴ − Σbu``
  (five-point-stencil Hessian);
- ``logistic``: L2-regularised logistic regression with a sparse design matrix (n samples, n
  features, 5 nonzeros per sample at random columns, stored as index/value arrays — a constant);
  the Hessian ``Xᵀ diag(σ(1−σ)) X + λI`` is taken with respect to the weights.

For each: time (median of repeated calls) and peak traced memory (tracemalloc) of
``sparse_hessian`` from scratch (detection + coloring + one sweep), of the prepared form
(``value_gradient_and_sparse_hessian`` with a reused pattern and coloring), of dense
``mp.hessian`` and of ``jax.jit(jax.hessian)`` (compile excluded; skipped if jax is absent); the
dense ones only up to ``--dense-max`` (default 5000: a 10⁴ dense Hessian is 800 MB). Also the
number of colors and the Hessian's nonzeros. Run ``python -m benchmarks.sparse``.
"""
import argparse
import gc
import time
import tracemalloc

import numpy as np

from .timing import format_time, measure


# --- the problems ------------------------------------------------------------------------------
def rosenbrock(x):
    """Chained Rosenbrock: Σ 100 (x[i+1] − x[i]²)² + (1 − x[i])²."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def laplacian(x, b):
    """½Σ|∇u|² + ¼Σu⁴ − Σ b·u for u = x on a square grid."""
    s = b.shape[0]
    u = np.reshape(x, (s, s))
    dx = u[1:, :] - u[:-1, :]
    dy = u[:, 1:] - u[:, :-1]
    return 0.5 * (np.sum(dx ** 2) + np.sum(dy ** 2)) + 0.25 * np.sum(u ** 4) - np.sum(b * u)


def logistic(w, cols, vals, y, lam):
    """Σ log(1 + exp(−yᵢ xᵢ·w)) + ½λ|w|², rows of X given as ``cols``/``vals`` (ELL format)."""
    margins = y * np.sum(vals * w[cols], axis=1)
    return np.sum(np.logaddexp(0.0, -margins)) + 0.5 * lam * np.sum(w * w)


def problem(name, n, seed=0):
    """``(f, x, args)`` for one problem at size about ``n`` (the Laplacian rounds to a square)."""
    rng = np.random.default_rng(seed)
    if name == "rosenbrock":
        return rosenbrock, rng.standard_normal(n), ()
    if name == "laplacian":
        s = max(2, int(round(np.sqrt(n))))
        return laplacian, rng.standard_normal(s * s), (rng.standard_normal((s, s)),)
    if name == "logistic":
        nnz_per_row = 5
        cols = rng.integers(0, n, size=(n, nnz_per_row))
        vals = rng.standard_normal((n, nnz_per_row))
        y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        return logistic, 0.1 * rng.standard_normal(n), (cols, vals, y, 1e-2)
    raise ValueError(f"unknown problem {name!r}")


PROBLEMS = ("rosenbrock", "laplacian", "logistic")


# --- measuring ---------------------------------------------------------------------------------
def peak_memory(fn):
    """Peak bytes allocated (tracemalloc: NumPy's buffers included) during one call of ``fn``."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _jax_hessian(f, x, args):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    if f is rosenbrock:
        def g(x):
            return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    elif f is laplacian:
        def g(x, b):
            u = jnp.reshape(x, b.shape)
            dx, dy = u[1:, :] - u[:-1, :], u[:, 1:] - u[:, :-1]
            return 0.5 * (jnp.sum(dx ** 2) + jnp.sum(dy ** 2)) + 0.25 * jnp.sum(u ** 4) \
                - jnp.sum(b * u)
    else:
        def g(w, cols, vals, y, lam):
            m = y * jnp.sum(vals * w[cols], axis=1)
            return jnp.sum(jnp.logaddexp(0.0, -m)) + 0.5 * lam * jnp.sum(w * w)
    h = jax.jit(jax.hessian(g))
    jargs = [jnp.asarray(a) for a in (x,) + tuple(args)]
    return lambda: jax.block_until_ready(h(*jargs))


def run(sizes, problems=PROBLEMS, dense_max=5000, budget=1.0, use_jax=True, log=print):
    """Measure every method on every problem and size; a list of result dicts."""
    import mooncake_py as mp
    try:
        if not use_jax:
            raise ImportError
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    out = []
    for name in problems:
        for n in sizes:
            f, x, args = problem(name, n)
            n_real = x.size
            c = mp.prepare_sparse_hessian_cache(f, x, *args)
            row = {"problem": name, "n": n_real, "colors": c.n_colors, "nnz": c.pattern.nnz}

            def one_shot():
                return mp.sparse_hessian(f)(x, *args)

            def prepared():
                return mp.value_gradient_and_sparse_hessian(c, f, x, *args)

            def detect():
                return mp.hessian_sparsity(f, x, *args)
            methods = [("sparse", one_shot), ("sparse_prepared", prepared), ("detection", detect)]
            if n_real <= dense_max:
                methods.append(("dense", lambda: mp.hessian(f)(x, *args)))
                if have_jax:
                    methods.append(("jax.jit", _jax_hessian(f, x, args)))
            for label, fn in methods:
                m = measure(fn, budget)
                row[label + "_s"] = m["median_s"]
                row[label + "_mem"] = peak_memory(fn) if label != "jax.jit" else None
            if n_real <= dense_max:  # the sparse result is the dense one
                Hs = one_shot().toarray()
                Hd = mp.hessian(f)(x, *args)
                row["max_abs_diff"] = float(np.max(np.abs(Hs - Hd)))
            out.append(row)
            log(_line(row))
    return out


def _line(r):
    def t(key):
        v = r.get(key + "_s")
        return "skipped" if v is None else format_time(v)

    def mem(key):
        v = r.get(key + "_mem")
        return "—" if v is None else f"{v / 2**20:.1f} MB"
    diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "—"
    return (f"| {r['problem']} | {r['n']} | {r['colors']} | {r['nnz']} | {t('sparse')} | "
            f"{mem('sparse')} | {t('sparse_prepared')} | {mem('sparse_prepared')} | "
            f"{t('detection')} | {t('dense')} | {mem('dense')} | {t('jax.jit')} | {diff} |")


HEADER = ("| Problem | n | Colors | nnz(H) | sparse_hessian | peak mem | prepared | peak mem | "
          "detection | dense mp.hessian | peak mem | jax.jit(jax.hessian) | max abs diff |\n"
          "|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,5000,10000,100000")
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--dense-max", type=int, default=5000)
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per method")
    p.add_argument("--no-jax", action="store_true")
    a = p.parse_args(argv)
    print(HEADER)
    run([int(s) for s in a.sizes.split(",")], a.problems.split(","), a.dense_max, a.budget,
        not a.no_jax)
    print(f"\n(dense methods skipped above n = {a.dense_max}: a dense Hessian needs n² floats)")


if __name__ == "__main__":
    main()
