"""The README's Python examples run as written, in order, in one namespace."""
import pathlib
import re
import textwrap

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 4
    ns = {}
    for code in blocks:
        exec(compile(textwrap.dedent(code), str(README), "exec"), ns)
    assert ns["H"].shape == (5, 5) and ns["Hv"].shape == (5,)
