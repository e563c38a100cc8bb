"""A mechanism's setting that the vocabulary cannot take is refused before anything is written.

Such settings are checked on the driver when the mechanism prepares its public arrays
(``MechanismSpec.prepare``): exit 2, a message that names the problem and the fix, no output, and
the input untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.cli import main
from dpspark.errors import PrivacyWarning

pytestmark = pytest.mark.spark

REVIEWS = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(REVIEWS, d / "reviews.parquet")
    return d


def refused(tmp_path: Path, data: Path, capsys, *flags: str) -> str:
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    args = ["perturb", "--input", str(data / "reviews.parquet"), "--columns", "text", "--output", str(out)]
    assert main([*args, "--quiet", *flags]) == 2
    assert not out.exists()
    assert snapshot(tmp_path) == before  # nothing written, the input unchanged
    return capsys.readouterr().err


def test_santext_plus_without_protected_words_is_refused(spark, tmp_path, data, capsys):
    words = tmp_path / "in" / "protected.txt"
    words.write_text("zzqxv\nqqwzx\n", encoding="utf-8")
    err = refused(
        tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--sensitive-words", str(words)
    )
    assert "none of the 2 words" in err and "protected set would be empty" in err and "--sensitive-fraction" in err


def test_santext_plus_parameters_are_checked_by_name(spark, tmp_path, data, capsys):
    err = refused(tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--p", "0")
    assert "p must be in (0, 1]" in err
    err = refused(tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--t", "0.5")
    assert "t: is not a parameter of santext-plus" in err


def test_truncated_gumbel_below_its_threshold_is_refused(spark, tmp_path, data, capsys):
    """b > 0 only for ε > (5 + 2 ln V)/Δ0: 75.8 on the 50,000-word vocabulary (Δ0: monday–tuesday)."""
    err = refused(tmp_path, data, capsys, "--mechanism", "truncated-gumbel", "--epsilon", "10")
    assert "epsilon > (5 + 2 ln V)/Δ0 = 75.8183" in err and "use a larger epsilon" in err


def test_truncated_gumbel_warns_that_no_guarantee_holds(spark, tmp_path, data):
    """Above its threshold it runs, and says in a warning and in the manifest that no guarantee can be stated."""
    out = tmp_path / "out"
    args = ["perturb", "--input", str(data / "reviews.parquet"), "--columns", "text", "--output", str(out)]
    with pytest.warns(PrivacyWarning, match="truncated-gumbel has no privacy guarantee"):
        assert main([*args, "--mechanism", "truncated-gumbel", "--epsilon", "100"]) == 0
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["guarantee_type"] == "none" and "contradicts" in manifest["guarantee"]


@pytest.mark.runtime
def test_syntf_releases_synthetic_documents_with_their_term_frequencies(spark, tmp_path, data, capsys):
    out = tmp_path / "out"
    args = ["perturb", "--input", str(data / "reviews.parquet"), "--columns", "text", "--output", str(out)]
    assert main([*args, "--quiet", "--mechanism", "syntf", "--epsilon", "30"]) == 0
    table = pq.read_table(out)
    assert pa.types.is_map(table.schema.field("text_tf").type)
    for row in table.to_pylist():
        if row["text"] is not None:
            words = row["text"].split()
            assert words == sorted(words) and dict(row["text_tf"] or []) == {w: words.count(w) for w in set(words)}
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["guarantee_type"] == "document" and manifest["mechanism"] == "syntf"
    # The lazy API gives the same columns; an input that already has text_tf is refused by name.
    df = spark.read.parquet(str(data / "reviews.parquet"))
    lazy = dpspark.perturb_text(df, "text", 30.0, mechanism="syntf", draws=3)
    assert "text_tf" in lazy.columns and all(len(r.text.split()) == 3 for r in lazy.limit(5).collect() if r.text)
    clashing = tmp_path / "clash.parquet"
    pq.write_table(
        pq.read_table(data / "reviews.parquet").append_column("text_tf", pa.array([None] * 500, pa.string())), clashing
    )
    capsys.readouterr()
    args = ["perturb", "--input", str(clashing), "--columns", "text", "--output", str(tmp_path / "o2")]
    assert main([*args, "--quiet", "--mechanism", "syntf", "--epsilon", "30"]) != 0
    assert "already has column(s) 'text_tf'" in capsys.readouterr().err and not (tmp_path / "o2").exists()


def test_santext_plus_protected_set_from_the_corpus_is_warned_and_recorded(spark, tmp_path, glove):
    """--sensitive-from-corpus: the least frequent half of the corpus's words (counted on Spark) is protected. With
    p = 1 every token is drawn from the protected set, nearly uniformly at ε = 0.1: the output's words are that set
    (7,260 draws over 60 words, each of probability > 1/100: one is missed with probability < 60·e^{-72})."""
    pool = [w for w in glove.words[200:600] if w.isalpha()][:120]
    tokens = [w for k, w in enumerate(pool) for _ in range(k + 1)]  # word k occurs k + 1 times
    np.random.default_rng(0).shuffle(tokens)
    corpus = [" ".join(tokens[i : i + 12]) for i in range(0, len(tokens), 12)]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(len(corpus))), "text": corpus}), src)
    out = tmp_path / "o"
    args = ["perturb", "--input", str(src), "--output", str(out), "--columns", "text", "--mechanism", "santext-plus"]
    args += ["--epsilon", "0.1", "--p", "1", "--sensitive-from-corpus", "--sensitive-fraction", "0.5"]
    with pytest.warns(PrivacyWarning, match="protected set is derived from the private corpus"):
        assert main(args) == 0
    words = {w for r in pq.read_table(out).to_pylist() for w in r["text"].split()}
    assert words == set(pool[:60])  # counts 1..60 of the 120 corpus words
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["mechanism_parameters"]["sensitive_from_corpus"] is True
    assert any("derived from the private corpus" in note for note in manifest["outside_guarantee"])
    assert "derived from the private data, outside the guarantee" in manifest["guarantee"]
