"""Rule tables. Importing this package registers every built-in rule; one module per family."""
from .registry import (RRULES, FRULES, ZERO_DERIVATIVE, rrule, frule, defvjp, primitive,
                       zero_derivative, stop_gradient, composite)
# registration side effects: each module registers its family's rules
from . import (derivative_table, elementwise, shape, reductions, indexing,  # noqa: F401
               linear_algebra, special, mutation)
from . import (differences, convolution, interpolation, sorting, construction,  # noqa: F401
               ufunc_methods, statistics)
from . import decompositions, signal  # noqa: F401
from . import complex, fft  # noqa: F401,E402  (last: complex reads and overrides the families' rules)

# Medium-sized BLAS/LAPACK calls in rules run on one OpenBLAS thread (see blas_threads.py).
from ..blas_threads import limit_small_calls  # noqa: E402
limit_small_calls(RRULES, FRULES)

# The rules shipped with mooncake_py (the derivative table's late scipy section included); the
# tape checks the cotangents of every other one.
BUILTIN_RRULES = set(RRULES)
derivative_table.on_new_entries(lambda entries: BUILTIN_RRULES.update(e.ufunc for e in entries))
