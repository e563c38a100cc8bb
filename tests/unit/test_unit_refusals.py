"""A privacy unit's bad settings (issue 41), refused before any Spark session starts: the exit code, one
sentence naming the problem and the fix, nothing written."""

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


CASES = [
    (["--privacy-unit", "person", "--unit-budget", "6"], ["unknown privacy unit 'person'", "document (one row)"]),
    (["--privacy-unit", "document"], ["a document unit needs its budget: give --unit-budget E"]),
    (["--privacy-unit", "document", "--unit-budget", "6", "--epsilon", "3"], ["choose one of epsilon (per token)"]),
    (["--epsilon", "3", "--unit-budget", "6"], ["apply to a privacy unit other than the token"]),
    (["--epsilon", "3", "--allocation", "cap:5"], ["apply to a privacy unit other than the token"]),
    (["--privacy-unit", "document", "--unit-budget", "0"], ["unit budget must be a positive finite number, got 0"]),
    (["--privacy-unit", "document", "--unit-budget", "nan"], ["unit budget must be a positive finite number"]),
    (["--privacy-unit", "document", "--unit-budget", "inf"], ["unit budget must be a positive finite number"]),
    (["--privacy-unit", "document", "--unit-budget", "6", "--allocation", "cap:0"], ["a positive whole number"]),
    (
        ["--privacy-unit", "document", "--unit-budget", "100", "--mechanism", "truncated-gumbel"],
        ["guarantee type 'none' states no bound", "use the token unit"],
    ),
    (
        ["--privacy-unit", "column:text", "--unit-budget", "6"],
        ["the unit column 'text' is also a text column to perturb", "leave this one out of --columns"],
    ),
    (["--privacy-unit", "document", "--unit-budget", "6", "--oov", "drop"], ["use unk or random"]),
    (
        ["--privacy-unit", "document", "--unit-budget", "60", "--mechanism", "syntf", "--allocation", "cap:5"]
        + ["--over-cap", "refuse"],
        ["draws per document follow the vocabulary", "--over-cap placeholder"],
    ),
]


@pytest.mark.parametrize("flags, phrases", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_unit_setting_is_refused_before_spark(capsys, tmp_path, raw, no_spark, flags, phrases):
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text", *flags]
    refused(capsys, tmp_path, argv, ConfigError.exit_code, *phrases)


def test_without_epsilon_or_a_unit_the_message_still_asks_for_epsilon(capsys, tmp_path, raw, no_spark):
    argv = ["perturb", "--input", str(raw), "--output", str(tmp_path / "out"), "--columns", "text"]
    refused(capsys, tmp_path, argv, ConfigError.exit_code, "epsilon is required", "--epsilon 6")
