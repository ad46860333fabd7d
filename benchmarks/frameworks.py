"""How each framework computes each quantity for a case: the columns of the benchmark tables.

A :class:`Method` is one column: a framework, a quantity (``"gradient"``, ``"forward"`` (one
directional derivative), ``"hvp"``) and a builder. ``build(case, args, dirs)`` gets the case, its
float64 NumPy inputs and one random direction per differentiated argument, does whatever
preparation the framework allows outside the timed region (converting arrays, ``jax.jit``,
making leaf tensors), and returns ``(run, pick)``: ``run()`` computes the quantity once,
synchronously, and ``pick(run())`` selects the derivative from its output (used once, untimed,
to check that the frameworks agree). A builder raises :class:`NotApplicable` when the
framework has no such operation. A builder may return a third item, ``info``: called once
after the timing, it returns extra fields for the result (a prepared cache's preparation time,
and whether its plan ran on the compiled kernel).

Peers are imported lazily: a framework that is not installed makes its columns "missing".
"""
import importlib
import inspect
from dataclasses import dataclass
from time import perf_counter
from typing import Callable

import numpy as np

from . import namespaces

QUANTITIES = ("gradient", "forward", "hvp")
FRAMEWORKS = ("mooncake_py", "autograd", "torch", "jax")


class NotApplicable(Exception):
    """The framework has no way to compute this quantity (the message says why)."""


@dataclass(frozen=True)
class Method:
    column: str
    framework: str
    quantity: str
    build: Callable


_NAMESPACES = {}
_MODULES = {"mooncake_py": "mooncake_py", "autograd": "autograd", "torch": "torch", "jax": "jax"}


def namespace(framework):
    """The array namespace of ``framework`` (imports it; ImportError if it is not installed)."""
    if framework not in _NAMESPACES:
        make = {"mooncake_py": namespaces.numpy_namespace, "numpy": namespaces.numpy_namespace,
                "autograd": namespaces.autograd_namespace, "torch": namespaces.torch_namespace,
                "jax": namespaces.jax_namespace}[framework]
        _NAMESPACES[framework] = make()
    return _NAMESPACES[framework]


def available(framework):
    """``None`` if ``framework`` can be imported, else the reason it cannot."""
    try:
        importlib.import_module(_MODULES[framework])
        namespace(framework)
    except ImportError as e:
        return f"not installed ({e.name or e})"
    return None


def version(framework):
    """The installed version of ``framework`` (``None`` if it is not installed)."""
    from importlib import metadata
    try:
        return metadata.version(_MODULES[framework])
    except metadata.PackageNotFoundError:
        mod = importlib.import_module(_MODULES[framework])
        return getattr(mod, "__version__", "?")


def _same(out):
    return out


def _second(out):
    return out[1]


def _last(out):
    return out[-1]


def as_vector(x):
    """Any framework's result (arrays, tensors, scalars, nested tuples) as one float64 vector."""
    if isinstance(x, (tuple, list)):
        parts = [as_vector(v) for v in x]
        return np.concatenate(parts) if parts else np.zeros(0)
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu().numpy()
    # a copy: prepared caches may return views of buffers that their next call overwrites
    return np.array(x, dtype=np.float64).ravel()


def _single(xs):
    return xs[0] if len(xs) == 1 else tuple(xs)


# --- primal, per framework (for context; the tables divide by NumPy's) -------------------------

def primal_builder(framework, jit=False):
    def build(case, args, dirs):
        if framework == "torch":
            import torch
            fn, targs = case.bind(namespace("torch")), _torch_args(args)

            def run():
                with torch.no_grad():
                    return fn(*targs)
            return run, _same
        if framework == "jax":
            import jax
            fn, jargs = case.bind(namespace("jax")), _jax_args(args)
            fn = jax.jit(fn) if jit else fn
            return (lambda: jax.block_until_ready(fn(*jargs))), _same
        fn = case.bind(namespace(framework))
        return (lambda: fn(*args)), _same
    return build


# --- mooncake_py ------------------------------------------------------------------------------

