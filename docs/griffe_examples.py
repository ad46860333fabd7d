"""Griffe extension for the API reference: the package's docstrings head their doctests
``Example:``, which Google-style parsing reads as an admonition (prose); rename the heading to
``Examples:`` so that the ``>>>`` lines render as code. The source is not changed."""
import re

import griffe

_HEADING = re.compile(r"(?m)^(\s*)Example:\s*$")


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        doc = getattr(obj, "docstring", None)
        if doc is not None and "Example:" in doc.value:
            doc.value = _HEADING.sub(r"\1Examples:", doc.value)
