"""Hostile use, round 5 (issue 39): the settings refused before any Spark session starts.
Each refusal: its exit code, its one sentence, and nothing changed or left behind."""

from __future__ import annotations

import pytest
from refusals import refused

from dpspark.errors import ConfigError


@pytest.fixture()
def no_spark(monkeypatch):
    """A refusal comes before Spark: starting a session fails the test."""
    from pyspark.sql import SparkSession

    def refuse(self):  # noqa: ANN001, ANN202
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)


# --- 6: a --solve setting without --solve ------------------------------------------------------------


@pytest.mark.parametrize("flag, value", [("--solve-tolerance", "0.05"), ("--solve-rounds", "3")])
def test_a_solve_setting_without_solve_is_refused(capsys, tmp_path, raw, no_spark, flag, value):
    argv = ["compare", "--input", str(raw), "--output", str(tmp_path / "out"), "--text-column", "text"]
    argv += ["--label-column", "label", "--max-reidentification", "0.2", flag, value]
    refused(
        capsys,
        tmp_path,
        argv,
        ConfigError.exit_code,
        f"{flag} sets the ε search of --solve, which is off",
        f"add --solve, or leave {flag} out",
    )


def test_solve_settings_with_solve_and_defaults_without_it_are_accepted():
    from dpspark.config import CompareConfig

    base = {"input": "in", "output": "out", "text_column": "text", "label_column": "label"}
    assert CompareConfig.parse(base).solve_rounds == 6  # the defaults alone are no setting of --solve
    solved = {**base, "solve": True, "max_reidentification": 0.2, "solve_tolerance": 0.05, "solve_rounds": 3}
    c = CompareConfig.parse(solved)
    assert (c.solve_tolerance, c.solve_rounds) == (0.05, 3)


# --- 7: an output named as dpspark's own files -------------------------------------------------------


@pytest.mark.parametrize(
    "name, phrases",
    [
        ("_dpspark_lock_x", ["_dpspark_lock_x is a name dpspark keeps for the commit lock of the output x",
                             "no release removes", "an output must not be named _dpspark_lock_..."]),
        ("_dpspark_tmp_x_host_1_run", ["a release's temporary, which a later release beside it removes as stale"]),
        ("_dpspark_old_x_host_1_run", ["a release's temporary"]),
        ("x/_dpspark_ledger/y", ["_dpspark_ledger is a name dpspark keeps for the ε ledger"]),
        ("_dpspark_manifest.json", ["is a name dpspark keeps for its own files"]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["perturb", "privacy-stats"])
def test_an_output_named_as_dpsparks_own_files_is_refused(capsys, tmp_path, raw, no_spark, name, phrases, command):
    out = tmp_path / "d" / name
    argv = [command, "--output", str(out)]
    if command == "perturb":
        argv += ["--input", str(raw), "--columns", "text", "--epsilon", "5"]
    refused(
        capsys,
        tmp_path,
        argv,
        ConfigError.exit_code,
        *phrases,
        "choose an --output with no part beginning with _dpspark_",
    )
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "table, phrase",
    [
        ("main.s.events__dpspark_ledger", "events__dpspark_ledger is the ledger table of the output table events"),
        ("s._dpspark_tmp_events_host_1_run", "a name dpspark keeps for its staging tables"),
    ],
)
def test_an_output_table_named_as_dpsparks_own_is_refused(capsys, tmp_path, raw, no_spark, table, phrase):
    argv = ["perturb", "--input", str(raw), "--output-table", table, "--columns", "text", "--epsilon", "5"]
    refused(capsys, tmp_path, argv, ConfigError.exit_code, phrase)


def test_names_that_only_look_alike_are_outputs():
    from dpspark import reserved

    for path in ("d/my_dpspark_lock_x", "d/dpspark_lock_x", "d/x_dpspark_ledger", "s3a://b/out"):
        assert reserved.output_path_problem(path) is None, path
    assert reserved.output_table_problem("main.s.events_dpspark") is None
