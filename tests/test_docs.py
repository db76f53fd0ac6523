"""Every command and snippet the docs show runs as shown.

The pages are README.md and docs/*.md, except docs/architecture.md (a map of
the code for contributors: its blocks are diagrams). Each page runs in a
temporary folder of its own, block by block in page order:

- a ```python block whose first line is a comment naming a file
  (``# mybackend.py ...``) is that file: it is written into the folder (and
  compiled), so a later block or command can import or run it;
- a ```python block of ``>>>`` lines is a session, checked with doctest;
- every other ```python block runs as a script: its own process, in the
  folder, with the repository and the folder on ``PYTHONPATH``, stdin closed
  and a timeout, and must exit 0;
- each command of a ```sh block (a line; comment lines are skipped) runs in
  the folder with ``bash -c`` and must exit 0.

Plain ``` blocks (and ```text, ```json) are what the reader sees printed;
they are not run.

A page changes that for one block with annotations: one-line HTML comments
on the lines just before the fence, each with a reason after its colon::

    <!-- docs-test: not run: installs packages -->
    <!-- docs-test: exit 1: the check finds the fake's bug -->
    <!-- docs-test: parse only: about 20 minutes -->
    <!-- docs-test: continues: uses the block above's inputs -->

``not run`` skips; ``exit N`` expects that status; ``parse only`` parses a
``simdist`` command with simdist's own CLI parser instead of running it;
``continues`` runs a python block after the page's previous script block,
in one process (a fragment that uses the names the block above defined).
In a ```sh block an annotation may name the commands it is for, in
parentheses: ``<!-- docs-test: not run (pip install): ... -->`` applies to
the commands that contain ``pip install`` (and must match one); without
parentheses it applies to every command of the block.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import doctest
import importlib
import io
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest

from simdist import cli
from simdist.cli import run as cli_run

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: docs/architecture.md is the map of the code for contributors: it names modules by design.
FOR_CONTRIBUTORS = {"architecture.md"}
PAGES = {p.name: p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
         if p.name not in FOR_CONTRIBUTORS}
#: Pages whose blocks all run within about a second; the others are marked slow.
FAST_PAGES = {"README.md", "contract.md", "graph.md", "performance.md"}
TIMEOUT = 240  # seconds a block or command may take (the slowest takes about a minute)

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
ANNOTATION_BODY = re.compile(r"^\s*(?P<kind>not run|parse only|exit (?P<status>\d+)|continues)"
                             r"(?:\s*\((?P<only>[^)]+)\))?\s*(?::\s*(?P<reason>.*\S))?\s*$")
FILE_COMMENT = re.compile(r"^#\s*(?P<name>[\w./-]+\.py)\b")
INLINE_COMMAND = re.compile(r"`(simdist [^`]+)`")
SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclasses.dataclass
class Annotation:
    kind: str  # "not run", "parse only", "exit", "continues"
    reason: str
    status: int = 0
    only: str | None = None  # the commands of a sh block it is for (a substring), or all


@dataclasses.dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    annotations: list[Annotation]

    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def annotation(self, command: str | None = None) -> Annotation | None:
        """The annotation that applies to the block (or to one command of it)."""
        for a in self.annotations:
            if a.only is None or (command is not None and a.only in command):
                return a
        return None


def parse_annotation(body: str, where: str) -> Annotation:
    m = ANNOTATION_BODY.match(body)
    if m is None:
        raise ValueError(f"{where}: unknown docs-test annotation {body.strip()!r} "
                         "(known: not run, parse only, exit N, continues)")
    if not m["reason"]:
        raise ValueError(f"{where}: the annotation {body.strip()!r} gives no reason (`KIND: reason`)")
    kind = "exit" if m["status"] else m["kind"]
    return Annotation(kind, m["reason"], int(m["status"] or 0), m["only"] and m["only"].strip())


def blocks(page: str) -> list[Block]:
    """Every fenced block of a page, with the annotations just before it."""
    return parse_blocks(page, PAGES[page].read_text())


def parse_blocks(page: str, text: str) -> list[Block]:
    found, pending, lines = [], [], text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if (note := ANNOTATION.match(line)) is not None:
            pending.append(parse_annotation(note["body"], f"{page}:{i + 1}"))
            i += 1
            continue
        if "docs-test" in line:
            raise ValueError(f"{page}:{i + 1}: a docs-test annotation is a line of its own: <!-- docs-test: KIND: reason -->")
        fence = FENCE.match(line)
        if pending and fence is None:
            raise ValueError(f"{page}:{i + 1}: a docs-test annotation must be just before a ``` fence")
        if fence is None:
            i += 1
            continue
        body, start, indent = [], i, fence["indent"]
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        found.append(Block(page, start + 1, fence["lang"], "\n".join(body) + "\n", pending))
        pending = []
        i += 1
    return found


def file_name(block: Block) -> str | None:
    """The file a python block is, from its first line ``# NAME.py ...``."""
    m = FILE_COMMENT.match(block.text)
    return m["name"] if m else None


def is_session(block: Block) -> bool:
    return block.text.lstrip().startswith(">>>")


