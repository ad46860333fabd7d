"""mooncake_py: automatic differentiation of plain NumPy code, strongest at second order.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> mp.grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    array([2., 4.])
"""
from . import linalg, registration, special
from .config import Config
from .core.allocator import tune as tune_allocator
from .core.pytree import ravel_pytree, register_pytree_node
from .dual import DualArray, dual, primal, tangent
from .errors import (
    ArgumentError,
    CompileFallbackWarning,
    EscapedValueError,
    MissingMethodError,
    MissingRuleError,
    MixedArrayModulesError,
    MooncakeError,
    MutationError,
    NonDifferentiableInputError,
    OutputTypeError,
    PreparedCacheSpecError,
    ReverseOverReverseError,
    RuleError,
    StaleReplayError,
    TangentError,
    TrackingLostError,
)
from .operators import hessian_operator, hessp
from .rules import composite, defvjp, frule, primitive, rrule, stop_gradient, zero_derivative
from .sparse import (
    hessian_sparsity,
    jacobian_sparsity,
    prepare_sparse_hessian_cache,
    prepare_sparse_jacobian_cache,
    sparse_hessian,
    sparse_jacobian,
    value_and_sparse_jacobian,
    value_gradient_and_sparse_hessian,
)
from .tape import Tape, TrackedArray
from .transforms.caches import (
    prepare_gradient_cache,
    prepare_pullback_cache,
    value_and_gradient,
    value_and_pullback,
)
from .transforms.forward import jacobian, jvp, prepare_derivative_cache, value_and_derivative
from .transforms.reverse import grad, value_and_grad, vjp
from .transforms.second_order import (
    hessian,
    hvp,
    prepare_hessian_cache,
    prepare_hvp_cache,
    value_and_hvp,
    value_gradient_and_hessian,
)
from .transforms.warmup import warmup

__version__ = "0.1.0"

registration.install()  # hooks between the layers, once every rule is registered

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
    "ArgumentError", "EscapedValueError", "MissingMethodError", "CompileFallbackWarning",
    "StaleReplayError",
    # namespaces of wrapped SciPy functions
    "special", "linalg",
]


def __dir__():
    return __all__ + ["__version__"]
