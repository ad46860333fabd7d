"""Every runnable example in the public docstrings still runs and prints what it says."""
import doctest
import importlib
import pkgutil

import pytest

import mooncake_py

_FINDER = doctest.DocTestFinder()


def _modules_with_examples():
    names = ["mooncake_py"] + sorted(m.name for m in
                                     pkgutil.walk_packages(mooncake_py.__path__, "mooncake_py."))
    return [n for n in names
            if any(t.examples for t in _FINDER.find(importlib.import_module(n)))]


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
