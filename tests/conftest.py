"""Shared fixtures: the default embeddings (loaded once) and one local[2] Spark session."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpspark.embeddings import load_default

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "reviews.parquet"

# A test that runs once by what it means (a statistical property, an end-to-end grid, the README's
# examples) is never also one of the runtime matrix's (CONTRIBUTING.md, "Where a test runs").
ONCE = {"statistical", "heavy", "readme"}


def share_module_fixtures(item: pytest.Item) -> None:
    """A Spark or slow test that uses a fixture built once per module (``scope="module"``: a compare run of
    seconds or a minute, say) joins its module's xdist group, unless it is in a group already: under ``--dist
    loadgroup`` those tests then run on one worker, which builds the fixture once (two workers would each build
    it). The quick numpy modules' fixtures take a second or less: their tests stay free to spread."""
    heavy = item.get_closest_marker("spark") is not None or item.get_closest_marker("slow") is not None
    if not heavy or item.get_closest_marker("xdist_group") is not None:
        return
    defs = getattr(item, "_fixtureinfo", None)
    if defs is not None and any(d[-1].scope == "module" for d in defs.name2fixturedefs.values() if d):
        item.add_marker(pytest.mark.xdist_group(f"module-fixtures:{item.module.__name__}"))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        share_module_fixtures(item)
        marks = {m.name for m in item.iter_markers()}
        if "runtime" in marks and marks & ONCE:
            raise pytest.UsageError(
                f"{item.nodeid} is marked runtime and {', '.join(sorted(marks & ONCE))}: a statistical, heavy "
                "or readme test runs once, in make test; drop one of the marks (CONTRIBUTING.md)"
            )
    # The modules holding a slow test first (whole modules, so module fixtures are built once; otherwise the
    # collection order): pytest-xdist hands out tests in this order, and a minutes-long test handed out last
    # leaves the other workers idle while it runs.
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)


@pytest.fixture(scope="session")
def glove():
    return load_default()


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A spark.local.dir of the session's own, so tests can look at what Spark writes there.
    os.environ["SPARK_LOCAL_DIRS"] = tempfile.mkdtemp(prefix="dpspark-test-spark-local-")
    # Tables of the built-in catalog (tests/spark/test_tables.py) live in a warehouse of the session's own
    # (a static setting: it must reach the JVM before the session starts).
    warehouse = tempfile.mkdtemp(prefix="dpspark-test-warehouse-")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--conf spark.sql.warehouse.dir={warehouse} " + os.environ.get(
        "PYSPARK_SUBMIT_ARGS", "pyspark-shell"
    )
    from dpspark.spark.session import get_session

    session = get_session("local[2]", batch_rows=1000)
    session.sparkContext.setLogLevel("ERROR")
    # Four shuffle partitions, not Spark's 200: the tests' tables are small, and each of 200 tasks costs more
    # than its rows (tests/spark/test_local_equals_spark.py, 148 s -> 131 s). Still more than the 2 cores.
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def check_faithful(glove):
    """The output checks of a perturb run over examples/reviews.parquet (columns text and
    title, vocabulary of 5,000 words), shared by the classic and the Spark Connect tests."""

    def check(out: Path) -> None:
        src, dst = pq.read_table(SAMPLE), pq.read_table(out)
        assert dst.num_rows == src.num_rows and dst.schema.names == src.schema.names
        assert [f.type for f in dst.schema] == [f.type for f in src.schema]
        before = {r["id"]: r for r in src.to_pylist()}
        after = {r["id"]: r for r in dst.to_pylist()}
        assert before.keys() == after.keys()
        vocab = set(glove.words[:5000]) | {"[UNK]"}
        for i, row in before.items():
            new = after[i]
            # Other columns bit-identical (floats compared by their bytes).
            assert new["rating"] == row["rating"]
            assert np.float64(new["helpful"]).tobytes() == np.float64(row["helpful"]).tobytes()
            for col in ("text", "title"):
                if row[col] is None:
                    assert new[col] is None
                elif row[col] == "":
                    assert new[col] == ""
                else:
                    assert set(new[col].split()) <= vocab
        texts = [i for i, r in before.items() if r["text"]]
        changed = sum(after[i]["text"] != before[i]["text"].lower() for i in texts)
        assert changed > 0.9 * len(texts)

    return check


