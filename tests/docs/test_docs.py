"""Every code block in README.md and docs/*.md does what it shows, and every link leads somewhere.

```python blocks of one page run in order, in one shared namespace, in an empty temporary folder, in this process
(one MindSpore import for the suite; the global execution mode is put back after each page). Sybil finds and runs
them, each compiled at its own line of the page, so a traceback names the page's line and ``ms.jit`` reads its source
(a maintained runner where this file held its own). What no library checks stays here: ```bash blocks are not run,
but each ``scripts/X.py ...`` command must parse with that script's own parser and each ``pip install`` of the project
must name extras setup.py defines; relative links must name a file that exists, and a heading of it for an anchor.

By hand: in ``# Title\n[ok](#title) [gone](missing.md)`` the second link is broken; ``python scripts/train_mnist.py
--no-such-flag`` in a bash block fails naming the page's line.
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
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser

from tests import REPO_ROOT

ROOT = Path(REPO_ROOT)
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SHELL = {"bash", "sh", "shell", "console"}
SCRIPT = re.compile(r"^(?:.*/)?scripts/(\w+)\.py$")
SHELL_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "2>&1", "&"}


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


# The fast path runs the README's blocks, the full suite every page's (each page compiles several steps; one plans
# through probe children).
FAST_PAGES = {"README.md"}


def check_shell_example(example):
    """Sybil's evaluator for a shell block: its commands checked, none run (its text starts a line below the fence)."""
    check_shell_block(Path(example.path), example.line + example.parsed.line_offset + 1, example.parsed.splitlines())


PAGE_PARSERS = Sybil([PythonCodeBlockParser()] + [CodeBlockParser(language, check_shell_example) for language in SHELL])


@pytest.mark.parametrize("page", [page if page.name in FAST_PAGES else pytest.param(page, marks=pytest.mark.slow)
                                  for page in PAGES], ids=[page.name for page in PAGES])
def test_page(page, page_context, monkeypatch):
    """Runs the page's python blocks in order in one namespace; checks its shell blocks' commands and its links."""
    assert not broken_links(page), f"{page.name}: links to nothing: {broken_links(page)}"
    assert len(re.findall(r"^```", page.read_text(encoding="utf-8"), re.M)) % 2 == 0, f"{page.name}: a block is open"
    document = PAGE_PARSERS.parse(page)
    # A registered module: MindSpore's graph parser imports the namespace of a jitted function by name, and reads a
    # class's source from its module's file, which Python parses whole: the page's python blocks at their own lines.
    module = types.ModuleType("docs_page_" + re.sub(r"\W", "_", page.stem))
    module.__file__ = str(page_context / f"{page.name}.py")
    Path(module.__file__).write_text(re.sub(r"^```python\n(.*?)^```$|[^\n]+", lambda m: "\n" + m.group(1) if m.group(1)
                                            is not None else "", page.read_text(encoding="utf-8"), flags=re.M | re.S))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    document.namespace = module.__dict__
    for example in document.examples():
        try:
            example.evaluate()
        except Exception as error:
            raised_at = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                         if frame.filename == str(page)]
            pytest.fail(f"{page.name}:{raised_at[-1] if raised_at else example.line}: the block at line {example.line} "
                        f"raised {type(error).__name__}: {error}\n{traceback.format_exc()}", pytrace=False)


def test_the_checks_catch_a_bad_flag_an_unknown_extra_and_a_dead_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](#title) [gone](missing.md) [no heading](page.md#nowhere)\n", encoding="utf-8")
    assert broken_links(page) == ["missing.md", "page.md#nowhere"]
    lines = ["pip install -e '.[test]'  # fine", "python scripts/train_mnist.py \\", "    --no-such-flag"]
    assert list(shell_commands(lines)) == [(0, ["pip", "install", "-e", ".[test]"]),
                                           (1, ["python", "scripts/train_mnist.py", "--no-such-flag"])]
    page.write_text("# Title\n\n```bash\n" + "\n".join(lines) + "\n```\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"page.md:5: scripts/train_mnist.py does not accept"):
        [example.evaluate() for example in PAGE_PARSERS.parse(page).examples()]  # through Sybil, as test_page
    with pytest.raises(AssertionError, match=r"no extra \['tests'\]"):
        check_shell_block(page, 7, ['pip install ".[tests]"'])


CODE_LINK = re.compile(r"(docs/[\w-]+\.md)#([\w-]+)")


def code_links(source):
    """``(page, anchor)`` for each ``docs/X.md#anchor`` a source file's text names."""
    return CODE_LINK.findall(source)


@pytest.mark.parametrize("package", ["accumulator", "training", "data", "models", "benchmarks"])
def test_every_section_code_links_to_exists(package):
    broken = [f"{path.relative_to(ROOT)}: {page}#{anchor}" for path in sorted((ROOT / package).rglob("*.py"))
              for page, anchor in code_links(path.read_text(encoding="utf-8"))
              if not (ROOT / page).exists() or anchor not in heading_anchors(ROOT / page)]
    assert broken == []


def test_a_code_link_to_a_missing_section_is_found():
    assert code_links("x  # see (docs/precision.md#no-such-part) and docs/how-it-works.md#the-state") == [
        ("docs/precision.md", "no-such-part"), ("docs/how-it-works.md", "the-state")]
    assert "no-such-part" not in heading_anchors(ROOT / "docs/precision.md")
