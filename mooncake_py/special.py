"""Differentiable versions of scipy.special functions that do not dispatch through NumPy.

``scipy.special.logsumexp(x)`` converts ``x`` with ``np.asarray``, which would lose tracking;
use ``mooncake_py.special.logsumexp(x)`` instead (same signature; plain arrays pass straight to
scipy). The scipy.special ufuncs (``expit``, ``erf``, ``gammaln``, ...) work directly.
"""
from .rules.special import *  # noqa: F401,F403
