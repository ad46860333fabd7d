"""Rule tables: one module per family of functions, each registering its rules when imported.

``registry.py`` holds the tables and the decorators (``rrule``, ``frule``, ``primitive``, ...),
``derivative_table.py`` the scalar derivatives of the elementwise ops (both modes and the
kernels are generated from it), and each family module the rules of its functions
(``elementwise.py``, ``linear_algebra.py``, ``special.py``, ...). What must happen after every
rule is registered (complex-number overrides, BLAS thread limits, the set of built-in rules) is
in mooncake_py/registration.py.
"""
from . import (  # noqa: F401  (each family module registers its rules when imported)
    broadcasting,
    cholesky_blas,
    complex,
    construction,
    convolution,
    cotangents,
    decompositions,
    derivative_table,
    differences,
    elementwise,
    fft,
    indexing,
    interpolation,
    lanes,
    linear_algebra,
    mutation,
    reductions,
    shape,
    signal,
    sorting,
    special,
    statistics,
    ufunc_methods,
)
from .registry import (
    FRULES,
    RRULES,
    ZERO_DERIVATIVE,
    composite,
    defvjp,
    frule,
    primitive,
    rrule,
    stop_gradient,
    zero_derivative,
)

# The rules shipped with mooncake_py, filled by mooncake_py/registration.py once they are all
# registered (the derivative table's late scipy section is added as it loads); the tape checks
# the cotangents of every other rule.
BUILTIN_RRULES = set()

__all__ = ["FRULES", "RRULES", "ZERO_DERIVATIVE", "BUILTIN_RRULES", "composite", "defvjp",
           "frule", "primitive", "rrule", "stop_gradient", "zero_derivative"]
