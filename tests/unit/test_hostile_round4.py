"""Hostile and careless use, round 4 (issue 30): the defects that are refused or fixed before any
Spark session starts. Each refusal: its exit code, its one sentence, and nothing changed or left behind."""

from __future__ import annotations

import math

import numpy as np
import pytest
from refusals import refused

from dpspark import ledger

EUCLIDEAN = {"distance": "euclidean", "embedding": "e0"}  # one embedding's Euclidean distance


def _entry(run_id, mechanism, kind, epsilon, **terms):
    return ledger.entry(
        run_id, None, epsilon, mechanism, f"2026-11-26T10:0{run_id[-1]}:00", True, kind, unit=EUCLIDEAN, **terms
    )


def test_ledger_sums_per_guarantee_type_never_across():
    entries = [
        _entry("r1", "custext", "group", 3.0),
        _entry("r2", "tem", "metric", 5.0),
        _entry("r3", "santext-plus", "umldp", 2.0, p=0.2),
        _entry("r4", "laplace", "metric", 10.0),
        _entry("r5", "syntf", "document", 0.5, draws=40),
        _entry("r6", "truncated-gumbel", "none", 100.0),
    ]
    assert [e["guarantee_type"] for e in entries] == ["group", "metric", "umldp", "metric", "document", "none"]
    assert entries[2]["spent"] == pytest.approx(2.0 + math.log(5.0)) and entries[2]["p"] == 0.2
    assert entries[4]["spent"] == 20.0 and entries[4]["draws"] == 40
    assert entries[5]["spent"] is None
    (row,) = ledger.summary(entries)["epsilon_spent"]
    sums = {k["guarantee_type"]: (k["spent"], k["unbounded"], k["releases"]) for k in row["by_guarantee_type"]}
    assert sums == {
        "group": (3.0, False, 1),
        "metric": (15.0, False, 2),
        "umldp": (pytest.approx(2.0 + math.log(5.0)), False, 1),
        "document": (20.0, False, 1),
        "none": (None, True, 1),
    }
    # The old field is never a sum across types: null where the types are mixed.
    assert row["epsilon_at_most"] is None and row["releases"] == 6
    assert ledger.summary(entries)["unbounded"] is True
    assert ledger.summary(entries[:4])["unbounded"] is False


def test_ledger_old_entries_keep_their_type_and_are_summed_only_where_their_unit_is_known():
    # Entries written before guarantee types were recorded: their mechanism's type, ε as spent. Their unit
    # was not recorded: a mahalanobis entry's λ is unknown, so each is its own unit (never summed), while
    # the laplace entries (the embedding's Euclidean distance) share one.
    old = [
        {
            "run_id": f"r{i}",
            "partition": None,
            "epsilon": 10.0,
            "mechanism": "mahalanobis",
            "finished_at": str(i),
            "rerelease": bool(i),
        }
        for i in range(2)
    ]
    (row,) = ledger.epsilon_spent(old)
    assert row["epsilon_at_most"] is None
    assert [(k["guarantee_type"], k["spent"], k["releases"]) for k in row["by_guarantee_type"]] == [
        ("metric", 10.0, 1),
        ("metric", 10.0, 1),
    ]
    assert all("not recorded" in k["unit"] for k in row["by_guarantee_type"])
    laplace = [{**e, "mechanism": "laplace"} for e in old]
    (row,) = ledger.epsilon_spent(laplace)
    assert row["epsilon_at_most"] == 20.0 and row["by_guarantee_type"][0]["releases"] == 2


# --- refusals before Spark starts: exit code, one sentence, nothing changed or left behind ----------


def test_custext_top_k_larger_than_the_vocabulary_is_refused(capsys, tmp_path, raw):
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text", "--epsilon", "5"]
    refused(
        capsys,
        tmp_path,
        [*argv, "--mechanism", "custext", "--top-k", "100000", "--vocab-size", "2000"],
        2,
        "top_k K = 100000 exceeds the 2,000 words",
    )


def test_custext_top_k_is_checked_against_the_vocabulary_itself():
    from dpspark.errors import ConfigError
    from dpspark.mechanisms import Space, parse

    vectors = np.random.default_rng(0).normal(size=(30, 4))
    space = Space(vectors, np.arange(30))
    with pytest.raises(ConfigError, match="top_k K = 31 exceeds the 30 words"):
        parse({"name": "custext", "epsilon": 5, "top_k": 31}).prepare(space)


