"""The command line's help guides a new user: required flags first, flags grouped, switches as
switches, choices shown, examples and exit codes in every epilog, no abbreviated flags, results
on stdout under --quiet, and an impossible --min-sw refused. No Spark session here."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from dpspark import cli, cli_help, config, errors, mechanisms
from dpspark.cli import COMMANDS, build_parser, main

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

COMMANDS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def help_text(command: str) -> str:
    return subparser(command).format_help()


def flat(text: str) -> str:
    return " ".join(text.split())


def sections(command: str) -> dict[str, str]:
    """Group title → the help of that group (the lines up to the next title)."""
    out, title = {}, None
    for line in help_text(command).splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


# --- 1. required flags first, then groups --------------------------------------------------------


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_is_listed_once_required_first(command):
    model = getattr(config, COMMANDS[command].model)
    layout = cli.help_layout(model)
    listed = [n for _, names in layout for n in names]
    hidden = set(cli_help.HELP_HIDDEN.get(model.__name__, ()))
    assert sorted(listed) == sorted(set(model.fields()) - hidden), command  # each field once
    assert cli.OTHER_TITLE not in dict(layout), f"{command}: a field without a group in dpspark.cli_help.HELP_GROUPS"
    assert layout[0][0] == cli.REQUIRED_TITLE
    titles = list(sections(command))
    assert titles.index(cli.REQUIRED_TITLE) == 0 < titles.index(cli.GENERAL_TITLE), titles
    assert titles[-2:] == ["examples", "exit codes"]
    required = sections(command)[cli.REQUIRED_TITLE]
    for choice in cli_help.HELP_REQUIRED[model.__name__]:
        for name in choice:
            assert cli.flag_name(name, model.fields()[name][0]) + " " in required, (command, name)


def test_perturb_help_starts_with_what_a_run_needs():
    usage = help_text("perturb").split("\n\n")[0]
    assert flat(usage) == (
        "usage: dpspark perturb (--input PATH | --input-table TABLE) (--output PATH | --output-table TABLE) "
        "--columns COL[,COL...] (--epsilon FLOAT | --unit-budget E) [options]"
    )
    required = sections("perturb")[cli.REQUIRED_TITLE]
    flags = re.findall(r"^  (--[a-z-]+)", required, re.M)
    assert flags == [
        "--input",
        "--input-table",
        "--output",
        "--output-table",
        "--columns",
        "--epsilon",
        "--unit-budget",
    ]
    groups = sections("perturb")
    assert "--mechanism" in groups["mechanism"] and "--vocab-size" in groups["embedding and vocabulary"]
    assert "--nn" in groups["nearest-neighbour search"] and "--master" in groups["Spark"]


# --- 2. switches, choices, epilog ----------------------------------------------------------------


def test_switches_are_switches_and_choices_are_shown():
    text = help_text("perturb")
    assert "QUIET" not in text and "KEEP_ORIGINAL" not in text
    assert re.search(r"^  --quiet {2,}silence", text, re.M)
    assert (
        "{" + ",".join(mechanisms.REGISTRY) + "}" in text
        and "{unk,random,drop,keep}" in text
        and "{error,overwrite}" in text
    )
    assert "{train-time,test-time,both}" in help_text("evaluate-utility")
    p = subparser("perturb")
    assert vars(p.parse_args(["--keep-original", "--quiet"])) == {"keep_original": True, "quiet": True}
    assert vars(p.parse_args([])) == {}  # an absent switch leaves the --config file's value alone
    with pytest.raises(SystemExit) as exc:
        main(["perturb", "--quiet", "true"])
    assert exc.value.code == 2
    # Choices are shown, still checked by the model: the same one-line ConfigError (exit 2) as before.
    with pytest.raises(errors.ConfigError, match="mechanism"):
        config.PerturbConfig.parse({"epsilon": 1, "mechanism": "gauss"})


@pytest.mark.parametrize("command", [*COMMANDS, "doctor"])
def test_epilog_examples_parse_and_validate(command):
    examples = cli.EXAMPLES[command]
    assert len(examples) >= (1 if command == "doctor" else 2)
    for example in examples:
        argv = shlex.split(example)
        assert argv[:2] == ["dpspark", command]
        args = cli.parse_args(argv[1:])
        assert args.pop("command") == command
        if command != "doctor":
            getattr(config, COMMANDS[command].model).parse(args)  # raises ConfigError if not valid
        assert example in help_text(command)


def test_exit_codes_in_the_epilog_are_read_from_the_error_classes():
    own = [c for c in vars(errors).values() if isinstance(c, type) and "exit_code" in vars(c) and c.exit_code > 1]
    assert {c.exit_code for c in own} == {2, 3, 4, 5, 7, 8, 9}
    perturb, calibrate = flat(help_text("perturb")), flat(help_text("calibrate"))
    for cls in own:
        first = flat(cls.__doc__.split("\n\n")[0]).replace("``", "")
        assert f"{cls.exit_code} {cls.__name__}: {first}" in perturb
    assert f"{cli.NO_EPSILON_MEETS_BOUNDS} nothing meets the bounds" in calibrate
    assert " 6 " not in perturb.split("exit codes:")[1]  # calibrate's own code
    assert "ReleaseRefusedError" not in calibrate and "LedgerError" not in calibrate  # releases only
    assert "0 every check passed 1 a check failed" in flat(help_text("doctor"))


# --- 3. no abbreviations ----------------------------------------------------------------------------


def test_no_flag_is_abbreviated(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--epsilon", "5", "--stats", "s"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "dpspark calibrate: error: unrecognized arguments: --epsilon 5 (did you mean --epsilons?)" in err
    for argv in (["perturb", "--inp", "x"], ["privacy-stats", "--out", "o"], ["--vers"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 2, argv
    assert build_parser().parse_args(["calibrate", "--epsilons", "5"]).epsilons == "5"


# --- 4. calibrate shows what it uses ---------------------------------------------------------------


def test_calibrate_help_separates_reading_from_computing():
    groups = sections("calibrate")
    assert re.findall(r"^  (--[a-z-]+)", groups[cli.REQUIRED_TITLE], re.M) == ["--stats", "--output"]
    assert "--min-sw" in groups["bounds"] and "--max-nw-fraction" in groups["bounds"]
    computed = [t for t in groups if t.endswith("(only without --stats)")]
    assert len(computed) == 3  # the grid, the embedding, the search: used only to compute statistics
    assert all(f in "".join(groups[t] for t in computed) for f in ("--runs", "--epsilons", "--vocab-size", "--nn"))
    assert "--master" in groups["Spark"]  # the session reads --stats and writes the calibration too
    # A flag accepted (one model family) but not used is not advertised: embedding-report runs no executor.
    report = help_text("embedding-report")
    assert "--embeddings-dir" not in report and "--embeddings " in report
    assert subparser("embedding-report").parse_args(["--embeddings-dir", "d"]).embeddings_dir == "d"


# --- 5. --min-sw against K ---------------------------------------------------------------------------
# Against the K of statistics read with --stats: tests/spark/test_calibrate.py (reading needs the session).


def test_an_impossible_min_sw_is_refused_before_computing_statistics(capsys, tmp_path):
    """Statistics to compute: refused from --runs before any Spark work."""
    out = tmp_path / "computed"
    assert main(["calibrate", "--output", str(out), "--runs", "20", "--min-sw", "20.5", "--quiet"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpspark calibrate: error: min_sw 20.5 can never be met")
    assert "K = 20" in lines[0] and "set by --runs" in lines[0] and "--runs 21" in lines[0]
    assert not out.exists() and captured.out == ""


# --- 6. evaluate-utility's --mode ----------------------------------------------------------------------


def test_evaluate_utility_mode_says_what_it_means_there():
    p = subparser("evaluate-utility")
    dests = {a.dest: a for a in p._actions}
    assert {"mode", "overwrite"} <= set(dests)  # flag names are a contract: no renames
    mode, overwrite = flat(dests["mode"].help), flat(dests["overwrite"].help)
    assert "evaluation mode" in mode and "not the write mode" in mode and "--overwrite" in mode
    assert "write mode" in overwrite and "--mode is the evaluation mode" in overwrite
    assert dests["overwrite"].nargs == 0  # a switch
    # Everywhere else --mode is the write mode.
    assert "{error,overwrite}" in help_text("privacy-risk")


# --- 7. results under --quiet ------------------------------------------------------------------------


def test_quiet_help_says_results_still_print():
    for command in COMMANDS:
        assert "results (tables, the output's path and public counts) still go to stdout" in flat(
            sections(command)[cli.GENERAL_TITLE]
        ), command


def test_embedding_report_prints_its_result_under_quiet(capsys, tmp_path):
    out = tmp_path / "report"
    assert main(["embedding-report", "--output", str(out), "--vocab-size", "300", "--sample", "50", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("embedding report: glove-6b-50d, 300 words") and str(out) in captured.out
    assert captured.err == ""


def test_embedding_report_lambda_reaches_the_spectrum_section(capsys, tmp_path):
    import json
    import math

    out = tmp_path / "report"
    args = ["embedding-report", "--output", str(out), "--vocab-size", "300", "--sample", "50", "--lambda", "0.5"]
    assert main(args) == 0
    spectrum = json.loads((out / "embedding_report.json").read_text())["spectrum"]
    assert spectrum["lambda"] == 0.5
    factor = spectrum["euclidean_epsilon_factor_at_lambda"]
    assert factor == 1 / math.sqrt(0.5 * spectrum["xi_min"] + 0.5)
    assert f"Euclidean ε factor at λ = 0.5: {factor:.4g}" in capsys.readouterr().out
    assert f"At the chosen λ = 0.5: factor {factor:.4g}." in (out / "embedding_report.md").read_text()


# --- the "All flags" block of docs/commands.md --------------------------------------------------------


def readme_block() -> str:
    text = COMMANDS_PAGE.read_text(encoding="utf-8")
    head = "All flags (flags override the YAML file given with `--config`):\n\n```\n"
    assert head in text
    start = text.index(head) + len(head)
    return text[start : text.index("```\n", start)].rstrip("\n")


def test_the_readme_lists_every_flag_of_perturb():
    block = readme_block()
    assert block == cli.readme_flags(), (
        'docs/commands.md\'s "All flags" block differs from the parser: paste the output of '
        '.venv/bin/python -c "from dpspark.cli import readme_flags; print(readme_flags())"'
    )
    flags = {f for a in subparser("perturb")._actions for f in a.option_strings if f.startswith("--")}
    shown = set(re.findall(r"--[a-z][a-z-]*", block))
    assert flags - {"--help"} <= shown, flags - shown
    assert {"--input-table", "--output-table", "--table-format", "--embeddings-dir"} <= shown


def test_the_console_script_exits_with_the_commands_code():
    """``dpspark`` (setup.py's console script, dpspark.cli:run) fails its process with the command's exit
    code, so a scheduler that ignores a returned value still sees a refused run fail."""
    import subprocess
    import sys

    code = "import sys; sys.argv = ['dpspark', 'calibrate', '--epsilon', '5']; from dpspark.cli import run; run()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--epsilons" in done.stderr
