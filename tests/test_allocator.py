"""glibc malloc tuning (mp.tune_allocator): never at import, applied once when asked, left alone
when the user opts out or sets glibc's own variables, and it removes the page faults that a
gradient of 100k-element code pays on every call (counted, not timed)."""
import os
import platform
import subprocess
import sys

import pytest

from mooncake_py.core import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

_FAULTS = """
import resource, numpy as np, mooncake_py as mp
from mooncake_py.core import allocator
def f(x):
    d = np.log(np.abs(x) + 1.0)
    return np.sum(-d - 0.5 * (d - x[0]) ** 2 / (2.0 + x[1] ** 2))
import sys
if sys.argv[1:] == ["tune"]:
    mp.tune_allocator()
x = np.random.default_rng(0).standard_normal(100_000)
g = mp.value_and_grad(f)
for _ in range(3):
    g(x)
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    g(x)
print(allocator.state(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 20)
"""


def _run(code, *args, **env):
    e = {k: v for k, v in os.environ.items()
         if k not in ("MOONCAKE_PY_MALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code, *args], env=e, capture_output=True, text=True,
                         check=True).stdout.strip()
    return out.rsplit(" ", 1)


def test_import_changes_nothing():
    state, _ = _run("import mooncake_py; from mooncake_py.core import allocator; "
                    "print(allocator.state(), 0)")
    assert state == "not tuned yet"


def test_state_says_what_was_done():
    assert allocator.tune() == allocator.state()  # once: a second call changes nothing
    if allocator._why_not() is None:
        assert allocator.state() == "tuned"
    else:
        assert allocator.state() == allocator._why_not()


@pytest.mark.parametrize("env, want", [
    ({"MOONCAKE_PY_MALLOC": "system"}, "system (MOONCAKE_PY_MALLOC=system)"),
    ({"MALLOC_TRIM_THRESHOLD_": "131072"}, "system (set in the environment)"),
])
def test_left_alone_when_the_user_says_so(env, want):
    code = "import mooncake_py as mp; print(mp.tune_allocator(), 0)"
    state, _ = _run(code, **env)
    assert state == want


@pytest.mark.skipif(not GLIBC, reason="mallopt tuning applies to glibc only")
def test_gradient_of_large_arrays_stops_faulting_pages():
    tuned_state, tuned = _run(_FAULTS, "tune")
    system_state, system = _run(_FAULTS, "tune", MOONCAKE_PY_MALLOC="system")
    untouched_state, untouched = _run(_FAULTS)
    assert tuned_state == "tuned" and system_state.startswith("system")
    assert untouched_state == "not tuned yet" and float(untouched) > 100
    assert float(system) > 100  # the defaults fault the temporaries in on every call...
    assert float(tuned) * 10 < float(system)  # ...the tuned heap keeps them