def commands(block: Block) -> list[str]:
    """The command lines of a sh block (a trailing backslash continues a line)."""
    joined = block.text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def simdist_argvs(command: str) -> list[list[str]]:
    """The argv (after ``simdist``) of every simdist command in a shell line."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    argvs, words = [], []
    for token in [*lexer, ";"]:
        if token not in SHELL_OPERATORS:
            words.append(token)
            continue
        while words and ENV_ASSIGNMENT.match(words[0]):
            words.pop(0)
        if words[:1] == ["simdist"]:
            argvs.append(words[1:])
        words = []
    return argvs


def parse_simdist(argv: list[str]) -> argparse.Namespace | None:
    """Parse ``simdist ARGV`` as the CLI does, without running it; ``None``
    for ``--help`` (which exits 0). A bad command line raises SystemExit."""
    top = cli.parser()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            return cli_run.parse(top, argv) if argv[:1] == ["run"] else top.parse_args(argv)
        except SystemExit as exc:
            if exc.code == 0:
                return None
            raise AssertionError(f"simdist {shlex.join(argv)}: {err.getvalue().strip()}") from None


def unknown_options(argv: list[str]) -> list[str]:
    """The options in ``simdist ARGV`` that its command does not have (for a
    command mentioned in prose, whose values may be placeholders: ``-n N``)."""
    command = importlib.import_module(f"{cli.__name__}.{argv[0]}").add_parser(argparse.ArgumentParser().add_subparsers())
    known = set(command._option_string_actions)  # argparse has no public list of a parser's options
    own = cli_run.split_argv(argv)[0] if argv[0] == "run" else argv
    return [word for word in own[1:] if word.startswith("-") and word.split("=")[0] not in known]


# ----------------------------------------------------------------- the runs

def environment(folder: pathlib.Path) -> dict[str, str]:
    """The environment of a page's runs: this repository first on the path
    (also for the ``simdist`` script and the ranks), then the page's folder."""
    path = [str(ROOT), str(folder)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path))


def run_in(folder: pathlib.Path, argv: list[str], what: str, expected: int) -> float:
    """Run ``argv`` in ``folder``; fail unless it exits with ``expected``.
    Returns the seconds it took."""
    start = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=folder, env=environment(folder), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what}: still running after {TIMEOUT} s\n{_tail(exc.stdout, exc.stderr)}", pytrace=False)
    if done.returncode != expected:
        pytest.fail(f"{what}: exit status {done.returncode}, expected {expected}\n"
                    f"{_tail(done.stdout, done.stderr)}", pytrace=False)
    return time.monotonic() - start


def _tail(stdout, stderr, lines: int = 40) -> str:
    text = lambda s: s.decode(errors="replace") if isinstance(s, bytes) else (s or "")
    out = (text(stdout).rstrip() + "\n" + text(stderr).rstrip()).strip().splitlines()
    return "\n".join(out[-lines:])


class PageRun:
    """One page's blocks, run in page order in one folder."""

    def __init__(self, page: str, folder: pathlib.Path):
        self.page, self.folder = page, folder
        self.previous_script = ""  # the last script block, for a block that continues it
        self.timings: list[tuple[str, float]] = []

    def python(self, block: Block) -> None:
        note = block.annotation()
        if is_session(block) or (note and note.kind == "not run"):
            return
        if note and note.kind == "parse only":
            pytest.fail(f"{block.where()}: `parse only` is for simdist commands, not python blocks", pytrace=False)
        if (name := file_name(block)) is not None:
            (self.folder / name).parent.mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_text(block.text)
            compile(block.text, name, "exec")
            return
        code = self.previous_script + block.text if note and note.kind == "continues" else block.text
        self.previous_script = code
        script = self.folder.parent / f"{self.page}-{block.line}.py"
        script.write_text(code)
        status = note.status if note and note.kind == "exit" else 0
        self.timings.append((block.where(), run_in(self.folder, [sys.executable, str(script)], block.where(), status)))

    def sh(self, block: Block) -> None:
        for command in commands(block):
            note = block.annotation(command)
            what = f"{block.where()}: {command}"
            if note and note.kind == "not run":
                continue
            if note and note.kind == "parse only":
                argvs = simdist_argvs(command)
                assert argvs, f"{what}: `parse only` is for simdist commands"
                for argv in argvs:
                    parse_simdist(argv)
                continue
            status = note.status if note and note.kind == "exit" else 0
            self.timings.append((what, run_in(self.folder, ["bash", "-c", command], what, status)))


def _page_params():
    slow = pytest.mark.slow
    return [pytest.param(page, id=page, marks=() if page in FAST_PAGES else slow) for page in PAGES]


@pytest.mark.parametrize("page", _page_params())
def test_page_runs_as_shown(page, tmp_path):
    folder = tmp_path / "page"
    folder.mkdir()
    run = PageRun(page, folder)
    for block in blocks(page):
        if block.lang == "python":
            run.python(block)
        elif block.lang == "sh":
            run.sh(block)
    for what, seconds in run.timings:
        print(f"{seconds:6.1f} s  {what}")