def _mp():
    import mooncake_py as mp
    return mp


def _need(mp, name):
    if not hasattr(mp, name):
        raise NotApplicable(f"mooncake_py has no {name} yet")


def _mp_grad(case, args, dirs):
    mp = _mp()
    gf = mp.grad(case.bind(namespace("mooncake_py")), argnums=case.argnums)
    return (lambda: gf(*args)), _same


def _prepared(make, compile):
    """``make()`` (a ``prepare_*_cache`` call) and the ``info`` callback that reports the
    seconds it took, the kind of plan the cache ended up running and, for a compiled cache,
    whether that plan runs on the compiled kernel."""
    t0 = perf_counter()
    cache = make()
    prepare_s = perf_counter() - t0

    def info():
        plan = getattr(getattr(cache, "_replay", None), "plan", None)
        name = type(plan).__name__ if plan is not None else "none"
        out = {"prepare_s": prepare_s, "plan": name}
        if compile:
            # the cache's own report: every step in a compiled kernel, segment or fused
            # kernel, or only some of them (the rest replayed in Python)
            try:
                report = cache.compile_report()
            except Exception:  # noqa: BLE001  (not recorded yet: nothing compiled)
                report = None
            out["compiled"] = report is not None and report.compiled
            out["partly_compiled"] = not out["compiled"] and report is not None and \
                len(report.fallbacks) < len(report.entries)
        return out
    return cache, info


def _load_kernel(kind):
    """Load the compiled-replay kernel before the first timed call, so that the first call's
    time is the case's own cost (record, plan, encode) and the load is reported once, apart
    (``TIMES`` of mooncake_py.replay.compiled). A kernel that fails to load is not an error
    here: the cache then runs the Python replay, and the row says it did not compile."""
    try:
        from mooncake_py.replay import compiled
        getattr(compiled, "hvp_kernel" if kind == "hvp" else "kernel")()
    except Exception:  # noqa: BLE001
        pass


def kernel_load_times():
    """Seconds the compiled-replay kernels took to load in this process (``{}`` if none
    loaded): ``load_s`` (gradient) and ``hvp_load_s``."""
    import sys
    compiled = sys.modules.get("mooncake_py.replay.compiled")
    return dict(getattr(compiled, "TIMES", {}))


QUICK = False  # set by ``--quick``: leave out the columns that would first have to compile


def kernel_on_disk(kind):
    """Whether numba's on-disk cache already holds the compiled-replay kernel of ``kind``
    (``"gradient"`` / ``"hvp"``), so that loading it costs about a second instead of a compile.
    A kernel already loaded in this process counts as cached. (The small segment kernels of
    mixed plans are not checked: they compile in about a second.)"""
    import hashlib
    import os
    from mooncake_py.dual.kernels_cpu import kernel_dir
    from mooncake_py.replay import compiled
    d = kernel_dir()
    try:
        names = os.listdir(os.path.join(d, "__pycache__")) if d else []
    except OSError:
        names = []
    if compiled._KERNELS.get(kind):
        return True
    make, prefix = compiled._KINDS[kind][:2]
    stem = prefix + hashlib.sha1(make().encode()).hexdigest()[:20]
    return any(n.startswith(stem + ".") and n.endswith(".nbi") for n in names)


def _cache(mp, kind, g, diff, compile):
    """A ``prepare_<kind>_cache`` of ``g`` at ``diff`` (compiled if asked), and its ``info``."""
    prepare = getattr(mp, f"prepare_{kind}_cache")
    if not compile:
        return _prepared(lambda: prepare(g, *diff), False)
    if "compile" not in inspect.signature(prepare).parameters:
        raise NotApplicable(f"this version has no compiled {'HVP' if kind == 'hvp' else kind}")
    if QUICK and not kernel_on_disk(kind):
        raise NotApplicable("left out by --quick: the compiled-replay kernels are not in the "
                            "on-disk cache yet (a run without --quick, --quick --compile or "
                            "mp.warmup(replay_kernels=True) compiles them once)")
    _load_kernel(kind)
    return _prepared(lambda: prepare(g, *diff, compile=True), True)


