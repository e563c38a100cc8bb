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