# --- each command's classic run, once per session --------------------------------------------------------
# The Spark tests check these runs end to end (marked runtime), and the Spark Connect tests compare their own
# run of the same command with them (tests/connect/test_connect.py): each command runs once on classic Spark,
# not once per test. The two share an xdist_group ("connect"), so under `make test -n` they meet in one worker.


@pytest.fixture(scope="session")
def classic(spark, tmp_path_factory):
    """``classic(args)``: the output directory of ``dpspark <args> --output DIR`` run in this process's
    local[2] session, run once per distinct argument list (the arguments carry --quiet and --seed)."""
    from dpspark.cli import main

    done: dict[tuple[str, ...], Path] = {}

    def run(args: list[str]) -> Path:
        key = tuple(args)
        if key not in done:
            out = tmp_path_factory.mktemp("classic") / args[0]
            assert main([*args, "--output", str(out)]) == 0
            done[key] = out
        return done[key]

    return run


@pytest.fixture(scope="session")
def sms120(tmp_path_factory):
    """The first 120 SMS messages (ham and spam) as a labelled Parquet file."""
    from dpspark.evaluation.datasets import sms_spam

    return sms_spam(tmp_path_factory.mktemp("sms120"), rows=120)


@pytest.fixture(scope="session")
def stats_every_mechanism() -> list[str]:
    """privacy-stats over every mechanism that takes ε ≤ 10 (Truncated Gumbel refuses ε below ≈ 57 on 2,000
    words), the noise family and the exponential one with its exact figures."""
    from dpspark.mechanisms import REGISTRY

    names = [n for n in REGISTRY if n != "truncated-gumbel"]
    args = ["privacy-stats", "--epsilons", "2,10", "--mechanisms", ",".join(names), "--grid", "lambda=1"]
    return [*args, "--vocab-size", "2000", "--words", "30", "--runs", "12", "--seed", "3", "--quiet"]


@pytest.fixture(scope="session")
def risk_on_the_sample(tmp_path_factory) -> list[str]:
    """privacy-risk on the shipped sample with a list of sensitive words, ε 5 and 20."""
    sensitive = tmp_path_factory.mktemp("sensitive") / "sensitive.txt"
    sensitive.write_text("springfield\ntom\nbaker\n", encoding="utf-8")
    args = ["privacy-risk", "--input", str(SAMPLE), "--text-column", "text", "--epsilons", "5,20", "--lambdas", "1"]
    args += ["--runs", "4", "--vocab-size", "2000", "--max-words", "60", "--sensitive-words", str(sensitive)]
    return [*args, "--seed", "5", "--quiet"]


@pytest.fixture(scope="session")
def utility_on_sms120(sms120) -> list[str]:
    """evaluate-utility (test-time, ε = 10) on the 120 SMS messages: one task, so the blocks' sums have one order."""
    args = ["evaluate-utility", "--input", sms120, "--text-column", "text", "--label-column", "label"]
    args += ["--mode", "test-time", "--epsilons", "10", "--lambdas", "1", "--repeats", "1", "--vocab-size", "2000"]
    return [*args, "--seed", "2", "--quiet"]


@pytest.fixture(scope="session")
def compare_on_sms120(sms120) -> list[str]:
    """compare over laplace and tem at ε = 10 on the 120 SMS messages."""
    args = ["compare", "--input", sms120, "--text-column", "text", "--label-column", "label"]
    args += ["--mechanisms", "laplace,tem", "--epsilons", "10", "--vocab-size", "2000", "--repeats", "1"]
    args += ["--runs", "4", "--mldp-words", "5", "--mldp-trials", "10", "--refine", "0", "--examples", "1"]
    return [*args, "--seed", "4", "--quiet"]
