"""Privacy units in the measuring commands (issue 41, step 5): ``evaluate-utility``, ``compare``,
``privacy-risk`` and ``privacy-stats`` with ``--privacy-unit document --unit-budgets E,...`` on the local engine
(Spark's figures equal these: tests/spark/test_local_equals_spark.py). The grid's ε is each document's budget E;
the perturbed copies are unit releases (each row's tokens share E); the manifest states the unit, the units' shape
and the per-token ε each E gives on the data; compare, privacy-risk and privacy-stats measure their per-token
privacy figures at the median document's ε, and calibrate judges only outputs of one unit together. And the
refusals."""

from __future__ import annotations

import json
import shutil
import statistics

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from refusals import refused

from dpspark.cli import NO_EPSILON_MEETS_BOUNDS, main
from dpspark.config import EvaluateUtilityConfig
from dpspark.embeddings import embeddings_of
from dpspark.errors import ConfigError, InputDataError
from dpspark.rng import batch_generator
from dpspark.run.local import LocalBackend
from dpspark.run.settings import LABEL, TEXT, UNIT, Halves, People, prepare_settings, release_bundle
from dpspark.text import tokenize

ROWS = 120


@pytest.fixture(scope="module")
def sms(tmp_path_factory):
    from dpspark.evaluation.datasets import sms_spam

    return sms_spam(tmp_path_factory.mktemp("sms"), rows=ROWS)


def lengths(path) -> list[int]:
    """Tokens per row, counted here with the release's tokenizer (a null text has none)."""
    return [len(tokenize(t)[0]) if t else 0 for t in pq.read_table(path).column("text").to_pylist()]


def test_evaluate_utility_per_document_states_the_unit_and_the_per_token_epsilon(sms, tmp_path, capsys):
    out = tmp_path / "u"
    argv = ["evaluate-utility", "--engine", "local", "--input", sms, "--text-column", "text", "--label-column"]
    argv += ["label", "--privacy-unit", "document", "--unit-budgets", "20,100", "--lambdas", "1", "--repeats", "1"]
    assert main([*argv, "--vocab-size", "2000", "--output", str(out)]) == 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    n = [k for k in lengths(sms) if k > 0]
    median = sorted(n)[(len(n) - 1) // 2]  # the smallest n with half of the units at or below it
    assert m["privacy_unit"]["kind"] == "document" and m["unit_budgets"] == m["epsilons"] == [20.0, 100.0]
    assert m["allocation"]["kind"] == "scale" and "same shape" in m["adjacency"]
    assert m["unit_counts"]["units"] == ROWS and m["unit_counts"]["tokens_per_unit"] == {
        "min": min(n),
        "median": median,
        "max": max(n),
    }
    for e, row in zip((20.0, 100.0), m["token_epsilons"]):
        assert row == {"unit_budget": e, "min": e / max(n), "median_unit": e / median, "max": e / min(n)}
    assert "Privacy unit: document" in summary and f"median document {20 / median:.3g}" in summary
    results = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["epsilon"] for r in results] == [None, 20.0, 20.0, 100.0, 100.0]  # the baseline, then E per mode


def test_the_perturbed_copies_are_unit_releases(sms, tmp_path):
    """A setting's bundle carries the unit: the local engine's perturbed copy is ``perturb_units`` of each batch,
    draw for draw (each row one document, its tokens at E/n), not the token release at ε = E."""
    config = EvaluateUtilityConfig.parse(
        {"input": sms, "output": "o", "text_column": "text", "label_column": "label", "privacy_unit": "document"}
        | {"unit_budgets": "30", "mechanisms": "laplace", "vocab_size": 2000}
    )
    (prep,) = prepare_settings(config, config.settings(), embeddings_of(config), tmp_path / "w")
    assert prep.config.unit_budget == 30.0 and prep.config.epsilon is None
    texts = pq.read_table(sms).column("text").combine_chunks()
    table = pa.table({TEXT: texts})
    key = b"k" * 16
    with LocalBackend("t") as backend:
        ship = backend.ship(prep.write_bundle)
        got = backend.perturbed(table, ship.name, key).column(TEXT).to_pylist()
    perturber = prep.perturber()
    want = perturber.perturb_units([texts], batch_generator(key, 0, 0))[0][0].to_pylist()
    assert got == want
    token_release = perturber.perturb_array(texts, batch_generator(key, 0, 0))[0].to_pylist()
    assert got != token_release  # E/n per token is not ε = E per token


