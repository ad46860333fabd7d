"""Differentiable mirrors of SciPy's namespaces: a port changes one import.

``from scipy import stats, special, linalg, signal, integrate`` becomes
``from mooncake_py.scipy import stats, special, linalg, signal, integrate``. Each function
called on plain arrays goes straight to SciPy; called on tracked or dual values it uses rules
(or an implementation made of ruled ``np.`` calls), so gradients, HVPs and Hessians flow.
Submodules are imported on first use, so ``import mooncake_py`` does not import SciPy.
"""
import importlib

_SUBMODULES = ("stats", "special", "linalg", "signal", "integrate")
__all__ = list(_SUBMODULES)


def __getattr__(name):
    # `import mooncake_py.scipy as msp; msp.stats` works like `from mooncake_py.scipy import stats`
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
