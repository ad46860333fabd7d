"""Griffe extension for the API reference, applied to the docstrings as loaded (the source is
not changed): the package heads its doctests ``Example:``, which Google-style parsing reads as
an admonition (prose), so the heading becomes ``Examples:`` and the ``>>>`` lines render as
code; Sphinx roles (``:func:`grad```, ``:class:`~mooncake_py.tape.tape.Tape```) become inline
code with the name as written (its last component where Sphinx would show only that)."""
import re

import griffe

_HEADING = re.compile(r"(?m)^(\s*)Example:\s*$")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def _role(m):
    name = m.group(2)
    return f"`{name.rsplit('.', 1)[-1] if m.group(1) else name}`"


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        doc = getattr(obj, "docstring", None)
        if doc is not None:
            doc.value = _ROLE.sub(_role, _HEADING.sub(r"\1Examples:", doc.value))
