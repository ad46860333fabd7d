"""Test-session settings that must be in place before NumPy loads its BLAS."""
import os

# Tiny LAPACK calls (solves on 3×3 matrices) slow down sharply when a BLAS thread pool competes
# with the test process for the 2 cores of CI: one thread is faster for everything tested here.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


import pytest  # noqa: E402  (after the BLAS settings above)


@pytest.fixture
def debug_mode():
    """Run a test with mp.Config(debug_mode=True): every rule's outputs, cotangents and tangents
    (lanes included) are checked for structure, shape and dtype on every call."""
    import mooncake_py as mp
    with mp.Config(debug_mode=True):
        yield
