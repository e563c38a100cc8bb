"""perturb under a document unit (issue 41): each row of examples/reviews.parquet (text and title together)
is one unit whose tokens share the budget E; the manifest states the unit, the adjacency, D and the bound,
and the units' shape; the ledger records the unit; ``cap:K`` releases a row's tokens after the K-th as the
placeholder, and ``--over-cap refuse`` refuses before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main
from dpspark.embeddings import load_default, select_vocabulary
from dpspark.errors import ConfigError
from dpspark.text import tokenize

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"
FLAGS = ["--columns", "text,title", "--vocab-size", "5000", "--quiet", "--privacy-unit", "document"]
BUDGET = 60.0


def release(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["perturb", "--input", str(SAMPLE), "--output", str(out), *FLAGS, *extra]) == 0
    return out, json.loads((out / "_dpspark_manifest.json").read_text())


def units_of(out):
    """Each row's output tokens, text's then title's (a document unit, in unit order), by id."""
    rows = pq.read_table(out).to_pylist()
    return {r["id"]: (r["text"] or "").split() + (r["title"] or "").split() for r in rows}


def rm_diameter(vocab: int, lam: float) -> float:
    """The largest ‖·‖_RM distance between two of the first ``vocab`` GloVe words, over every pair: numpy's own
    covariance scaled to trace d, the Cholesky factor of (λΣ + (1−λ)I)⁻¹ (not dpspark's Q), and every pair's
    squared distance ‖p‖² + ‖q‖² − 2p·q in float64 (the largest distance has no cancellation: equal to the
    pairwise differences' 15 s loop to 2e-16 here)."""
    glove = load_default()
    x = np.asarray(glove.vectors[select_vocabulary(glove, vocab)], dtype=np.float64)
    sigma = np.cov(x, rowvar=False)
    sigma *= x.shape[1] / np.trace(sigma)
    p = x @ np.linalg.cholesky(np.linalg.inv(lam * sigma + (1.0 - lam) * np.eye(x.shape[1])))
    sq = (p * p).sum(axis=1)
    return float((sq[:, None] + sq[None, :] - 2.0 * (p @ p.T)).max()) ** 0.5