def _mp_grad_prepared(case, args, dirs, compile=False):
    mp = _mp()
    _need(mp, "prepare_gradient_cache")
    g, diff = case.closure(namespace("mooncake_py"), args)
    cache, info = _cache(mp, "gradient", g, diff, compile)
    return (lambda: mp.value_and_gradient(cache, g, *diff)), _second, info


def _mp_grad_compiled(case, args, dirs):
    return _mp_grad_prepared(case, args, dirs, compile=True)


def _mp_jvp(case, args, dirs):
    mp = _mp()
    _need(mp, "jvp")
    g, diff = case.closure(namespace("mooncake_py"), args)
    return (lambda: mp.jvp(g, diff, tuple(dirs))), _second


def _mp_hvp(case, args, dirs):
    mp = _mp()
    _need(mp, "hvp")
    hv = mp.hvp(case.bind(namespace("mooncake_py")), argnums=_single(case.argnums))
    v = _single(dirs)
    return (lambda: hv(*args, v)), _same


def _mp_jvp_grad(case, args, dirs):
    mp = _mp()
    _need(mp, "jvp")
    g, diff = case.closure(namespace("mooncake_py"), args)
    gr = mp.grad(g, argnums=tuple(range(len(diff))))
    return (lambda: mp.jvp(gr, diff, tuple(dirs))), _second


def _mp_hvp_prepared(case, args, dirs, compile=False):
    mp = _mp()
    _need(mp, "prepare_hvp_cache")
    g, diff = case.closure(namespace("mooncake_py"), args)
    cache, info = _cache(mp, "hvp", g, diff, compile)
    v = _single(dirs)
    return (lambda: mp.value_and_hvp(cache, g, v, *diff)), _last, info


def _mp_hvp_compiled(case, args, dirs):
    return _mp_hvp_prepared(case, args, dirs, compile=True)


# --- autograd ---------------------------------------------------------------------------------

def _ag_fn(case, args):
    g, diff = case.closure(namespace("autograd"), args)
    if len(diff) == 1:
        return g, diff[0]
    return (lambda t: g(*t)), diff


def _ag_grad(case, args, dirs):
    import autograd
    f, x = _ag_fn(case, args)
    gf = autograd.grad(f)
    return (lambda: gf(x)), _same


def _ag_forward(case, args, dirs):
    raise NotApplicable("autograd has no forward mode")


def _ag_hvp(case, args, dirs):
    """``autograd.hessian_vector_product`` (reverse-over-reverse). It contracts the gradient
    with ``v`` by ``np.tensordot``, which needs one array, so with several arguments the same
    thing is spelled out: the gradient of ``Σ_k <∂f/∂x_k, v_k>``."""
    import autograd
    import autograd.numpy as anp
    f, x = _ag_fn(case, args)
    if len(case.argnums) == 1:
        hv = autograd.hessian_vector_product(f)
        v = dirs[0]
        return (lambda: hv(x, v)), _same
    gf = autograd.grad(f)
    hv = autograd.grad(lambda t: sum(anp.sum(g * v) for g, v in zip(gf(t), dirs)))
    return (lambda: hv(x)), _same


# --- PyTorch ----------------------------------------------------------------------------------

def _torch_args(args):
    import torch
    return tuple(torch.as_tensor(np.asarray(a)) for a in args)


def _torch_setup(case, args, dirs):
    import torch
    targs = _torch_args(args)
    g, diff = case.closure(namespace("torch"), targs)
    return torch, g, diff, tuple(torch.as_tensor(d) for d in dirs)


def _torch_grad(case, args, dirs):
    torch, g, diff, _ = _torch_setup(case, args, dirs)
    leaves = tuple(d.detach().clone().requires_grad_(True) for d in diff)
    return (lambda: torch.autograd.grad(g(*leaves), leaves)), _same


def _torch_jvp(case, args, dirs):
    torch, g, diff, tdirs = _torch_setup(case, args, dirs)
    import torch.func
    return (lambda: torch.func.jvp(g, diff, tdirs)), _second


