"""Gradient and Hessian-vector product on the GPU (CuPy), against the CPU path and against
``torch.func`` / JAX on the GPU where they are installed.

Run: ``python benchmarks/gpu.py [--quick] [--dtype float32|float64] [--require-gpu]``. For each
function and n = 10^4 ... 10^8 it prints a Markdown table of median times: the primal (CuPy),
``mp.grad``, the prepared ``mp.value_and_hvp`` (the seed example's API), their ratios, the same
two on the CPU (NumPy + numba kernels) up to ``--cpu-max``, and the peers. Every timed call
ends with a device synchronisation. Derivatives are compared once with the CPU path (or, above
``--cpu-max``, with the closed form) and marked "wrong" if they disagree.

Without CuPy or a CUDA device it says why and exits 0 (1 with ``--require-gpu``).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, _ROOT)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the device

import mooncake_py as mp  # noqa: E402
from benchmarks.timing import measure  # noqa: E402


# --- the functions, written once for any namespace ----------------------------------------------
def logp(xp, x):
    """The seed example: a standard normal log-density (up to a constant)."""
    return -0.5 * xp.sum(x ** 2)


def smooth(xp, x):
    """Transcendentals and products: exercises the generated kernels."""
    return xp.sum(xp.tanh(x) * x + xp.exp(-x * x) + xp.log1p(x * x))


FUNCTIONS = {"logp": logp, "smooth": smooth}


def _closed_form(name, x, v):
    """(gradient, Hv) in float64 on the host, for checking the largest sizes."""
    x, v = x.astype(np.float64), v.astype(np.float64)
    if name == "logp":
        return -x, -v
    t = np.tanh(x)
    e = np.exp(-x * x)
    s = 1 - t * t
    g = s * x + t - 2 * x * e + 2 * x / (1 + x * x)
    h = -2 * t * s * x + 2 * s + (4 * x * x - 2) * e + (2 - 2 * x * x) / (1 + x * x) ** 2
    return g, h * v


# --- device helpers ------------------------------------------------------------------------------
def gpu_problem():
    """None if CuPy and a CUDA device work here, else why not."""
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        (cupy.arange(3.0) * 2).sum().item()
    except Exception as e:  # noqa: BLE001
        return f"CUDA is not usable: {type(e).__name__}: {e}"
    return None


def _sync_cupy():
    import cupy
    cupy.cuda.get_current_stream().synchronize()


def _torch_gpu():
    try:
        import torch
        import torch.func  # noqa: F401
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _jax_gpu():
    try:
        import jax
    except ImportError:
        return None
    try:
        return jax if jax.devices("gpu") else None
    except RuntimeError:
        return None


# --- one row ------------------------------------------------------------------------------------
def _timed(fn, sync, budget):
    def run():
        out = fn()
        sync()
        return out
    return measure(run, budget)["median_s"]


def _rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def row(name, n, dtype, budget, cpu_max, peers):
    import cupy
    fn = FUNCTIONS[name]
    rng = np.random.default_rng(0)
    xh = rng.standard_normal(n).astype(dtype)
    vh = rng.standard_normal(n).astype(dtype)
    x, v = cupy.asarray(xh), cupy.asarray(vh)
    f = (lambda z: fn(np, z))  # np. calls on CuPy arrays dispatch to CuPy
    tol = 1e-3 if dtype == np.float32 else 1e-9
    r = {"function": name, "n": n, "dtype": np.dtype(dtype).name}

    grad = mp.grad(f)
    cache = mp.prepare_hvp_cache(f, x)
    r["primal"] = _timed(lambda: f(x), _sync_cupy, budget)
    r["grad"] = _timed(lambda: grad(x), _sync_cupy, budget)
    r["hvp"] = _timed(lambda: mp.value_and_hvp(cache, f, v, x), _sync_cupy, budget)
    _, g, hv = mp.value_and_hvp(cache, f, v, x)
    assert type(g) is cupy.ndarray and type(hv) is cupy.ndarray, "a result left the device"

    if n <= cpu_max:
        cgrad = mp.grad(f)
        ccache = mp.prepare_hvp_cache(f, xh)
        r["cpu_grad"] = _timed(lambda: cgrad(xh), lambda: None, budget)
        r["cpu_hvp"] = _timed(lambda: mp.value_and_hvp(ccache, f, vh, xh), lambda: None, budget)
        _, want_g, want_hv = mp.value_and_hvp(ccache, f, vh, xh)
    else:
        want_g, want_hv = _closed_form(name, xh, vh)
    r["grad_err"] = _rel_err(cupy.asnumpy(g), want_g)
    r["hvp_err"] = _rel_err(cupy.asnumpy(hv), want_hv)
    r["ok"] = r["grad_err"] < tol and r["hvp_err"] < tol

    torch = peers.get("torch")
    if torch is not None:
        tx = torch.as_tensor(xh, device="cuda")
        tv = torch.as_tensor(vh, device="cuda")
        tf = (lambda z: fn(torch, z))
        tgrad = torch.func.grad(tf)
        thvp = (lambda: torch.func.jvp(tgrad, (tx,), (tv,)))
        sync = torch.cuda.synchronize
        r["torch_grad"] = _timed(lambda: tgrad(tx), sync, budget)
        r["torch_hvp"] = _timed(thvp, sync, budget)
    jax = peers.get("jax")
    if jax is not None:
        import jax.numpy as jnp
        if dtype == np.float64:
            jax.config.update("jax_enable_x64", True)
        jx, jv = jnp.asarray(xh), jnp.asarray(vh)
        jf = (lambda z: fn(jnp, z))
        jgrad = jax.jit(jax.grad(jf))
        jhvp = jax.jit(lambda z, w: jax.jvp(jax.grad(jf), (z,), (w,))[1])
        r["jax_grad"] = _timed(lambda: jgrad(jx).block_until_ready(), lambda: None, budget)
        r["jax_hvp"] = _timed(lambda: jhvp(jx, jv).block_until_ready(), lambda: None, budget)
    return r


# --- report ----------------------------------------------------------------------------------------
def _fmt(t):
    if t is None:
        return "–"
    if t < 1e-3:
        return f"{t * 1e6:.0f} µs"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def table(rows):
    cols = ["n", "primal", "grad", "hvp", "grad/primal", "hvp/grad", "cpu_grad", "cpu_hvp",
            "torch_grad", "torch_hvp", "jax_grad", "jax_hvp", "check"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"10^{int(round(np.log10(r['n'])))}"]
        for c in cols[1:]:
            if c == "grad/primal":
                cells.append(f"{r['grad'] / r['primal']:.1f}")
            elif c == "hvp/grad":
                cells.append(f"{r['hvp'] / r['grad']:.1f}")
            elif c == "check":
                cells.append("ok" if r["ok"] else
                             f"wrong (grad {r['grad_err']:.1e}, hvp {r['hvp_err']:.1e})")
            else:
                cells.append(_fmt(r.get(c)))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n = 10^4, 10^6, 10^8; short budgets")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--functions", default=",".join(FUNCTIONS))
    p.add_argument("--cpu-max", type=float, default=None,
                   help="largest n timed on the CPU (default 10^7, --quick 10^6)")
    p.add_argument("--no-peers", action="store_true", help="skip torch.func and JAX")
    p.add_argument("--require-gpu", action="store_true", help="exit 1 when there is no GPU")
    p.add_argument("--json", help="also write the rows to this file")
    a = p.parse_args(argv)

    problem = gpu_problem()
    if problem:
        print(f"benchmarks/gpu.py: skipped: {problem}")
        return 1 if a.require_gpu else 0
    import cupy
    dev = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"# mooncake_py on the GPU: {dev['name'].decode()}, CuPy {cupy.__version__}, "
          f"dtype {a.dtype}\n")
    sizes = [10 ** 4, 10 ** 6, 10 ** 8] if a.quick else [10 ** k for k in range(4, 9)]
    cpu_max = a.cpu_max or (1e6 if a.quick else 1e7)
    budget = 0.2 if a.quick else 1.0
    peers = {} if a.no_peers else {"torch": _torch_gpu(), "jax": _jax_gpu()}
    print("peers: " + ", ".join(f"{k} {'on the GPU' if v else 'not available'}"
                                for k, v in peers.items()) + "\n")
    dtype = np.dtype(a.dtype).type
    rows, t0, failed = [], time.time(), False
    for name in a.functions.split(","):
        print(f"## {name}: {FUNCTIONS[name].__doc__.strip()}\n")
        frows = []
        for n in sizes:
            frows.append(row(name, n, dtype, budget, cpu_max, peers))
            failed |= not frows[-1]["ok"]
        print(table(frows) + "\n")
        rows += frows
    print(f"({time.time() - t0:.0f} s; times are medians; grad/primal and hvp/grad are the "
          "GPU ratios; '–': not measured)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