@pytest.mark.parametrize("flag", ["--vocab-file", "--sensitive-words"])
def test_word_files_that_are_not_utf8_are_refused(capsys, tmp_path, raw, flag):
    words = tmp_path / "words.txt"
    words.write_bytes("café\nword\n".encode("latin-1"))
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text", "--epsilon", "5"]
    if flag == "--sensitive-words":
        argv += ["--mechanism", "santext-plus"]
    refused(capsys, tmp_path, [*argv, flag, str(words)], 2, f"{words} is not UTF-8 text", "save it as UTF-8")


def test_word_list_and_risk_sensitive_words_not_utf8(capsys, tmp_path, raw):
    words = tmp_path / "words.txt"
    words.write_bytes(b"\xff\xfeword\n")
    out = str(tmp_path / "out")
    refused(capsys, tmp_path, ["privacy-stats", "--output", out, "--word-list", str(words)], 2, "not UTF-8 text")
    argv = ["privacy-risk", "--input", str(raw), "--output", out, "--text-column", "text"]
    refused(capsys, tmp_path, [*argv, "--sensitive-words", str(words)], 2, "not UTF-8 text")


def test_the_helps_quoted_grid_example_parses():
    from dpspark import config
    from dpspark.cli import parse_args

    quoted = "lambda=0,1 t=0.25,0.5 beta=0.001"  # one argument, as the help quotes it
    args = parse_args(["privacy-stats", "--output", "o", "--mechanisms", "vickrey,tem", "--grid", quoted])
    c = config.StatsConfig.parse({k: v for k, v in args.items() if k != "command"})
    assert c.grid == {"lambda": [0.0, 1.0], "t": [0.25, 0.5], "beta": [0.001]}
    settings = c.settings()
    vickrey = {(s.lam, s.t) for s in settings if s.name == "vickrey"}
    assert vickrey == {(0.0, 0.25), (0.0, 0.5), (1.0, 0.25), (1.0, 0.5)}
    assert {s.beta for s in settings if s.name == "tem"} == {0.001}
    grids = {n: len(config.mechanisms.REGISTRY[n].default_epsilons) for n in ("vickrey", "tem")}  # no --epsilons
    assert len(settings) == 4 * grids["vickrey"] + grids["tem"]


@pytest.mark.parametrize(
    "extra, phrase",
    [
        (["--mechanisms", "laplace", "--grid", "lambda=0.5,1"], "grid axes ['lambda'] are parameters of none"),
        (["--grid", "t=0.5"], "grid axes ['t'] need --mechanisms"),
    ],
)
def test_a_grid_axis_no_mechanism_takes_is_refused(capsys, tmp_path, extra, phrase):
    refused(capsys, tmp_path, ["privacy-stats", "--output", str(tmp_path / "out"), *extra], 2, phrase)


def test_yaml_true_is_not_a_number(capsys, tmp_path, raw):
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"input: {raw}\noutput: {tmp_path / 'out'}\ncolumns: text\nepsilon: 5\nmechanism: 1-diffractor\nlists: true\n"
    )
    refused(capsys, tmp_path, ["perturb", "--config", str(conf)], 2, "lists: must be a number, got True")


@pytest.mark.parametrize("how", ["flag", "grid"])
def test_syntf_draws_beyond_its_bound_are_refused(capsys, tmp_path, raw, how):
    out = str(tmp_path / "out")
    if how == "flag":
        argv = ["perturb", "--input", str(raw), "--output", out, "--columns", "text", "--epsilon", "5"]
        argv += ["--mechanism", "syntf", "--draws", "1000000000"]
    else:
        argv = ["compare", "--input", str(raw), "--output", out, "--text-column", "text", "--label-column", "label"]
        argv += ["--mechanisms", "syntf", "--grid", "draws=1e9"]
    refused(capsys, tmp_path, argv, 2, "draws must be a whole number from 1 to 1,000")


@pytest.mark.parametrize(
    "command, given, phrase",
    [
        ("compare", [], "--text-column and --label-column are required"),
        ("evaluate-utility", ["--text-column", "text"], "--label-column is required"),
        ("privacy-risk", [], "--text-column is required"),
    ],
)
def test_missing_column_flags_are_named(capsys, tmp_path, raw, command, given, phrase):
    err = refused(
        capsys, tmp_path, [command, "--input", str(raw), "--output", str(tmp_path / "out"), *given], 2, phrase
    )
    assert "same column" not in err


# --- a new user's first hour -----------------------------------------------------------------------


