"""README.md and the docs (docs/*.md) work as printed: their runnable examples, run top to bottom as a
new user runs them, the README first, then each page of the docs on its own.

A code block of a page runs here when the line before its fence is ``<!-- runnable -->``; every
other ``bash`` or ``python`` block says why it does not with ``<!-- not runnable... -->`` (a
cluster, Databricks, a metastore, files of your own, a grid too heavy for this test), so each page
stays the one source of its examples and a new block must choose.

The user's situation: after ``make demo`` (which left ``out/reviews_private``), in the repository
root with ``.venv`` activated. Here: a temporary directory holding copies of ``examples/``,
``conf/`` and ``notebooks/``, with an ``out/reviews_private`` that is not a release (so an example
that writes there fails, as it would after ``make demo``), and this interpreter's scripts first on
PATH (``dpspark``, ``python``, ``spark-submit``: what the activation gives). Shell blocks run one
command at a time (lines joined at a trailing backslash; comment lines skipped), each must exit 0.
A plain ``dpspark ...`` command (no shell syntax: no ``$``, pipe, redirection or ``;``) runs through
the console script's entry point, ``dpspark.cli.main``, in this process and this session's ``spark``
(tests/conftest.py), as the ``classic`` fixture runs the commands: a JVM and an interpreter per
command were most of these tests' time. The README's first ``dpspark`` command runs in bash through
the console script, as a new user's first command does; ``spark-submit``, ``python`` and ``pip`` lines
always run in bash. Python blocks run in the same
session. Both run with the process's working directory and the JVM's local file system working
directory the temporary directory, so that relative paths mean there what they mean to a user.

Each page runs in a fresh such directory: a page's examples may use what the page's earlier blocks
wrote, never another page's. The parameters are chosen to keep the README and the docs together
under about 4 minutes on 2 cores; the full grids are their not-runnable variants. Marker ``readme``:
the runtime matrix (runtimes/run.sh) leaves it out.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpspark.cli import main

# Each page runs in order inside its own test and its own directory: the pages may run on different
# xdist workers side by side.
pytestmark = pytest.mark.readme

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
COPIED = ("examples", "conf", "notebooks")
RUNNABLE = "<!-- runnable -->"
NOT_RUNNABLE = re.compile(r"<!-- not runnable\b[^>]*-->")
FENCE = re.compile(r"^```([A-Za-z]*)\s*$")


def blocks(text: str, name: str = "README.md") -> list[tuple[int, str, str, str]]:
    """Every fenced block: (line of its first code line, language, the line before the fence, code)."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{name}:{i + 1}: unclosed code block"
        before = lines[i - 1].strip() if i else ""
        found.append((i + 2, m.group(1), before, "\n".join(lines[i + 1 : end])))
        i = end + 1
    return found


def runnable_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, code) of the blocks marked runnable, in the page's order."""
    return [(line, lang, code) for line, lang, before, code in blocks(text) if before == RUNNABLE]


def name_of(page: Path) -> str:
    return str(page.relative_to(REPO))


RUNNABLE_DOCS = [page for page in DOCS if runnable_blocks(page.read_text(encoding="utf-8"))]


def commands(code: str) -> list[str]:
    """A shell block's commands: continuation lines joined, blank and comment-only lines dropped."""
    out, current = [], ""
    for raw in code.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append((current + line).strip())
        current = ""
    assert not current, f"a command ends with a line continuation: {current!r}"
    return out


SHELL_SYNTAX = re.compile(r"[$`|;&<>()]")


def dpspark_argv(command: str) -> list[str] | None:
    """The arguments of a plain ``dpspark ...`` command (a trailing comment dropped), or None for any
    other command or one that needs a shell."""
    if SHELL_SYNTAX.search(command):
        return None
    argv = shlex.split(command, comments=True)
    return argv[1:] if argv and argv[0] == "dpspark" else None


def outputs(text: str) -> list[str]:
    """The out/... paths the runnable examples write (flags --output and Python output arguments)."""
    found = []
    for _, _, code in runnable_blocks(text):
        found += re.findall(r"--output\s+(out/[\w./-]+)", code)
        found += re.findall(r"""(?:output=|evaluate_utility\(|privacy_risk\()["'](out/[\w./-]+)["']""", code)
    return found


# --- fast checks (no Spark) ------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=name_of)
def test_every_example_is_marked_runnable_or_not(page):
    text = page.read_text(encoding="utf-8")
    for line, lang, before, code in blocks(text, name_of(page)):
        if lang in ("bash", "sh", "python"):
            assert before == RUNNABLE or NOT_RUNNABLE.fullmatch(before), (
                f"{name_of(page)}:{line}: put {RUNNABLE} (tests/spark/test_readme_examples.py runs it) or "
                "<!-- not runnable ...: why --> on the line before the ``` of this block"
            )
        if NOT_RUNNABLE.fullmatch(before) and "locally" in before:
            assert code.lstrip().startswith("# Not runnable locally"), (
                f"{name_of(page)}:{line}: a block that does not run locally says so in its first line"
            )
    kinds = {lang for _, lang, _ in runnable_blocks(text)}
    assert kinds == {"bash", "python"} if page == README else kinds <= {"bash", "python"}, kinds


