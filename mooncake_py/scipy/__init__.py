"""Differentiable mirrors of SciPy's namespaces: a port changes one import.

``from scipy import stats, special, linalg, signal, integrate`` becomes
``from mooncake_py.scipy import stats, special, linalg, signal, integrate``. Each function
called on plain arrays goes straight to SciPy; called on tracked or dual values it uses rules
(or an implementation made of ruled ``np.`` calls), so gradients, HVPs and Hessians flow.
Submodules are imported on first use, so ``import mooncake_py`` does not import SciPy.
"""
