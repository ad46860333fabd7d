"""Rule tables. Importing this package registers every built-in rule; one module per family."""
from .registry import (RRULES, FRULES, ZERO_DERIVATIVE, rrule, frule, defvjp, primitive,
                       zero_derivative, stop_gradient)
from . import derivative_table, elementwise, shape, reductions, indexing, linear_algebra, special  # noqa: F401  (registration side effects)