def test_the_runnable_examples_write_fresh_paths():
    """Each example writes a path of its own, and none writes make demo's out/reviews_private."""
    paths = [p for page in PAGES for p in outputs(page.read_text(encoding="utf-8"))]
    assert len(paths) >= 8, paths
    assert outputs(README.read_text(encoding="utf-8")) and RUNNABLE_DOCS, "the README and the docs both run"
    assert len(set(paths)) == len(paths), sorted(p for p in paths if paths.count(p) > 1)
    assert "out/reviews_private" not in paths


def test_readme_commands_are_split_as_a_shell_reads_them():
    code = "# a comment\nfoo --a 1 \\\n    --b 2   # trailing\n\nbar\n"
    assert commands(code) == ["foo --a 1      --b 2   # trailing", "bar"]


# --- the examples, run ------------------------------------------------------------------------------


@contextlib.contextmanager
def jvm_working_directory(spark, directory: Path):
    """Relative paths of this session's JVM (Hadoop's local file system) resolve in ``directory``:
    a user's JVM starts in their working directory, this session's started in pytest's."""
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsparkSession.sessionState().newHadoopConf())
    before = fs.getWorkingDirectory()
    fs.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(str(directory)))
    try:
        yield
    finally:
        fs.setWorkingDirectory(before)


@contextlib.contextmanager
def in_directory(spark, directory: Path, monkeypatch):
    """This process's and this session's JVM's working directory both ``directory``, then the repository's
    again: where a user's commands and Python blocks resolve their relative paths."""
    monkeypatch.chdir(directory)
    with jvm_working_directory(spark, directory):
        yield
    monkeypatch.chdir(REPO)


def run_as_printed(page: Path, spark, tmp_path: Path, monkeypatch) -> None:
    """Run ``page``'s runnable blocks in order, in a fresh copy of the user's situation."""
    name = name_of(page)
    work = tmp_path / "repo"
    work.mkdir()
    for folder in COPIED:
        shutil.copytree(REPO / folder, work / folder)
    # What `make demo` leaves: an example that writes here would fail (exit 5) after it.
    (work / "out" / "reviews_private").mkdir(parents=True)
    (work / "out" / "reviews_private" / "left-by-make-demo").write_text("")

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # . .venv/bin/activate
    env.pop("PYSPARK_SUBMIT_ARGS", None)  # the test session's own JVM settings (tests/conftest.py)
    env.pop("PYTHONPATH", None)

    text = page.read_text(encoding="utf-8")
    examples = runnable_blocks(text)
    transcript: list[str] = []
    console_script_ran = False

    def record(entry: str) -> None:  # shown as it goes with pytest -s, and after a failure
        transcript.append(entry)
        print(entry, flush=True)

    for line, lang, code in examples:
        if lang == "python":
            start = time.monotonic()
            with in_directory(spark, work, monkeypatch):
                exec(compile(code, f"{name}:{line}", "exec"), {"__name__": "__main__", "spark": spark})  # noqa: S102
            record(f"{name}:{line}  python block  exit 0  {time.monotonic() - start:6.1f} s")
            continue
        for command in commands(code):
            start = time.monotonic()
            argv = dpspark_argv(command)
            if argv is not None and page == README and not console_script_ran:
                argv, console_script_ran = None, True  # the console script itself, once
            if argv is None:
                done = subprocess.run(
                    ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600
                )
                rc, stdout, stderr, how = done.returncode, done.stdout, done.stderr, ""
            else:
                out, err = io.StringIO(), io.StringIO()
                with in_directory(spark, work, monkeypatch), contextlib.redirect_stdout(out):
                    with contextlib.redirect_stderr(err):
                        rc = main(argv)
                stdout, stderr, how = out.getvalue(), err.getvalue(), "  (in process)"
            record(f"{name}:{line}  {command}  exit {rc}  {time.monotonic() - start:6.1f} s{how}")
            assert rc == 0, f"{name}:{line}: {command}\nexit {rc}\n{stdout[-3000:]}\n{stderr[-5000:]}\n" + "\n".join(
                ["examples run so far:", *transcript]
            )

    for path in outputs(text):
        assert (work / path).exists(), f"{path}: not written in the example's directory"
    assert os.listdir(work / "out" / "reviews_private") == ["left-by-make-demo"]


@pytest.mark.spark
@pytest.mark.slow
def test_the_readme_runs_as_printed(spark, tmp_path, monkeypatch):
    run_as_printed(README, spark, tmp_path, monkeypatch)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_DOCS, ids=name_of)
def test_the_docs_run_as_printed(page, spark, tmp_path, monkeypatch):
    run_as_printed(page, spark, tmp_path, monkeypatch)
