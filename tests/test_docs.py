"""The code in the docs runs and prints what the docs say it prints."""

from __future__ import annotations

import contextlib
import doctest
import io
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks(page: str) -> list[str]:
    return BLOCK.findall((DOCS / page).read_text())


@pytest.mark.parametrize("page", ["graph.md"])
def test_doc_examples_print_what_their_comments_say(page):
    for block in _blocks(page):
        if block.lstrip().startswith(">>>"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"{page} example", "exec"), {"__name__": "__docs__"})
        printed = out.getvalue().splitlines()
        expected = [line.split("#", 1)[1].split(":")[0].strip()
                    for line in block.splitlines() if line.startswith("print(") and "#" in line]
        assert printed == expected, f"{page}: printed {printed}, the page says {expected}"


@pytest.mark.parametrize("page", ["graph.md"])
def test_doc_sessions_match(page):
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for i, block in enumerate(_blocks(page)):
        if block.lstrip().startswith(">>>"):
            runner.run(parser.get_doctest(block, {}, f"{page}[{i}]", page, 0))
    assert runner.failures == 0