def _torch_hvp_functional(case, args, dirs):
    torch, g, diff, tdirs = _torch_setup(case, args, dirs)
    import torch.autograd.functional as taf
    return (lambda: taf.hvp(g, diff, tdirs)), _second


def _torch_hvp_func(case, args, dirs):
    torch, g, diff, tdirs = _torch_setup(case, args, dirs)
    import torch.func
    gr = torch.func.grad(g, argnums=tuple(range(len(diff))))
    return (lambda: torch.func.jvp(gr, diff, tdirs)), _second


# --- JAX --------------------------------------------------------------------------------------

def _jax_args(args):
    namespace("jax")  # float64 on
    import jax.numpy as jnp
    return tuple(jnp.asarray(a) for a in args)


def _jax_grad(jit):
    def build(case, args, dirs):
        import jax
        fn = case.bind(namespace("jax"))
        gf = jax.grad(fn, argnums=case.argnums)
        gf = jax.jit(gf) if jit else gf
        jargs = _jax_args(args)
        return (lambda: jax.block_until_ready(gf(*jargs))), _same
    return build


def _jax_directional(jit, hvp):
    """``jax.jvp`` of f (forward) or of ``jax.grad(f)`` (HVP); the non-differentiated
    arguments are passed in, not closed over, so that jit cannot constant-fold them."""
    def build(case, args, dirs):
        import jax
        xp = namespace("jax")

        def run(all_args, tangents):
            g, diff = case.closure(xp, all_args)
            if hvp:
                g = jax.grad(g, argnums=tuple(range(len(diff))))
            return jax.jvp(g, diff, tangents)
        run = jax.jit(run) if jit else run
        jargs, jdirs = _jax_args(args), _jax_args(dirs)
        return (lambda: jax.block_until_ready(run(jargs, jdirs))), _second
    return build


METHODS = [
    Method("mooncake_py", "mooncake_py", "gradient", _mp_grad),
    Method("mooncake_py (prepared)", "mooncake_py", "gradient", _mp_grad_prepared),
    Method("mooncake_py (compiled)", "mooncake_py", "gradient", _mp_grad_compiled),
    Method("autograd", "autograd", "gradient", _ag_grad),
    Method("torch", "torch", "gradient", _torch_grad),
    Method("jax", "jax", "gradient", _jax_grad(False)),
    Method("jax.jit", "jax", "gradient", _jax_grad(True)),

    Method("mooncake_py", "mooncake_py", "forward", _mp_jvp),
    Method("autograd", "autograd", "forward", _ag_forward),
    Method("torch (func.jvp)", "torch", "forward", _torch_jvp),
    Method("jax", "jax", "forward", _jax_directional(False, False)),
    Method("jax.jit", "jax", "forward", _jax_directional(True, False)),

    Method("mooncake_py", "mooncake_py", "hvp", _mp_hvp),
    Method("mooncake_py (jvp∘grad)", "mooncake_py", "hvp", _mp_jvp_grad),
    Method("mooncake_py (prepared)", "mooncake_py", "hvp", _mp_hvp_prepared),
    Method("mooncake_py (compiled)", "mooncake_py", "hvp", _mp_hvp_compiled),
    Method("autograd", "autograd", "hvp", _ag_hvp),
    Method("torch (functional.hvp)", "torch", "hvp", _torch_hvp_functional),
    Method("torch (func jvp∘grad)", "torch", "hvp", _torch_hvp_func),
    Method("jax", "jax", "hvp", _jax_directional(False, True)),
    Method("jax.jit", "jax", "hvp", _jax_directional(True, True)),
]

PRIMALS = [
    Method("NumPy", "mooncake_py", "primal", primal_builder("mooncake_py")),
    Method("torch", "torch", "primal", primal_builder("torch")),
    Method("jax", "jax", "primal", primal_builder("jax")),
    Method("jax.jit", "jax", "primal", primal_builder("jax", jit=True)),
]
