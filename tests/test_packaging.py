"""The package as users install it: metadata, the public namespace, type hints that a strict
type checker accepts, and the kernel cache location."""
import os
import pathlib
import subprocess
import sys
import types

import pytest

import mooncake_py as mp

ROOT = pathlib.Path(__file__).resolve().parent.parent

TYPED_EXAMPLE = '''
"""A typed program using the public API."""
from typing import Any

import numpy as np
import numpy.typing as npt

import mooncake_py as mp

Vec = npt.NDArray[np.float64]


def loss(x: Vec, scale: float) -> Any:
    return scale * np.sum(np.sin(x) * x ** 2)


x: Vec = np.linspace(-1.0, 1.0, 4)
v: Vec = np.ones(4)
g = mp.grad(loss)(x, 2.0)
(y, aux), g2 = mp.value_and_grad(lambda x: (loss(x, 1.0), x), has_aux=True)(x)
hv = mp.hvp(loss)(x, 2.0, v)
H = mp.hessian(loss, argnums=0, chunk_size=2)(x, 2.0)
J = mp.jacobian(np.sin, mode="forward")(x)
y1, dy = mp.jvp(np.sin, (x,), (v,))
y2, pullback = mp.vjp(np.tanh, x)
cot = pullback(v)
hp = mp.hessp(loss)(x, v, 2.0)
op = mp.hessian_operator(loss, x, 2.0)
flat, unravel = mp.ravel_pytree({"w": x, "b": 1.0})
c = mp.prepare_hvp_cache(loss, x, 2.0)
val, grads, Hv = mp.value_and_hvp(c, loss, (v, None), x, 2.0)
gc = mp.prepare_gradient_cache(loss, x, 2.0)
val2, grads2 = mp.value_and_gradient(gc, loss, x, 2.0)
n_kernels: int = mp.warmup(dtypes=())
try:
    mp.grad(loss)(np.arange(3), 2.0)
except mp.NonDifferentiableInputError as err:
    message: str = str(err)
'''


def _mypy(tmp_path, source):
    path = tmp_path / "typed_use.py"
    path.write_text(source)
    env = dict(os.environ, MYPYPATH=str(ROOT))
    # follow-imports=silent: the example is checked strictly against mooncake_py's annotations,
    # as for an installed typed package, without reporting on mooncake_py's own internals
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "mypy_cache"), str(path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_mypy_strict_accepts_typed_use_of_the_public_api(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    done = _mypy(tmp_path, TYPED_EXAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr
    # and it does read the annotations: a wrong argnums type is an error
    bad = _mypy(tmp_path, "import mooncake_py as mp\nmp.grad(sum, argnums='a')\n")
    assert bad.returncode == 1 and "argnums" in bad.stdout, bad.stdout


def test_all_is_exactly_the_public_namespace():
    public = {n for n, v in vars(mp).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    namespaces = {"special", "linalg"}
    assert len(mp.__all__) == len(set(mp.__all__)), "a name is listed twice in __all__"
    missing = public - set(mp.__all__)
    assert not missing, f"imported in mooncake_py/__init__.py but not listed in __all__: {missing}"
    assert set(mp.__all__) - namespaces <= public
    assert namespaces <= set(mp.__all__)
    assert set(dir(mp)) == set(mp.__all__) | {"__version__"}
    ns = {}
    exec("from mooncake_py import *", ns)
    assert set(ns) - {"__builtins__"} == set(mp.__all__)


def test_public_names_have_docstrings():
    for name in mp.__all__:
        assert (getattr(mp, name).__doc__ or "").strip(), f"mp.{name} has no docstring"


def test_metadata_in_pyproject():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = cfg["project"]
    assert project["name"] == "mooncake_py" and project["dynamic"] == ["version"]
    assert cfg["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mooncake_py.__version__"}
    deps = " ".join(project["dependencies"])
    assert "numpy" in deps and "numba" in deps
    extras = project["optional-dependencies"]
    assert {"pytest", "hypothesis", "scipy", "mypy"} <= set(extras["test"])
    assert {"autograd", "jax", "torch", "matplotlib"} <= set(extras["bench"])
    assert extras["gpu"] == ["cupy"]
    assert {"mkdocs", "mkdocs-material", "mkdocstrings[python]"} <= set(extras["docs"])
    assert "py.typed" in cfg["tool"]["setuptools"]["package-data"]["mooncake_py"]
    assert (ROOT / "mooncake_py" / "py.typed").exists()
    assert "Copyright (c) 2026 the mooncake_py authors" in (ROOT / "LICENSE").read_text()
    setup_cfg = (ROOT / "setup.cfg").read_text()
    assert "[tool:pytest]" in setup_cfg and "[metadata]" not in setup_cfg


def test_kernel_cache_dir_from_environment(tmp_path):
    pytest.importorskip("numba")
    cache = tmp_path / "kernels"
    code = ("import numpy as np, mooncake_py as mp\n"
            "from mooncake_py.dual import kernels_cpu\n"
            "x = np.linspace(0.1, 0.9, 10000)\n"
            "_, t = mp.jvp(lambda x: np.tanh(x) * np.exp(x), (x,), (np.ones_like(x),))\n"
            "assert np.allclose(t, np.exp(x) * (np.tanh(x) + 1 - np.tanh(x) ** 2))\n"
            "print(kernels_cpu.kernel_dir())\n")
    env = dict(os.environ, MOONCAKE_PY_CACHE_DIR=str(cache))
    env.pop("MOONCAKE_PY_KERNELS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(cache)
    assert list(cache.glob("k_*.py")), "no kernel source was written to MOONCAKE_PY_CACHE_DIR"


def test_warmup_refuses_non_float_dtypes():
    with pytest.raises(ValueError, match="floating-point"):
        mp.warmup(dtypes=("int64",))
