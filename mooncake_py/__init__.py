"""mooncake_py: automatic differentiation of plain NumPy code, strongest at second order.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> mp.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
"""
from .errors import (MooncakeError, MissingRuleError, ReverseOverReverseError, OutputTypeError,
                     NonDifferentiableInputError, PreparedCacheSpecError, TrackingLostError,
                     MutationError, RuleError, TangentError, MixedArrayModulesError,
                     ArgumentError, EscapedValueError, MissingMethodError)
from .config import Config
from .rules import rrule, frule, defvjp, primitive, zero_derivative, stop_gradient, composite
from .tape import Tape, TrackedArray
from .api import grad, value_and_grad, vjp

__version__ = "0.1.0"
from .allocator import tune as tune_allocator  # noqa: E402
from . import special, linalg  # noqa: E402  (public namespaces of wrapped scipy functions)
from .caches import (prepare_gradient_cache, value_and_gradient,  # noqa: E402
                     prepare_pullback_cache, value_and_pullback)
from .dual import DualArray, dual, primal, tangent  # noqa: E402
from .forward_api import (jvp, jacobian, prepare_derivative_cache,  # noqa: E402
                          value_and_derivative)
from .second_order import (hvp, hessian, prepare_hvp_cache, value_and_hvp,  # noqa: E402
                           prepare_hessian_cache, value_gradient_and_hessian)
from .pytree import register_pytree_node, ravel_pytree  # noqa: E402
from .operators import hessp, hessian_operator  # noqa: E402
from .dual.kernels_cpu import warmup  # noqa: E402
from .sparse import (sparse_hessian, sparse_jacobian, hessian_sparsity,  # noqa: E402
                     jacobian_sparsity, prepare_sparse_hessian_cache,
                     value_gradient_and_sparse_hessian, prepare_sparse_jacobian_cache,
                     value_and_sparse_jacobian)

# The public API, what `from mooncake_py import *` and dir(mooncake_py) show. It is a literal
# list because type checkers read it to know what the package re-exports (mypy --strict does
# not re-export plain imports of a typed package). A new public function: import it above and
# add its name here (tests/test_packaging.py checks that the two agree).
__all__ = [
    # differentiation
    "grad", "value_and_grad", "vjp", "jvp", "jacobian", "hvp", "hessian",
    # SciPy-facing second order
    "hessp", "hessian_operator",
    # sparse Jacobians and Hessians (detection, coloring, compressed evaluation)
    "sparse_hessian", "sparse_jacobian", "hessian_sparsity", "jacobian_sparsity",
    "prepare_sparse_hessian_cache", "value_gradient_and_sparse_hessian",
    "prepare_sparse_jacobian_cache", "value_and_sparse_jacobian",
    # prepared caches
    "prepare_gradient_cache", "value_and_gradient", "prepare_pullback_cache",
    "value_and_pullback", "prepare_derivative_cache", "value_and_derivative",
    "prepare_hvp_cache", "value_and_hvp", "prepare_hessian_cache", "value_gradient_and_hessian",
    # containers
    "register_pytree_node", "ravel_pytree",
    # low level: tape and dual numbers
    "Tape", "TrackedArray", "DualArray", "dual", "primal", "tangent",
    # rules
    "rrule", "frule", "defvjp", "primitive", "zero_derivative", "stop_gradient", "composite",
    # configuration
    "Config", "warmup", "tune_allocator",
    # errors
    "MooncakeError", "MissingRuleError", "ReverseOverReverseError", "OutputTypeError",
    "NonDifferentiableInputError", "PreparedCacheSpecError", "TrackingLostError",
    "MutationError", "RuleError", "TangentError", "MixedArrayModulesError",
    "ArgumentError", "EscapedValueError", "MissingMethodError",
    # namespaces of wrapped SciPy functions
    "special", "linalg",
]


def __dir__():
    return __all__ + ["__version__"]