def test_threadpoolctl_is_a_dependency_so_doctor_passes_after_a_plain_install():
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / "setup.py").read_text(encoding="utf-8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    requires = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "install_requires"))
    assert "threadpoolctl>=2.2" in requires  # what doctor's "blas threads" check reads (3.x passes it)
    from dpspark import doctor

    assert doctor.check_blas({}, "3.5.0").ok and not doctor.check_blas({}, None).ok


NOTE = "OPENBLAS_CORETYPE=SkylakeX from the environment is kept (test)"


@pytest.fixture()
def blas_note(monkeypatch):
    from dpspark import _blas, cli

    monkeypatch.setattr(_blas, "kept_kernel_note", lambda fields=None: NOTE)
    monkeypatch.setattr(_blas, "prefer_fast_kernels", lambda: None)
    ran = []
    stats = cli.COMMANDS["privacy-stats"]
    monkeypatch.setitem(cli.COMMANDS, "privacy-stats", stats._replace(run=lambda c: ran.append(c) or 0))
    return ran


def _blas_lines(caplog):
    return [r for r in caplog.records if r.name == "dpspark.blas"]


def test_blas_note_never_on_an_argument_error(blas_note, caplog, capsys, tmp_path):
    refused(capsys, tmp_path, ["privacy-stats", "--output", str(tmp_path / "out"), "--runs", "1"], 2, "runs")
    assert not _blas_lines(caplog) and not blas_note


@pytest.mark.parametrize("where", ["flag", "config file"])
def test_blas_note_never_with_quiet(blas_note, caplog, tmp_path, where):
    from dpspark.cli import main

    conf = tmp_path / "quiet.yaml"
    conf.write_text("quiet: true\n")
    quiet = ["--quiet"] if where == "flag" else ["--config", str(conf)]
    assert main(["privacy-stats", "--output", str(tmp_path / "out"), *quiet]) == 0
    assert blas_note and not _blas_lines(caplog)


def test_blas_note_where_the_search_runs(blas_note, caplog, tmp_path):
    import logging

    from dpspark.cli import main

    with caplog.at_level(logging.INFO, logger="dpspark.blas"):
        assert main(["privacy-stats", "--output", str(tmp_path / "out")]) == 0
    assert blas_note and [r.getMessage() for r in _blas_lines(caplog)] == [NOTE]


@pytest.fixture()
def no_spark(monkeypatch):
    """Starting a Spark session fails the test: these refusals come before Spark starts."""
    from pyspark.sql import SparkSession

    def started(self):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", started)


@pytest.mark.parametrize(
    "command, flags, phrase",
    [
        ("perturb", ["--columns", "body", "--epsilon", "5"], "column 'body' is not in the input"),
        ("evaluate-utility", ["--text-column", "text", "--label-column", "y"], "column 'y' is not in the input"),
        ("compare", ["--text-column", "txt", "--label-column", "label"], "column 'txt' is not in the input"),
        ("privacy-risk", ["--text-column", "body"], "available columns: text, label (--text-column)"),
        ("release-vectors", ["--column", "vec", "--epsilon", "5"], "column 'vec' is not in the input"),
    ],
)
def test_column_errors_come_from_the_parquet_schema_before_spark(
    capsys, tmp_path, raw, no_spark, command, flags, phrase
):
    refused(capsys, tmp_path, [command, "--input", str(raw), "--output", str(tmp_path / "out"), *flags], 3, phrase)


def test_a_missing_input_is_refused_before_spark(capsys, tmp_path, no_spark):
    argv = ["privacy-risk", "--input", str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")]
    refused(capsys, tmp_path, [*argv, "--text-column", "text"], 3, "nowhere does not exist")


def _unchanged_warning(name, epsilon, **params):
    from types import SimpleNamespace

    from dpspark.mechanisms import Space, parse
    from dpspark.run.perturb import unchanged_warning

    space = Space(np.random.default_rng(1).normal(size=(300, 5)), np.arange(300))
    spec = parse({"name": name, "epsilon": epsilon, **params})
    spec.prepare(space)
    prepared = SimpleNamespace(mechanism=spec.build(space), config=SimpleNamespace(epsilon=epsilon, mechanism=name))
    with pytest.warns(Warning) as caught:
        unchanged_warning(prepared)
    (warning,) = [w for w in caught if "unchanged" in str(w.message)]
    return str(warning.message)


def test_santext_plus_unchanged_warning_names_p_when_p_is_the_cause():
    # The 200 most frequent words are all outside V_S: 95% of their tokens are kept by design at any ε.
    message = _unchanged_warning("santext-plus", 0.5, p=0.05, sensitive_fraction=0.1)
    assert "1 - p = 0.95" in message and "raise --p" in message and "smaller epsilon" not in message


def test_the_unchanged_warning_still_advises_a_smaller_epsilon_where_epsilon_is_the_cause():
    message = _unchanged_warning("santext", 1e4)
    assert "choose a smaller epsilon" in message and "--p" not in message
