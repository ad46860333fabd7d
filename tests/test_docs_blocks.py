"""Every code block of the documentation runs as written.

The Python blocks of each page in ``docs/`` (and of the README, whose own test checks its
results) run in order, in one namespace per page, as a reader would paste them. A block that
cannot run here (shell commands, code that needs a GPU) is preceded by a comment the test reads
and that says why: ``<!-- not run: shell commands -->``. Any other block, whatever its
language, must run: a block with no reason not to run fails the test.
"""
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
_BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]+?) -->\s*\n)?```(?P<lang>[\w-]*)[^\n]*\n"
                    r"(?P<code>.*?)^```", re.S | re.M)


def blocks(path):
    """``[(language, code, reason not to run or None, line)]`` of the fenced blocks of a page
    (indented blocks inside list items included)."""
    text = path.read_text()
    dedented = re.sub(r"(?m)^  (?=\s*```|\S)", "", text) if path.name == "README.md" else text
    out = []
    for m in _BLOCK.finditer(dedented):
        line = dedented[:m.start()].count("\n") + 1
        out.append((m.group("lang"), m.group("code"), m.group("why"), line))
    return out


def _id(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PAGES, ids=_id)
def test_every_block_runs_or_says_why_not(path):
    for lang, code, why, line in blocks(path):
        if why is None:
            assert lang == "python", (
                f"{_id(path)}:{line}: a ```{lang or '(no language)'} block must be Python that "
                "runs, or be preceded by <!-- not run: why -->")


@pytest.mark.parametrize("path", [p for p in PAGES if p.name != "README.md"], ids=_id)
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a block that writes a file writes it here
    ns = {"__name__": "__docs__"}
    ran = 0
    for lang, code, why, line in blocks(path):
        if lang != "python" or why is not None:
            continue
        code = textwrap.dedent(code)
        exec(compile("\n" * (line) + code, str(path), "exec"), ns)
        ran += 1
    if ran == 0:
        pytest.skip("no runnable Python block on this page")


def test_reference_covers_the_public_api():
    """The build hook's check (docs/hooks.py), without MkDocs: every public name has a
    docstring and a ``::: name`` in the API reference."""
    pytest.importorskip("mkdocs")
    import importlib.util
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    assert hooks.problems(ROOT / "docs") == []
    assert "| `gammaln` |" in hooks.table("special-ufuncs")
    assert "| `norm` |" in hooks.table("stats")
