"""Every code block in README.md and docs/*.md does what it shows.

```python blocks of one page run in order, in one shared namespace, in an
empty temporary folder, in this process (one MindSpore import for the
suite; the global execution mode is put back after each page). Each block
is compiled from a file that holds it at its own line numbers, so a
traceback's line is the page's line, and ``ms.jit`` can read the source.

Relative links must name a file that exists, and a heading of it when they
carry an anchor. ```bash blocks are not run: each ``scripts/X.py ...`` command in them must
parse with that script's own argument parser (no doc names a flag that does
not exist), and each ``pip install`` of the project must name extras that
setup.py defines.
"""
import ast
import importlib
import re
import shlex
import sys
import traceback
import types
from pathlib import Path

import mindspore as ms
import pytest

from tests import REPO_ROOT

ROOT = Path(REPO_ROOT)
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\S*)\s*$")
SHELL = {"bash", "sh", "shell", "console"}
SCRIPT = re.compile(r"^(?:.*/)?scripts/(\w+)\.py$")
SHELL_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "2>&1", "&"}


def code_blocks(page):
    """The page's fenced blocks as ``(language, first line number, lines)``, lines numbered from 1."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if language is None and fence:
            language, start, lines = fence.group(1).lower(), number + 1, []
        elif language is not None and line.rstrip() == "```":
            blocks.append((language, start, lines))
            language = None
        elif language is not None:
            lines.append(line)
    assert language is None, f"{page.name}:{start - 1}: a code block is never closed"
    return blocks


def shell_commands(lines):
    """The block's commands as ``(line index, tokens)``: continuation lines joined, comments and prompts dropped."""
    first, text = 0, ""
    for index, line in enumerate(lines):
        first, text = (first, text + " " + line) if text else (index, line)
        if text.endswith("\\"):
            text = text[:-1]
            continue
        command = []
        for token in shlex.split(re.sub(r"^\s*\$\s+", "", text), comments=True) + [";"]:
            if token in SHELL_OPERATORS:
                if command:
                    yield first, command
                command = []
            else:
                command.append(token)
        text = ""


def setup_extras():
    """The extras ``setup.py`` defines (the keys of its ``extras_require`` literal)."""
    for node in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return set(ast.literal_eval(node.value))
    return set()


def check_script_flags(script, argv, where):
    """Parses ``argv`` with ``scripts/<script>.py``'s own parser; fails naming the page line on a bad flag."""
    module = importlib.import_module(f"scripts.{script}")
    parse = module.build_parser().parse_args if hasattr(module, "build_parser") else module.parse_args
    try:
        parse(argv)
    except SystemExit as exit_:
        if exit_.code:
            pytest.fail(f"{where}: scripts/{script}.py does not accept {shlex.join(argv)!r} (see the usage above)")


def check_pip_install(argv, where):
    """``pip install .[a,b]`` / ``-e ".[a]"``: every extra named must be one setup.py defines."""
    for target in argv:
        extras = re.fullmatch(r"(?:\.|mindspore-accumulator)\[([\w,\s-]+)\]", target)
        if extras:
            unknown = {name.strip() for name in extras.group(1).split(",")} - setup_extras()
            assert not unknown, f"{where}: setup.py defines no extra {sorted(unknown)} (it has {sorted(setup_extras())})"


def prose(page):
    """The page's text without its code blocks."""
    return re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def heading_anchors(page):
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces as hyphens."""
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.+)$", prose(page), flags=re.MULTILINE)}


def broken_links(page):
    """Relative links of the page whose file, or heading anchor, does not exist."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked)):
            broken.append(target)
    return broken


def check_shell_block(page, start, lines):
    """Checks each command of a shell block: script flags and pip extras."""
    for index, command in shell_commands(lines):
        where = f"{page.name}:{start + index}"
        if command[:3] == ["python", "-m", "pip"]:
            command = command[2:]
        if command[:2] == ["pip", "install"]:
            check_pip_install(command[2:], where)
        for index, token in enumerate(command):
            script = SCRIPT.match(token)
            if script and (ROOT / "scripts" / f"{script.group(1)}.py").exists():
                check_script_flags(script.group(1), command[index + 1:], where)
                break