def test_compare_per_document_measures_privacy_at_the_median_documents_epsilon(sms, tmp_path):
    out = tmp_path / "c"
    argv = ["compare", "--engine", "local", "--input", sms, "--text-column", "text", "--label-column", "label"]
    argv += ["--privacy-unit", "document", "--unit-budgets", "40", "--mechanisms", "laplace", "--refine", "0"]
    assert main([*argv, "--repeats", "1", "--runs", "4", "--vocab-size", "2000", "--output", str(out)]) == 0
    n = [k for k in lengths(sms) if k > 0]
    median = sorted(n)[(len(n) - 1) // 2]
    (row,) = pq.read_table(out / "compare.parquet").to_pylist()
    assert row["epsilon"] == 40.0 and row["token_epsilon"] == pytest.approx(40.0 / median)
    assert statistics.median(n) >= median  # the lower median: the share is never understated
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["privacy_unit"]["kind"] == "document" and m["token_epsilons"][0]["median_unit"] == row["token_epsilon"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "Privacy unit: document" in report and "measured per token at the median document's ε" in report


def test_compare_solves_for_the_budget_under_a_document_unit(sms, tmp_path):
    """--solve searches E (the grid's ε) where the re-identification bound is met: its points are budgets between
    the grid's, each measured per token at its median document's share."""
    out = tmp_path / "c"
    argv = ["compare", "--engine", "local", "--input", sms, "--text-column", "text", "--label-column", "label"]
    argv += ["--privacy-unit", "document", "--unit-budgets", "10,200", "--mechanisms", "laplace", "--solve"]
    argv += ["--max-reidentification", "0.3", "--solve-rounds", "2", "--repeats", "1", "--runs", "4"]
    # exit 6 (no recommendation) where no setting beats the majority class on these 120 rows: the solve stands
    assert main([*argv, "--vocab-size", "2000", "--quiet", "--output", str(out)]) in (0, NO_EPSILON_MEETS_BOUNDS)
    n = [k for k in lengths(sms) if k > 0]
    median = sorted(n)[(len(n) - 1) // 2]
    rows = pq.read_table(out / "compare.parquet").to_pylist()
    solved = [r for r in rows if r["stage"].startswith("solve")]
    assert solved and all(10.0 < r["epsilon"] < 200.0 for r in solved)
    for r in rows:
        assert r["token_epsilon"] == pytest.approx(r["epsilon"] / median)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    (solution,) = m["solve"]  # one setting, one bound
    assert solution["bound"].startswith("top-1") and solution["epsilon"] in {r["epsilon"] for r in rows}


def test_privacy_risk_per_document_is_the_token_run_at_the_median_documents_epsilon(sms, tmp_path):
    """Each budget E measured at E/n for the median document's n tokens: the same figures, draw for draw (one
    seed), as a token-unit run at those ε; risk.parquet names E as ``epsilon`` and the per-token ε beside it."""
    n = [k for k in lengths(sms) if k > 0]
    median = sorted(n)[(len(n) - 1) // 2]
    base = ["privacy-risk", "--engine", "local", "--input", sms, "--text-column", "text", "--mechanisms"]
    base += ["laplace,tem", "--runs", "4", "--vocab-size", "2000", "--seed", "3"]
    with pytest.warns(UserWarning, match="seed"):
        unit = ["--privacy-unit", "document", "--unit-budgets", "20,100"]
        assert main([*base, *unit, "--output", str(tmp_path / "unit")]) == 0
    with pytest.warns(UserWarning, match="seed"):
        shares = f"{20 / median!r},{100 / median!r}"
        assert main([*base, "--epsilons", shares, "--output", str(tmp_path / "token")]) == 0
    by_unit, by_token = (pq.read_table(tmp_path / d / "risk.parquet").to_pylist() for d in ("unit", "token"))
    assert [(r["setting"], r["epsilon"]) for r in by_unit] == [
        (s, e) for s in ("laplace", "tem β=0.001") for e in (20.0, 100.0)
    ]
    for u, t in zip(by_unit, by_token):
        assert u["token_epsilon"] == t["epsilon"] == t["token_epsilon"] == pytest.approx(u["epsilon"] / median)
        drop = ("epsilon", "token_epsilon", "fit_curve")
        same = [json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in (u, t)]  # NaN too
        assert same[0] == same[1]
    m = json.loads((tmp_path / "unit" / "_dpspark_manifest.json").read_text())
    assert m["privacy_unit"]["kind"] == "document" and m["unit_budgets"] == m["epsilons"] == [20.0, 100.0]
    assert m["token_epsilons"][0]["median_unit"] == pytest.approx(20 / median)
    summary = (tmp_path / "unit" / "summary.md").read_text(encoding="utf-8")
    assert "Privacy unit: document" in summary and "the per-token ε its budget gives the median document" in summary


def test_calibrate_judges_outputs_of_one_unit_only(sms, tmp_path, capsys):
    """A risk grid of budgets per document beside a utility grid of ε per token is refused (exit 3, nothing
    written); two outputs of the same unit calibrate on their budgets."""
    common = ["--engine", "local", "--input", sms, "--text-column", "text", "--mechanisms", "laplace"]
    common += ["--vocab-size", "2000", "--quiet"]
    doc = ["--privacy-unit", "document", "--unit-budgets", "20,100"]
    assert main(["privacy-risk", *common, *doc, "--runs", "4", "--output", str(tmp_path / "risk")]) == 0
    labelled = [*common, "--label-column", "label", "--repeats", "1", "--mode", "test-time"]
    assert main(["evaluate-utility", *labelled, *doc, "--output", str(tmp_path / "u_doc")]) == 0
    assert main(["evaluate-utility", *labelled, "--epsilons", "20,100", "--output", str(tmp_path / "u_tok")]) == 0
    calibrate = ["calibrate", "--engine", "local", "--risk", str(tmp_path / "risk"), "--max-reidentification", "1"]
    calibrate += ["--max-utility-loss", "1", "--quiet"]
    capsys.readouterr()
    refused(
        capsys, tmp_path, [*calibrate, "--utility", str(tmp_path / "u_tok"), "--output", str(tmp_path / "cal")],
        3, "different privacy units (--utility per token, --risk per document, scale)",
    )  # fmt: skip
    assert main([*calibrate, "--utility", str(tmp_path / "u_doc"), "--output", str(tmp_path / "cal")]) == 0
    best = json.loads((tmp_path / "cal" / "calibration.json").read_text())["best"]
    assert best["setting"] == "laplace" and best["epsilon"] == 20.0  # the most private budget meets both bounds


def test_privacy_stats_per_document_is_the_token_run_at_the_median_documents_epsilon(tmp_path, capsys):
    """Nw/Sw under a document unit of a two-column corpus (a row's tokens over both columns are its unit): the
    per_word table holds E in ``epsilon`` and the median document's E/n in ``token_epsilon``, and its Nw and Sw
    are, word for word, those of a token run at that ε for the same seed; calibrate reads its ε as budgets and
    refuses to judge it beside a utility grid per token."""
    corpus = tmp_path / "corpus.parquet"
    texts = [" ".join(["the river runs"] * (1 + i % 7)) for i in range(40)]
    titles = [None if i % 5 == 0 else "a london bridge" for i in range(40)]
    pq.write_table(pa.table({"text": texts, "title": titles}), corpus)
    n = sorted(len(tokenize(a)[0]) + (len(tokenize(b)[0]) if b else 0) for a, b in zip(texts, titles))
    median = n[(len(n) - 1) // 2]
    common = ["privacy-stats", "--engine", "local", "--corpus", str(corpus), "--columns", "text,title"]
    common += ["--mechanisms", "laplace,tem", "--runs", "6", "--words", "5", "--vocab-size", "2000", "--seed", "4"]
    doc = ["--privacy-unit", "document", "--unit-budgets", "40,200", "--quiet"]
    assert main([*common, *doc, "--output", str(tmp_path / "unit")]) == 0
    shares = ",".join(repr(e / median) for e in (40.0, 200.0))
    assert main([*common, "--epsilons", shares, "--quiet", "--output", str(tmp_path / "token")]) == 0
    unit, token = (pq.read_table(tmp_path / d / "per_word.parquet") for d in ("unit", "token"))
    assert sorted(set(unit.column("epsilon").to_pylist())) == [40.0, 200.0]
    assert unit.column("token_epsilon").to_pylist() == token.column("epsilon").to_pylist()
    assert unit.drop(["epsilon", "token_epsilon"]).equals(token.drop(["epsilon"]))
    assert unit.num_rows == 2 * 2 * 5 and sum(unit.column("nw").to_pylist()) > 0  # the words do survive at times
    m = json.loads((tmp_path / "unit" / "_dpspark_manifest.json").read_text())
    assert m["unit_budgets"] == m["epsilons"] == [40.0, 200.0] and m["unit_counts"]["units"] == 40
    assert m["unit_counts"]["tokens_per_unit"] == {"min": n[0], "median": median, "max": n[-1]}
    assert "per_word.parquet's token_epsilon" in (tmp_path / "unit" / "summary.md").read_text(encoding="utf-8")
    calibrate = ["calibrate", "--engine", "local", "--stats", str(tmp_path / "unit"), "--max-nw-fraction", "1"]
    assert main([*calibrate, "--quiet"]) == 0
    text = (tmp_path / "unit" / "calibration.md").read_text(encoding="utf-8")
    assert "ε is each document's budget E (document, scale)" in text
    capsys.readouterr()
    refused(
        capsys, tmp_path, ["privacy-stats", "--engine", "local", *doc, "--output", str(tmp_path / "no_corpus")],
        ConfigError.exit_code, "give the documents (--corpus PARQUET --columns COL",
    )  # fmt: skip


def test_privacy_stats_and_risk_per_person_are_the_token_runs_at_the_median_persons_epsilon(tmp_path, capsys):
    """A column:user unit in the measuring commands (issue 41, step 5): a person's tokens over all their rows are
    the unit, counted per keyed hash of the id; each budget E is measured at E/n for the median person's n tokens,
    the same figures, draw for draw (one seed), as a token run at that ε. Rows without an id are refused."""
    corpus = tmp_path / "corpus.parquet"
    texts = [" ".join(["the river runs"] * (1 + i % 7)) for i in range(40)]
    users = [f"u{i % 6}" for i in range(40)]  # 7 or 6 rows each, their lengths in turn
    pq.write_table(pa.table({"text": texts, "user": users}), corpus)
    per_user = sorted(sum(len(tokenize(t)[0]) for t, u in zip(texts, users) if u == v) for v in set(users))
    median = per_user[(len(per_user) - 1) // 2]
    stats = ["privacy-stats", "--engine", "local", "--corpus", str(corpus), "--columns", "text", "--mechanisms"]
    stats += ["laplace,tem", "--runs", "6", "--words", "5", "--vocab-size", "2000", "--seed", "4", "--quiet"]
    risk = ["privacy-risk", "--engine", "local", "--input", str(corpus), "--text-column", "text", "--mechanisms"]
    risk += ["laplace", "--runs", "4", "--vocab-size", "2000", "--seed", "3", "--quiet"]
    person = ["--privacy-unit", "column:user", "--unit-budgets", "300,900"]
    shares = ",".join(repr(e / median) for e in (300.0, 900.0))
    for name, argv, table in (("stats", stats, "per_word.parquet"), ("risk", risk, "risk.parquet")):
        assert main([*argv, *person, "--output", str(tmp_path / f"{name}_unit")]) == 0
        assert main([*argv, "--epsilons", shares, "--output", str(tmp_path / f"{name}_token")]) == 0
        unit, token = (pq.read_table(tmp_path / f"{name}_{d}" / table) for d in ("unit", "token"))
        assert sorted(set(unit.column("epsilon").to_pylist())) == [300.0, 900.0]
        assert unit.column("token_epsilon").to_pylist() == pytest.approx(token.column("epsilon").to_pylist())

        def figures(t: pa.Table) -> list[str]:  # every column but the ε's (and the fit's curve), NaN too
            kept = [c for c in t.column_names if c not in ("epsilon", "token_epsilon", "fit_curve")]
            return [json.dumps(r, sort_keys=True) for r in t.select(kept).to_pylist()]

        assert figures(unit) == figures(token)
        m = json.loads((tmp_path / f"{name}_unit" / "_dpspark_manifest.json").read_text())
        assert m["privacy_unit"] == {"kind": "column", "column": "user", "id_space": "user"}
        assert m["unit_counts"]["units"] == 6
        assert m["unit_counts"]["tokens_per_unit"] == {"min": per_user[0], "median": median, "max": per_user[-1]}
        assert m["token_epsilons"][0]["median_unit"] == pytest.approx(300 / median)
        summary = (tmp_path / f"{name}_unit" / "summary.md").read_text(encoding="utf-8")
        assert "Privacy unit: user" in summary and "the median user" in summary
    pq.write_table(pa.table({"text": texts, "user": [None if i in (3, 9) else u for i, u in enumerate(users)]}), corpus)
    capsys.readouterr()
    for argv in (stats, risk):
        refused(capsys, tmp_path, [*argv, *person, "--output", str(tmp_path / "out")], InputDataError.exit_code,
                "2 row(s) have no user (null)")  # fmt: skip


@pytest.mark.parametrize("command", ["evaluate-utility", "compare", "privacy-risk", "privacy-stats"])
def test_a_unit_grid_refuses_what_it_cannot_measure(sms, tmp_path, capsys, command):
    base = [command, "--engine", "local", "--output", str(tmp_path / "out")]
    if command == "privacy-stats":
        base += ["--corpus", sms, "--columns", "text"]
    else:
        base += ["--input", sms, "--text-column", "text"]
        base += [] if command == "privacy-risk" else ["--label-column", "label"]
    doc = ["--privacy-unit", "document"]
    cases = [
        ([*doc, "--unit-budgets", "20", "--epsilons", "5"], "in place of --epsilons"),
        (doc, "needs its budgets"),
        (["--unit-budgets", "20"], "apply to a privacy unit other than the token"),
        ([*doc, "--unit-budgets", "0"], "unit budget"),
        ([*doc, "--unit-budgets", "20", "--allocation", "cap:0"], "cap"),
        ([*doc, "--unit-budgets", "20", "--mechanisms", "syntf"], "draws whole documents"),
        ([*doc, "--unit-budgets", "20", "--mechanisms", "truncated-gumbel"], "states no bound"),
    ]
    for extra, phrase in cases:
        refused(capsys, tmp_path, [*base, *extra], ConfigError.exit_code, phrase)
    person = ["--privacy-unit", "column:user_id", "--unit-budgets", "20"]
    refused(capsys, tmp_path, [*base, *person], InputDataError.exit_code, "the unit column 'user_id'")
    same = ["--privacy-unit", "column:text", "--unit-budgets", "20"]
    refused(capsys, tmp_path, [*base, *same], ConfigError.exit_code, "is also the text column")


def test_the_per_token_share_never_exceeds_the_budget_over_the_units_tokens():
    """The allocation behind every unit figure: a document's shares sum to E (scale) or at most E (cap)."""
    from dpspark import units

    rng = np.random.default_rng(0)
    n = rng.integers(1, 90, 50)
    for alloc in ("scale", "cap:10"):
        a = units.allocate(n, 25.0, units.Allocation.parse(alloc))
        starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        sums = np.add.reduceat(np.where(a.drawn, a.epsilons, 0.0), starts)
        assert np.all(sums <= 25.0 * (1 + 1e-12)) and (alloc != "scale" or np.allclose(sums, 25.0))


def person_halves(vocabulary: list[str]) -> tuple[pa.Table, pa.Table, dict[str, tuple[int, int]]]:
    """A labelled split's halves with a user id column (``UNIT``): six users, each with rows in both halves,
    their texts of vocabulary words only (no placeholder but a cap's); and each user's (train, test) tokens."""
    rng = np.random.default_rng(5)
    halves, tokens = [], {}
    for side in (0, 1):
        users = [f"u{i % 6}" for i in range(30 + 6 * side)]
        texts = [" ".join(rng.choice(vocabulary, int(rng.integers(1, 9)))) for _ in users]
        for u, t in zip(users, texts):
            n = tokens.setdefault(u, [0, 0])
            n[side] += len(t.split())
        labels = [float(i % 2) for i in range(len(users))]
        halves.append(pa.table({TEXT: texts, LABEL: labels, UNIT: users}))
    return halves[0], halves[1], {u: (a, b) for u, (a, b) in tokens.items()}


@pytest.mark.parametrize("allocation", ["scale", "cap:12"])
def test_per_person_copies_walk_each_persons_tokens_over_both_halves(tmp_path, allocation):
    """evaluate-utility and compare per person: one count over both halves (train's partitions first), so each
    person's tokens in either half share the person's budget E. Under ``scale`` each copy is ``perturb_units``
    of its rows, draw for draw, with every row's unit total (both halves) and the person's tokens before it
    (train's rows come first) computed here; under ``cap:K`` exactly min(K, n) of a person's n tokens are drawn,
    their train tokens first. A bundle with the table is never perturbed without its walk."""
    config = EvaluateUtilityConfig.parse(
        {"input": "in.parquet", "output": "o", "text_column": "text", "label_column": "label"}
        | {"privacy_unit": "column:user", "unit_budgets": "300", "allocation": allocation}
        | {"mechanisms": "laplace", "vocab_size": 2000}
    )
    (prep,) = prepare_settings(config, config.settings(), embeddings_of(config), tmp_path / "w")
    vocabulary = [w for w in (prep.embeddings.words[r] for r in prep.vocab_rows[:300]) if w.isalpha()]
    train, test, tokens = person_halves(vocabulary)
    key = b"p" * 16
    with LocalBackend("t") as backend:
        people = People.count(backend, config.unit, [train, test], [TEXT], UNIT)
        assert sorted(people.table.unit_totals().tolist()) == sorted(a + b for a, b in tokens.values())
        halves = Halves(train, test, people)
        ship = backend.ship(release_bundle(prep, people))
        got = [backend.perturbed(halves.of(t), ship.name, key, walk=halves.walk(t)) for t in (False, True)]
        with pytest.raises(ValueError, match="without its walk"):
            backend.perturbed(train, ship.name, key)
    if allocation == "scale":
        perturber = prep.perturber()
        seen = dict.fromkeys(tokens, 0)
        for half, out in zip((train, test), got):
            users, texts = half.column(UNIT).to_pylist(), half.column(TEXT).combine_chunks()
            lengths = [len(t.split()) for t in texts.to_pylist()]
            totals = np.array([sum(tokens[u]) for u in users])
            before = []
            for u, n in zip(users, lengths):
                before.append(seen[u])
                seen[u] += n
            rows = (totals, np.array(before))
            want = perturber.perturb_units([texts], batch_generator(key, 0, 0), lambda _, r=rows: r)[0][0].to_pylist()
            assert out.column(TEXT).to_pylist() == want
        return
    cap = 12
    kept = {u: [0, 0] for u in tokens}
    for side, out in enumerate(got):
        for u, t in zip(out.column(UNIT).to_pylist(), out.column(TEXT).to_pylist()):
            kept[u][side] += sum(w != prep.config.oov_token for w in t.split())
    for u, (n_train, n_test) in tokens.items():
        assert kept[u][0] == min(cap, n_train), u  # train's tokens first
        assert kept[u][1] == min(cap - kept[u][0], n_test), u
        assert sum(kept[u]) == min(cap, n_train + n_test)


def test_evaluate_utility_and_compare_per_person_state_the_persons_shape(sms, tmp_path, capsys):
    """``column:user``: the person's tokens over both halves are the unit (the manifest's shape counts each user
    once), compare measures its per-token figures at E/n for the median user's n tokens, and the reports say
    "user"; rows without an id are refused, naming how many, with nothing left behind."""
    table = pq.read_table(sms)
    users = [f"u{i % 8}" for i in range(table.num_rows)]
    data = tmp_path / "in" / "users.parquet"
    data.parent.mkdir()
    pq.write_table(table.append_column("user", pa.array(users)), data)
    per_user = sorted(sum(n for n, v in zip(lengths(sms), users) if v == u) for u in set(users))
    median = per_user[(len(per_user) - 1) // 2]
    base = ["--engine", "local", "--input", str(data), "--text-column", "text", "--label-column", "label"]
    base += ["--privacy-unit", "column:user", "--unit-budgets", "400", "--mechanisms", "laplace", "--repeats", "1"]
    base += ["--vocab-size", "2000"]
    out = tmp_path / "out"
    assert main(["evaluate-utility", *base, "--output", str(out / "u")]) == 0
    assert main(["compare", *base, "--runs", "4", "--refine", "0", "--output", str(out / "c")]) == 0
    for name, report in (("u", "summary.md"), ("c", "report.md")):
        m = json.loads((out / name / "_dpspark_manifest.json").read_text())
        assert m["privacy_unit"] == {"kind": "column", "column": "user", "id_space": "user"}
        assert m["unit_counts"]["units"] == 8
        assert m["unit_counts"]["tokens_per_unit"] == {"min": per_user[0], "median": median, "max": per_user[-1]}
        assert m["token_epsilons"][0]["median_unit"] == pytest.approx(400 / median)
        assert "Privacy unit: user" in (out / name / report).read_text(encoding="utf-8")
    (row,) = pq.read_table(out / "c" / "compare.parquet").to_pylist()
    assert row["epsilon"] == 400.0 and row["token_epsilon"] == pytest.approx(400 / median)
    shutil.rmtree(out)
    capsys.readouterr()
    nulls = [None if i in (2, 7, 30) else u for i, u in enumerate(users)]
    pq.write_table(table.append_column("user", pa.array(nulls)), data)
    for command in ("evaluate-utility", "compare"):
        refused(
            capsys, tmp_path, [command, *base, "--output", str(out)], InputDataError.exit_code, "3 row(s) have no user"
        )