# ------------------------------------------------------- fast, every page

@pytest.mark.parametrize("page", PAGES)
def test_annotations_are_known_give_a_reason_and_apply(page):
    for block in blocks(page):  # parsing raises on an unknown annotation or one without a reason
        for note in block.annotations:
            assert block.lang in ("python", "sh"), f"{block.where()}: an annotation on a ```{block.lang} block, which is not run"
            if note.only is not None:
                assert block.lang == "sh", f"{block.where()}: `({note.only})` selects commands of a sh block"
                assert any(note.only in c for c in commands(block)), \
                    f"{block.where()}: `({note.only})` matches no command of the block"
            if note.kind == "continues":
                assert block.lang == "python", f"{block.where()}: `continues` is for python blocks"


@pytest.mark.parametrize("body, error", [
    (" not run", "gives no reason"),
    (" exit 1 ", "gives no reason"),
    (" skip: flaky", "unknown docs-test annotation"),
    (" exit one: the check fails", "unknown docs-test annotation"),
])
def test_an_annotation_that_is_unknown_or_gives_no_reason_is_refused(body, error):
    with pytest.raises(ValueError, match=error):
        parse_annotation(body, "page.md:1")


@pytest.mark.parametrize("text", [
    "<!-- docs-test: not run: installs -->\n\n```sh\npip install x\n```\n",
    "text <!-- docs-test: not run: installs -->\n```sh\npip install x\n```\n",
])
def test_an_annotation_away_from_its_fence_is_refused(text):
    with pytest.raises(ValueError, match="docs-test annotation"):
        parse_blocks("page.md", text)


def test_an_annotation_says_what_to_expect_and_for_which_commands():
    note = parse_annotation(" exit 1 (sum_for_mean): the check finds the bug ", "page.md:1")
    assert (note.kind, note.status, note.only, note.reason) == ("exit", 1, "sum_for_mean", "the check finds the bug")
    block = Block("page.md", 1, "sh", "simdist check --backend a:sum_for_mean\nsimdist check\n", [note])
    assert block.annotation("simdist check --backend a:sum_for_mean") is note
    assert block.annotation("simdist check") is None


@pytest.mark.parametrize("page", PAGES)
def test_every_simdist_command_shown_parses(page):
    """Every ``simdist ...`` command a page shows in a sh block, or after ``$ ``
    in an output block, parses with simdist's CLI parser; one mentioned in
    the text names only options its command has (so a renamed option fails
    here, fast)."""
    shown = []
    for block in blocks(page):
        if block.lang == "sh":
            shown += [(block.where(), c) for c in commands(block)]
        elif block.lang in ("", "text"):
            shown += [(block.where(), line[2:]) for line in block.text.splitlines() if line.startswith("$ simdist ")]
    failed = []
    for number, line in enumerate(PAGES[page].read_text().splitlines(), 1):
        for argv in (simdist_argvs(c)[0] for c in INLINE_COMMAND.findall(line)):
            if not argv or argv[0] not in cli.COMMANDS:
                continue  # a message (`simdist run: ...`), not a command
            if unknown := unknown_options(argv):
                failed.append(f"{page}:{number}: simdist {shlex.join(argv)}: no option {', '.join(unknown)}")
    for where, command in shown:
        for argv in simdist_argvs(command):
            try:
                parse_simdist(argv)
            except AssertionError as exc:
                failed.append(f"{where}: {exc}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("page", PAGES)
def test_json_blocks_are_json(page):
    for block in blocks(page):
        if block.lang == "json":
            json.loads(block.text)


# ------------------------------------------ what graph.md's examples print

def _python_blocks(page: str) -> list[str]:
    return [b.text for b in blocks(page) if b.lang == "python"]


@pytest.mark.parametrize("page", ["README.md", "graph.md"])
def test_doc_examples_print_what_their_comments_say(page):
    for block in _python_blocks(page):
        if block.lstrip().startswith(">>>"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"{page} example", "exec"), {"__name__": "__docs__"})
        printed = out.getvalue().splitlines()
        expected = [line.split("#", 1)[1].split(":")[0].strip()
                    for line in block.splitlines() if line.startswith("print(") and "#" in line]
        assert printed == expected, f"{page}: printed {printed}, the page says {expected}"


@pytest.mark.parametrize("page", [p for p, path in PAGES.items() if "```python\n>>>" in path.read_text()])
def test_doc_sessions_match(page):
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for i, block in enumerate(_python_blocks(page)):
        if block.lstrip().startswith(">>>"):
            runner.run(parser.get_doctest(block, {}, f"{page}[{i}]", page, 0))
    assert runner.failures == 0


#: A dotted or slashed name with a private component, e.g. simdist._check or simdist/sim/_comm.py.
PRIVATE = re.compile(r"\b(?:simdist|fake_backends|properties)(?:[./][A-Za-z0-9_]+)*[./]_[a-z][A-Za-z0-9_]*")


@pytest.mark.parametrize("page", PAGES)
def test_no_doc_for_users_names_a_private_module(page):
    assert not sorted(set(PRIVATE.findall(PAGES[page].read_text())))
