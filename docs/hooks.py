"""MkDocs hook: the API reference covers the whole public API, and every public object has a
docstring. Run by ``mkdocs build`` (see ``hooks:`` in mkdocs.yml); a gap fails the build.

It also fills the ``<!-- table: NAME -->`` markers of the reference pages with a table of
objects mkdocstrings does not render one by one: the ``scipy.stats`` distributions (instances)
and the SciPy ufuncs that ``mooncake_py.scipy.special`` re-exports. The tables are made from
the package at build time, so they cannot fall out of date."""
import importlib
import inspect
import pathlib
import re

from mkdocs.exceptions import PluginError

NAMESPACES = ("stats", "special", "linalg", "signal", "integrate")


def public_objects():
    """``{dotted name: object}`` of every name in ``mooncake_py.__all__`` and in the
    ``__all__`` of each ``mooncake_py.scipy`` namespace."""
    mp = importlib.import_module("mooncake_py")
    out = {f"mooncake_py.{n}": getattr(mp, n) for n in mp.__all__}
    for ns in NAMESPACES:
        mod = importlib.import_module(f"mooncake_py.scipy.{ns}")
        out[f"mooncake_py.scipy.{ns}"] = mod
        out.update({f"mooncake_py.scipy.{ns}.{n}": getattr(mod, n) for n in mod.__all__})
    out["mooncake_py.testing"] = importlib.import_module("mooncake_py.testing")
    return out


def problems(docs_dir):
    """Lines naming each public object without a docstring and each name of
    ``mooncake_py.__all__`` or namespace with no ``::: name`` in the reference pages."""
    ref = "\n".join(p.read_text() for p in pathlib.Path(docs_dir, "reference").glob("*.md"))
    documented = set(re.findall(r"(?m)^::: (\S+)", ref))
    out = []
    for name, obj in public_objects().items():
        if not (inspect.getdoc(obj) or "").strip():
            out.append(f"{name} has no docstring")
        top = name.count(".") == 1 or name.rsplit(".", 1)[0] == "mooncake_py.scipy" \
            or name == "mooncake_py.testing"
        if top and name not in documented:
            out.append(f"{name} is not in the API reference (docs/reference/*.md)")
    return out


def on_config(config):
    found = problems(config["docs_dir"])
    if found:
        raise PluginError("API reference incomplete:\n  " + "\n  ".join(found))
    return config


def _first_line(obj):
    """The first paragraph of ``obj``'s docstring that is not a call signature (ufunc
    docstrings start with one or two), as one Markdown table cell."""
    paras = [p.strip() for p in (inspect.getdoc(obj) or "").split("\n\n") if p.strip()]
    text = next((p for p in paras if not re.match(r"^[\w.]+\(.*\)$", p, re.S)), "")
    return text.replace("\n", " ").replace("``", "`").replace("|", "\\|")


def table(name):
    """The Markdown table that replaces ``<!-- table: name -->``."""
    import numpy as np
    if name == "stats":
        mod = importlib.import_module("mooncake_py.scipy.stats")
        rows = [(n, _first_line(type(getattr(mod, n)))) for n in mod.__all__]
        head = "| Distribution | Description |"
    elif name == "special-ufuncs":
        mod = importlib.import_module("mooncake_py.scipy.special")
        rows = [(n, _first_line(getattr(mod, n)))
                for n in mod.__all__ if isinstance(getattr(mod, n), np.ufunc)]
        head = "| Function | Description (SciPy's) |"
    else:
        raise PluginError(f"unknown table {name!r}")
    return "\n".join([head, "|:---|:---|"] + [f"| `{n}` | {d} |" for n, d in rows])


def on_page_markdown(markdown, page, config, files):
    return re.sub(r"<!-- table: ([\w-]+) -->", lambda m: table(m.group(1)), markdown)