@pytest.mark.runtime
def test_a_document_unit_release_states_its_unit_bound_and_shape(spark, tmp_path):
    out, m = release(tmp_path, "doc", "--unit-budget", "60", "--mechanism", "mahalanobis", "--lambda", "1")
    assert m["epsilon"] is None and m["unit_budget"] == BUDGET
    assert m["privacy_unit"] == {"kind": "document", "column": None, "id_space": None}
    assert "same shape" in m["adjacency"] and m["allocation"]["kind"] == "scale"
    bound = m["unit_bound"]
    assert bound["type"] == "metric" and bound["diameter"] == pytest.approx(rm_diameter(5000, 1.0), rel=1e-9)
    assert bound["bound"] == pytest.approx(BUDGET * bound["diameter"])
    assert m["guarantee"].startswith("Per document:") and f"exp({bound['bound']:.6g})" in m["guarantee"]
    assert m["euclidean_epsilon_bound"] is None  # a per-token figure: the unit's bound replaces it
    lengths = np.array([len(t) for t in units_of(out).values()])
    shape = m["unit_counts"]
    assert shape["units"] == len(lengths) == 500 and shape["units_with_tokens"] == int((lengths > 0).sum())
    n = lengths[lengths > 0]
    assert shape["tokens_per_unit"] == {
        "min": int(n.min()),
        "median": int(np.sort(n)[(len(n) - 1) // 2]),
        "max": int(n.max()),
    }
    assert shape["token_epsilon"]["min"] == pytest.approx(BUDGET / n.max())
    assert shape["token_epsilon"]["max"] == pytest.approx(BUDGET / n.min())
    assert m["counts"]["tokens"] == int(lengths.sum()) and not any(k.startswith("shape_") for k in m["counts"])
    (entry,) = [json.loads(p.read_text()) for p in (out / "_dpspark_ledger").glob("*.json")]
    assert entry["privacy_unit"]["kind"] == "document" and entry["spent"] == BUDGET and entry["epsilon"] == BUDGET
    (row,) = m["ledger"]["epsilon_spent"]
    assert row["epsilon_at_most"] is None  # a budget per document is not an ε per token
    assert row["by_guarantee_type"][0]["privacy_unit"]["kind"] == "document"


def test_cap_releases_each_rows_tokens_after_the_kth_as_the_placeholder(spark, tmp_path):
    out, m = release(tmp_path, "cap", "--unit-budget", "30", "--mechanism", "laplace", "--allocation", "cap:10")
    over = 0
    for tokens in units_of(out).values():
        assert tokens[10:] == ["[UNK]"] * max(0, len(tokens) - 10)
        over += max(0, len(tokens) - 10)
    shape = m["unit_counts"]
    assert shape["tokens_over_cap"] == over > 0 and m["allocation"] == {
        "kind": "cap",
        "cap": 10,
        "over_cap": "placeholder",
    }
    assert shape["token_epsilon"] == {"min": 3.0, "median_unit": 3.0, "max": 3.0}
    assert m["counts"]["placeholders"] >= over


def test_over_cap_refuse_names_how_many_units_and_writes_nothing(spark, tmp_path, capsys):
    out = tmp_path / "refused"
    argv = ["perturb", "--input", str(SAMPLE), "--output", str(out), *FLAGS, "--unit-budget", "30"]
    assert main([*argv, "--allocation", "cap:20", "--over-cap", "refuse"]) == ConfigError.exit_code
    err = capsys.readouterr().err
    assert "unit(s) hold more than the cap of 20 tokens (the longest" in err and "--over-cap placeholder" in err
    assert not out.exists()


def test_the_python_api_takes_the_unit(spark, tmp_path):
    """``dpspark.release`` and ``dpspark.perturb_text`` take ``privacy_unit=`` and ``unit_budget=`` (the CLI's
    flags): the same manifest fields, and the lazy DataFrame's rows keep their token counts."""
    import dpspark

    df = spark.read.parquet(str(SAMPLE)).limit(40)
    m = dpspark.release(
        df, str(tmp_path / "api"), ["text", "title"], privacy_unit="document", unit_budget=20.0, vocab_size=5000
    )
    assert m["privacy_unit"]["kind"] == "document" and m["unit_budget"] == 20.0 and m["epsilon"] is None
    lazy = dpspark.perturb_text(df, ["text"], privacy_unit="document", unit_budget=20.0, vocab_size=5000)
    before = {r["id"]: len((r["text"] or "").split()) for r in df.collect()}
    after = {r["id"]: len((r["text"] or "").split()) for r in lazy.collect()}
    assert after.keys() == before.keys()
    with pytest.raises(ConfigError, match="choose one of epsilon"):
        dpspark.perturb_text(df, ["text"], 6.0, privacy_unit="document", unit_budget=20.0)


def test_keep_original_stays_not_private_under_a_unit(spark, tmp_path):
    """A unit's guarantee sentence never covers an output that carries the raw text: NOT PRIVATE stays first."""
    out, m = release(tmp_path, "kept", "--unit-budget", "30", "--keep-original")
    assert m["guarantee"].startswith("NONE: THIS OUTPUT IS NOT PRIVATE") and m["unit_bound"]["bound"] > 0


def test_syntf_per_document_draws_share_the_budget_under_a_cap(spark, tmp_path):
    """SynTF under a document unit, through the release: a row's draws (one per in-vocabulary token of its text
    and of its title) share E; under ``cap:10`` the draws after a row's 10th are the placeholder, in the text and
    its counts map; the manifest's bound is E (guarantee type document) and its shape counts draws."""
    flags = ["--mechanism", "syntf", "--unit-budget", "200", "--allocation", "cap:10", "--vocab-size", "2000"]
    out, m = release(tmp_path, "syntf", *flags)
    assert m["unit_bound"] == {**m["unit_bound"], "type": "document", "bound": 200.0, "diameter": None}
    assert m["guarantee"].startswith("Per document") and "Each draw of a synthetic document" in m["guarantee"]
    assert m["unit_counts"]["token_epsilon"] == {"min": 20.0, "median_unit": 20.0, "max": 20.0}
    words = load_default().word_rows  # a draw's source is any token with a vector (not only W's words)
    source = {r["id"]: r for r in pq.read_table(SAMPLE).to_pylist()}
    over = 0
    for row in pq.read_table(out).to_pylist():
        raw = source[row["id"]]
        draws = [int((words.rows(tokenize(raw[c] or "")[0]) >= 0).sum()) for c in ("text", "title")]
        drawn = [(row[c] or "").split() for c in ("text", "title")]
        assert [len(d) for d in drawn] == [n if raw[c] is not None else 0 for n, c in zip(draws, ("text", "title"))]
        flat = drawn[0] + drawn[1]
        assert flat.count("[UNK]") == max(0, len(flat) - 10), (raw, row)
        assert sum(dict(row["text_tf"] or []).values()) == len(drawn[0])
        over += max(0, len(flat) - 10)
    assert m["counts"]["placeholders"] == over == m["unit_counts"]["tokens_over_cap"] > 0
