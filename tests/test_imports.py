"""Importing mooncake_py imports neither scipy.special nor numba; scipy.special's rules still
apply whenever a scipy.special ufunc meets a tracked or dual value."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_does_not_load_scipy_special():
    assert _run("import sys, mooncake_py\nprint('scipy.special' in sys.modules)") == "False"


def test_import_does_not_load_numba():
    assert _run("import sys, mooncake_py\nprint('numba' in sys.modules)") == "False"


_MISS = """
import sys, numpy as np, mooncake_py as mp
import scipy.special as sps            # the user's own import; mooncake_py loaded nothing yet
from mooncake_py.rules import derivative_table as dt
assert 'betaln' not in dt.TABLE
x = np.array([1.5, 2.5])
g = mp.grad(lambda a: np.sum(sps.betaln(a, 2.0)))(x)          # reverse: the tape's rule miss
assert np.allclose(g, sps.digamma(x) - sps.digamma(x + 2.0))
print('betaln' in dt.TABLE)
"""

_MISS_FORWARD = """
import numpy as np, mooncake_py as mp
import scipy.special as sps
_, t = mp.jvp(sps.j0, (np.array([1.0, 2.0]),), (np.ones(2),))   # forward: the dual's rule miss
assert np.allclose(t, -sps.j1([1.0, 2.0]))
_, h = mp.jvp(lambda x: mp.hvp(lambda u: np.sum(sps.gammaln(u)))(x, np.ones(2)),
              (np.array([1.0, 2.0]),), (np.ones(2),))            # third derivative
assert np.allclose(h, sps.polygamma(2, [1.0, 2.0]))
print('ok')
"""


def test_scipy_section_loads_on_the_first_rule_miss():
    assert _run(_MISS) == "True"
    assert _run(_MISS_FORWARD) == "ok"


def test_the_mirror_module_loads_scipy_on_first_attribute_access():
    code = ("import sys, mooncake_py as mp\n"
            "from mooncake_py.scipy import special\n"
            "a = 'scipy.special' in sys.modules\n"
            "f = special.expit\n"
            "import scipy.special\n"
            "print(a, f is scipy.special.expit, mp.special is special)")
    assert _run(code) == "False True True"