@pytest.fixture
def page_context(tmp_path, monkeypatch):
    """An empty working folder and MindSpore's execution mode put back afterwards."""
    monkeypatch.chdir(tmp_path)
    mode = ms.get_context("mode")
    yield tmp_path
    ms.set_context(mode=mode)


# The full suite runs these pages, the fast path not: a real project's loop, end to end (your-project.md), and
# probe child processes (memory-plan.md; tests/accumulator/memory/test_plan.py's fast test plans through a child).
LONG_PAGES = {"memory-plan.md", "your-project.md"}


@pytest.mark.parametrize("page", [pytest.param(page, marks=pytest.mark.slow) if page.name in LONG_PAGES else page
                                  for page in PAGES], ids=[page.name for page in PAGES])
def test_page(page, page_context, monkeypatch):
    """Runs the page's python blocks in order in one namespace; checks its shell blocks' commands."""
    assert not broken_links(page), f"{page.name}: links to nothing: {broken_links(page)}"
    blocks = code_blocks(page)
    python = [(start, lines) for language, start, lines in blocks if language == "python"]
    # One file with every python block at its own line numbers: tracebacks name the page's lines.
    source_file = page_context / f"{page.name}.py"
    padded = [""] * (max([start + len(lines) for start, lines in python], default=0))
    for start, lines in python:
        padded[start - 1:start - 1 + len(lines)] = lines
    source_file.write_text("\n".join(padded) + "\n", encoding="utf-8")
    # A registered module: MindSpore's graph parser imports the namespace of a jitted function by name.
    module = types.ModuleType("docs_page_" + re.sub(r"\W", "_", page.stem))
    module.__file__ = str(source_file)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for start, lines in python:
        code = compile("\n" * (start - 1) + "\n".join(lines) + "\n", str(source_file), "exec")
        try:
            exec(code, module.__dict__)  # noqa: S102  (the page's own examples)
        except Exception as error:
            raised_at = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                         if frame.filename == str(source_file)]
            pytest.fail(f"{page.name}:{raised_at[-1] if raised_at else start}: the python block starting at line "
                        f"{start} raised {type(error).__name__}: {error}\n{traceback.format_exc()}", pytrace=False)
    for language, start, lines in blocks:
        if language in SHELL:
            check_shell_block(page, start, lines)


def test_the_checks_catch_a_bad_flag_an_unknown_extra_and_a_dead_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](#title) [gone](missing.md) [no heading](page.md#nowhere)\n", encoding="utf-8")
    assert broken_links(page) == ["missing.md", "page.md#nowhere"]
    lines = ["pip install -e '.[test]'  # fine", "python scripts/train_mnist.py \\", "    --no-such-flag"]
    assert list(shell_commands(lines)) == [(0, ["pip", "install", "-e", ".[test]"]),
                                           (1, ["python", "scripts/train_mnist.py", "--no-such-flag"])]
    with pytest.raises(pytest.fail.Exception, match=r"page.md:8: scripts/train_mnist.py does not accept"):
        check_shell_block(page, 7, lines)
    with pytest.raises(AssertionError, match=r"no extra \['tests'\]"):
        check_shell_block(page, 7, ['pip install ".[tests]"'])


CODE_LINK = re.compile(r"(docs/[\w-]+\.md)#([\w-]+)")


def code_links(source):
    """``(page, anchor)`` for each ``docs/X.md#anchor`` a source file's text names."""
    return CODE_LINK.findall(source)


@pytest.mark.parametrize("package", ["accumulator", "training", "data", "models", "benchmarks"])
def test_every_section_code_links_to_exists(package):
    broken = [f"{path.relative_to(ROOT)}: {page}#{anchor}" for path in sorted((ROOT / package).glob("*.py"))
              for page, anchor in code_links(path.read_text(encoding="utf-8"))
              if not (ROOT / page).exists() or anchor not in heading_anchors(ROOT / page)]
    assert broken == []


def test_a_code_link_to_a_missing_section_is_found():
    assert code_links("x  # see (docs/precision.md#no-such-part) and docs/how-it-works.md#the-state") == [
        ("docs/precision.md", "no-such-part"), ("docs/how-it-works.md", "the-state")]
    assert "no-such-part" not in heading_anchors(ROOT / "docs/precision.md")
