"""perturb under a ``column:NAME`` unit (issue 41): every row that shares a user's id is one unit, whose tokens
share the budget E wherever the rows are (dpspark.unit_table: a count pass over keyed hashes, then each task
walks its rows). examples/reviews.parquet with a ``user_id`` (37 users, interleaved) written as three files, so
that a user's rows are in several partitions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main
from dpspark.errors import ConfigError, InputDataError
from dpspark.text import tokenize

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"
USERS = 37
FLAGS = ["--columns", "text,title", "--vocab-size", "5000", "--quiet"]


@pytest.fixture(scope="module")
def users(tmp_path_factory) -> Path:
    """The reviews with ``user_id`` = u(i mod 37), ``file`` and ``seq`` (a row's file, by path, and its place in
    it): 3 files, the last 160 rows in part-0 (the smallest file, which Spark reads last), rows 0-169 in part-2."""
    t = pq.read_table(SAMPLE)
    d = tmp_path_factory.mktemp("users") / "in"
    d.mkdir()
    for f, start in enumerate(reversed(range(0, t.num_rows, 170))):
        part = t.slice(start, 170)
        n = part.num_rows
        part = part.append_column("user_id", pa.array([f"u{(start + i) % USERS}" for i in range(n)]))
        part = part.append_column("file", pa.array([f] * n, pa.int32())).append_column("seq", pa.array(range(n)))
        pq.write_table(part, d / f"part-{f}.parquet")
    return d


def tokens_per_user(path: Path) -> dict[str, int]:
    """Each user's input tokens over text and title (dpspark's tokenizer), counted here."""
    out: dict[str, int] = {}
    for r in pq.read_table(path).to_pylist():
        n = sum(len(tokenize(r[c])[0]) for c in ("text", "title") if r[c])
        out[r["user_id"]] = out.get(r["user_id"], 0) + n
    return out


def refused(capsys, root: Path, argv: list[str], code: int, *phrases: str) -> None:
    """The CLI exits ``code`` with one error line naming ``phrases``; nothing under ``root`` changed."""
    before = {p: p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}
    assert main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(f"dpspark {argv[0]}: error: ")]
    assert len(err) == 1 and all(p in err[0] for p in phrases), err
    assert {p: p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))} == before


def release(src: Path, out: Path, *extra: str) -> dict:
    assert main(["perturb", "--input", str(src), "--output", str(out), *FLAGS, *extra]) == 0
    return json.loads((out / "_dpspark_manifest.json").read_text())


@pytest.mark.runtime
def test_a_users_rows_share_the_budget_and_the_manifest_states_it(spark, users, tmp_path):
    m = release(users, tmp_path / "o", "--privacy-unit", "column:user_id", "--unit-budget", "60")
    per_user = tokens_per_user(users)
    n = np.array(sorted(per_user.values()))
    assert m["privacy_unit"] == {"kind": "column", "column": "user_id", "id_space": "user_id"}
    assert "every row of one value of user_id" in m["adjacency"] and m["guarantee"].startswith("Per user_id value:")
    shape = m["unit_counts"]
    assert shape["units"] == USERS == len(n) and shape["tokens_per_unit"]["max"] == int(n.max())
    assert shape["tokens_per_unit"]["min"] == int(n.min())
    assert shape["token_epsilon"]["min"] == pytest.approx(60 / n.max()) and shape["token_epsilon"]["max"] == (
        pytest.approx(60 / n.min())
    )
    assert m["unit_bound"]["bound"] == pytest.approx(60 * m["unit_bound"]["diameter"])
    (entry,) = [json.loads(p.read_text()) for p in (tmp_path / "o" / "_dpspark_ledger").glob("*.json")]
    assert entry["privacy_unit"] == m["privacy_unit"] and entry["unit_tokens"] == int(n.max())
    out = pq.read_table(tmp_path / "o")
    assert out.num_rows == 500 and sorted(set(out.column("user_id").to_pylist())) == sorted(per_user)
    assert not any("u1" in (t or "").split() for t in out.column("text").to_pylist())  # ids are not text


def test_a_unit_per_row_id_is_the_document_unit_draw_for_draw(spark, users, tmp_path):
    """``column:id`` with a distinct id per row makes every row its own unit: with one seed, the same release
    as ``document``, row for row (the same per-token ε, the same draws)."""
    flags = ["--unit-budget", "40", "--seed", "5"]
    release(users, tmp_path / "doc", "--privacy-unit", "document", *flags)
    release(users, tmp_path / "col", "--privacy-unit", "column:id", *flags)
    rows = [sorted(pq.read_table(tmp_path / d).to_pylist(), key=lambda r: r["id"]) for d in ("doc", "col")]
    assert rows[0] == rows[1]


def test_a_cap_draws_each_users_first_k_tokens_across_partitions(spark, users, tmp_path):
    """``cap:K``: a user's drawn tokens are exactly min(n, K) over all their rows (three files, several tasks),
    and a user's placeholders come after their drawn tokens in the files' order (by path, then row), not in the
    order Spark packs the files into tasks (by size: part-2, the smallest, is read last, and part-0 and part-1
    in the order of their compressed text)."""
    k = 40
    unit = ["--privacy-unit", "column:user_id", "--unit-budget", "80", "--oov", "random", "--allocation", f"cap:{k}"]
    m = release(users, tmp_path / "cap", *unit)
    per_user = tokens_per_user(users)
    drawn: dict[str, list[bool]] = {}
    for (user, _), rows in _by_user_and_file(tmp_path / "cap").items():  # by user, then file, then row
        drawn.setdefault(user, []).extend(
            t != "[UNK]" for r in rows for c in ("text", "title") for t in (r[c] or "").split()
        )
    assert all(flags == sorted(flags, reverse=True) for flags in drawn.values())  # drawn, then placeholders
    assert {u: sum(flags) for u, flags in drawn.items()} == {u: min(n, k) for u, n in per_user.items()}
    assert m["allocation"]["order"] == "input files by path, rows in file order"
    assert m["unit_counts"]["tokens_over_cap"] == sum(max(n - k, 0) for n in per_user.values()) > 0
    assert m["unit_counts"]["token_epsilon"] == {"min": 2.0, "median_unit": 2.0, "max": 2.0}


def _by_user_and_file(out: Path) -> dict[tuple[str, int], list[dict]]:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in sorted(pq.read_table(out).to_pylist(), key=lambda r: (r["file"], r["seq"])):
        groups.setdefault((r["user_id"], r["file"]), []).append(r)
    return groups


def test_over_cap_refuse_counts_users_not_rows(spark, users, tmp_path, capsys):
    most = max(tokens_per_user(users).values())
    argv = ["perturb", "--input", str(users), "--output", str(tmp_path / "out"), *FLAGS]
    argv += ["--privacy-unit", "column:user_id", "--unit-budget", "80", "--allocation", "cap:300", "--over-cap"]
    over = sum(n > 300 for n in tokens_per_user(users).values())
    refused(capsys, tmp_path, [*argv, "refuse"], ConfigError.exit_code, f"{over} unit(s)", f"the longest {most:,}")


@pytest.fixture()
def odd(tmp_path_factory) -> Path:
    """Rows with null ids, and an array column."""
    d = tmp_path_factory.mktemp("odd") / "odd.parquet"
    t = pa.table(
        {
            "text": ["the cat sat", "a dog ran", "it rained", "the sea"],
            "user_id": ["a", None, "b", None],
            "tags": [["x"], ["y"], [], None],
        }
    )
    pq.write_table(t, d)
    return d


@pytest.mark.parametrize(
    "unit, code, phrases",
    [
        ("column:user_id", InputDataError.exit_code, ["2 row(s) have no user_id (null)", "WHERE user_id IS NOT NULL"]),
        ("column:customer", InputDataError.exit_code, ["the unit column 'customer'", "available columns: text"]),
        ("column:tags", InputDataError.exit_code, ["the unit column 'tags' has type array<string>", "scalar id"]),
    ],
)
def test_bad_unit_ids_are_refused_and_nothing_is_written(spark, odd, tmp_path, capsys, unit, code, phrases):
    """By the release and by privacy-risk on Spark (which reads its input as a release does)."""
    work = odd.parent
    argv = ["perturb", "--input", str(odd), "--output", str(work / "out"), "--columns", "text", "--quiet"]
    refused(capsys, work, [*argv, "--privacy-unit", unit, "--unit-budget", "10"], code, *phrases)
    risk = ["privacy-risk", "--engine", "spark", "--input", str(odd), "--output", str(work / "out"), "--text-column"]
    risk += ["text", "--vocab-size", "2000", "--quiet", "--privacy-unit", unit, "--unit-budgets", "10"]
    refused(capsys, work, risk, code, *phrases)


def test_an_input_that_changes_between_the_two_passes_stops_the_release(spark, tmp_path):
    """The ids of the count pass are not those of the release (a UDF that answers u1 for its first 40 calls,
    then u2): a task meets a person the count did not see, and the release stops, writing nothing."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    import dpspark

    calls = tmp_path / "calls"
    calls.write_bytes(b"")

    def user() -> str:
        with open(calls, "ab") as f:
            f.write(b".")
            return "u1" if f.tell() <= 40 else "u2"

    df = spark.read.parquet(str(SAMPLE)).limit(40).withColumn("user_id", F.udf(user, T.StringType())())
    df = df.coalesce(1)
    with pytest.raises(InputDataError, match="changed between the two passes of a column: unit"):
        dpspark.release(df, str(tmp_path / "o"), ["text"], privacy_unit="column:user_id", unit_budget=20.0,
                        vocab_size=5000)  # fmt: skip
    assert not (tmp_path / "o").exists()
