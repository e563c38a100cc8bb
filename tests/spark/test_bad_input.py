"""Bad input through the CLI: the documented exit code, a message naming the problem, no output.

Every case runs ``dpspark.cli.main`` in-process. The session-scoped ``spark`` fixture keeps
a local session active, so ``run_perturb`` reuses it (no --master is passed).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from dpspark.cli import main
from dpspark.errors import ConfigError, EmbeddingError, InputDataError, OutputExistsError

pytestmark = pytest.mark.spark

REVIEWS = str(Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet")


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch) -> Path:
    """A temporary directory of the test's own, so that leftovers of a failed run can be seen."""
    scratch = tmp_path / "tempdir"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def run(capsys, tmp_path: Path, *extra: str, input: str = REVIEWS) -> tuple[int, str, Path]:
    """Run ``dpspark perturb`` with ``extra`` flags; return (exit code, stderr, output path)."""
    output = tmp_path / "out"
    argv = ["perturb", "--input", input, "--output", str(output), "--columns", "text", "--quiet", *extra]
    code = main(argv)
    err = capsys.readouterr().err
    return code, err, output


def assert_failed(code: int, err: str, output: Path, error: type, *fragments: str) -> None:
    assert code == error.exit_code != 0, err
    assert "dpspark perturb: error:" in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in stderr: {err}"
    assert not output.exists()
    leftovers = [p.name for p in output.parent.iterdir() if p.name.startswith(output.name)]
    assert leftovers == [], f"left behind: {leftovers}"
    # dpspark's own scratch directory may exist (removed at exit), but holds nothing after a run.
    scratch = [
        p.name
        for p in (output.parent / "tempdir").rglob("*")
        if not (p.name.startswith("dpspark-scratch-") and p.is_dir() and not any(p.iterdir()))
    ]
    assert scratch == [], f"temporary files left behind: {scratch}"


def glove_file(path: Path, words: list[str], dim: int = 5, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((len(words), dim))
    path.write_text(
        "".join(w + " " + " ".join(f"{x:.6f}" for x in row) + "\n" for w, row in zip(words, vectors, strict=True))
    )
    return str(path)


# --- input ---------------------------------------------------------------------------------------


@pytest.mark.runtime
def test_missing_input(spark, capsys, tmp_path):
    missing = str(tmp_path / "no_such.parquet")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", input=missing)
    assert_failed(code, err, out, InputDataError, missing, "does not exist")


@pytest.mark.runtime
def test_input_not_parquet(spark, capsys, tmp_path):
    csv = tmp_path / "reviews.csv"
    csv.write_text("id,text\n1,a fine product\n2,broke after a week\n")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", input=str(csv))
    assert_failed(code, err, out, InputDataError, str(csv), "not a Parquet")


@pytest.mark.runtime
def test_column_missing(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--columns", "body")
    assert_failed(code, err, out, InputDataError, "'body'", "not in the input", "text")


@pytest.mark.runtime
def test_column_not_a_string(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--columns", "rating")
    assert_failed(code, err, out, InputDataError, "'rating'", "expected string")


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1"])
def test_epsilon_not_positive(spark, capsys, tmp_path, value):
    code, err, out = run(capsys, tmp_path, "--epsilon", value)
    assert_failed(code, err, out, ConfigError, "epsilon", "positive finite")


def test_epsilon_nan(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path, "--epsilon", "nan")
    assert_failed(code, err, out, ConfigError, "epsilon", "positive finite", "nan")


def test_epsilon_infinite(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path, "--epsilon", "inf")
    assert_failed(code, err, out, ConfigError, "epsilon", "positive finite", "inf")


def test_epsilon_missing(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path)
    assert_failed(code, err, out, ConfigError, "epsilon", "required")


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_lambda_outside_unit_interval(spark, capsys, tmp_path, value):
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--lambda", value)
    assert_failed(code, err, out, ConfigError, "lambda", "[0, 1]", value)


def test_unknown_mechanism(spark, capsys, tmp_path):
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--mechanism", "gaussian")
    assert_failed(code, err, out, ConfigError, "mechanism", "gaussian", "mahalanobis", "laplace")


def test_unknown_embeddings_format(spark, capsys, tmp_path):
    path = glove_file(tmp_path / "emb.txt", [f"w{i}" for i in range(20)])
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", path, "--embeddings-format", "csv")
    assert_failed(code, err, out, ConfigError, "embeddings_format", "csv", "glove")


# --- embeddings ----------------------------------------------------------------------------------


def test_embeddings_file_missing(spark, capsys, tmp_path):
    missing = str(tmp_path / "no_such_vectors.txt")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", missing)
    assert_failed(code, err, out, EmbeddingError, missing, "not found")


def test_embeddings_unparseable(spark, capsys, tmp_path):
    path = tmp_path / "garbage.txt"
    path.write_text("this is not\nan embedding file at all\n")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", str(path))
    assert_failed(code, err, out, EmbeddingError, str(path), "line 2")


def test_embeddings_unparseable_numbers(spark, capsys, tmp_path):
    path = tmp_path / "garbage.txt"
    path.write_text("the 0.1 0.2\nof abc def\n")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", str(path))
    assert_failed(code, err, out, EmbeddingError, str(path), "unparseable number")


def test_embeddings_with_nan(spark, capsys, tmp_path):
    path = Path(glove_file(tmp_path / "emb.txt", [f"w{i}" for i in range(20)]))
    lines = path.read_text().splitlines()
    lines[3] = "w3 0.1 nan 0.3 0.4 0.5"
    path.write_text("\n".join(lines) + "\n")
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", str(path))
    assert_failed(code, err, out, EmbeddingError, "NaN", "'w3'")


def test_embeddings_with_duplicate_words(spark, capsys, tmp_path):
    path = glove_file(tmp_path / "emb.txt", [f"w{i}" for i in range(10)] + ["w4"])
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", path)
    assert_failed(code, err, out, EmbeddingError, "duplicate", "'w4'")


def test_too_few_words_for_covariance(spark, capsys, tmp_path):
    path = glove_file(tmp_path / "emb.txt", ["the", "a", "good", "bad"], dim=5)
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", path)
    assert_failed(code, err, out, EmbeddingError, "positive-definite covariance", "4 words", "5 dimensions")


def test_vocab_size_too_small_for_covariance(spark, capsys, tmp_path):
    path = glove_file(tmp_path / "emb.txt", [f"w{i}" for i in range(20)], dim=5)
    code, err, out = run(capsys, tmp_path, "--epsilon", "10", "--embeddings", path, "--vocab-size", "3")
    assert_failed(code, err, out, EmbeddingError, "positive-definite covariance", "3 words", "--vocab-size")


# --- output --------------------------------------------------------------------------------------


@pytest.mark.runtime
def test_output_exists_and_mode_error(spark, capsys, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    marker = output / "KEEP_ME"
    marker.write_text("earlier results")
    code, err, _ = run(capsys, tmp_path, "--epsilon", "10", "--mode", "error")
    assert code == OutputExistsError.exit_code != 0, err
    assert str(output) in err and "already exists" in err and "--mode overwrite" in err
    assert sorted(p.name for p in output.iterdir()) == ["KEEP_ME"]
    assert marker.read_text() == "earlier results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "tempdir"]
    assert [p for p in (tmp_path / "tempdir").rglob("*") if p.is_file()] == []
