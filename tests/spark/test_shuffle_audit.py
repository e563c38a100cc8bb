"""The shuffle audit (docs/shuffles.md): in a session that does NOT encrypt local I/O, no raw token of
the corpus reaches ``spark.local.dir``, during or after perturb with ``vocab_from_corpus``, SanText+
with ``sensitive_from_corpus``, privacy-risk, compare and evaluate-utility.

The session fixture of tests/conftest.py is dpspark's own, which encrypts local I/O; one JVM holds one
SparkContext, so the unencrypted session runs in a subprocess of its own (this file run as a script):
a user's ``SparkSession.builder`` session with a ``spark.local.dir`` of its own and compression off
(shuffle, spill, broadcast and RDD blocks), so any raw token written there is there byte for byte. A
watcher reads every file under that directory every few milliseconds while each command runs, and once
more after it. The control: a plain ``groupBy`` of the corpus's tokens in the same session, last, leaves
the marker there (the scan sees what a shuffle writes, and the session does not encrypt it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MARKER = "zqxvwmarkerword"  # in no embedding: it can only come from the corpus


def _scan(root: Path, hits: set[str]) -> None:
    needle = MARKER.encode()
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                hits.add(str(path.relative_to(root)))
        except OSError:  # removed while being read
            continue


def _watch(root: Path, fn) -> tuple:  # noqa: ANN001
    """Run ``fn()`` while scanning ``root`` continuously: its value, and the files that ever held the marker."""
    hits: set[str] = set()
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            _scan(root, hits)
            done.wait(0.005)

    watcher = threading.Thread(target=loop, daemon=True)
    watcher.start()
    try:
        value = fn()
    finally:
        done.set()
        watcher.join()
    _scan(root, hits)
    return value, hits


def _corpus(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpspark.evaluation.datasets import sms_spam_table

    table = sms_spam_table(rows=300)
    texts = [f"{t} {MARKER}" if i % 5 == 0 else t for i, t in enumerate(table.column("text").to_pylist())]
    pq.write_table(table.set_column(1, "text", pa.array(texts, pa.string())), path)


def run(work: Path) -> dict:
    """The subprocess: every command in one unencrypted session; what the watcher saw, per command."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from dpspark.cli import main
    from dpspark.spark.io import encrypts_local_io

    local_dir = work / "spark-local"
    local_dir.mkdir()
    corpus = work / "corpus.parquet"
    _corpus(corpus)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.local.dir", str(local_dir))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.shuffle.compress", "false")
        .config("spark.shuffle.spill.compress", "false")
        .config("spark.broadcast.compress", "false")
        .config("spark.rdd.compress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    data = ["--input", str(corpus)]
    labelled = [*data, "--text-column", "text", "--label-column", "label", "--vocab-size", "2000", "--quiet"]
    commands = {
        "perturb vocab_from_corpus": [
            "perturb", *data, "--columns", "text", "--epsilon", "10", "--vocab-from-corpus", "--vocab-size", "300",
        ],
        "perturb santext-plus sensitive_from_corpus": [
            "perturb", *data, "--columns", "text", "--mechanism", "santext-plus", "--epsilon", "3",
            "--sensitive-from-corpus", "--vocab-size", "2000",
        ],
        "privacy-risk": [
            "privacy-risk", *data, "--text-column", "text", "--mechanisms", "laplace", "--epsilons", "10",
            "--runs", "4", "--vocab-size", "2000", "--max-words", "50",
        ],
        "evaluate-utility": [
            "evaluate-utility", *labelled, "--mechanisms", "laplace", "--epsilons", "10", "--repeats", "1",
        ],
        "compare": [
            "compare", *labelled, "--mechanisms", "laplace", "--epsilons", "10", "--repeats", "1", "--runs", "4",
            "--mldp-words", "10", "--mldp-trials", "20", "--refine", "1",
        ],
    }  # fmt: skip
    result: dict = {"encrypted": encrypts_local_io(spark), "codes": {}, "hits": {}}
    seen: set[str] = set()  # files already reported: each command is charged only with its own
    for k, (name, argv) in enumerate(commands.items()):
        out = ["--output", str(work / f"out{k}")]
        result["codes"][name], hits = _watch(local_dir, partial(main, [*argv, *out]))
        result["hits"][name] = sorted(hits - seen)
        seen |= hits
    tokens = spark.read.parquet(str(corpus)).select(F.explode(F.split("text", " ")).alias("t"))
    _, hits = _watch(local_dir, tokens.groupBy("t").count().collect)
    result["control"] = sorted(hits - seen)
    spark.stop()
    return result


def test_no_raw_token_reaches_spark_local_dir_in_an_unencrypted_session(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_DIRS", "PYSPARK_SUBMIT_ARGS")}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["encrypted"] is False
    assert result["codes"] == dict.fromkeys(result["hits"], 0)
    assert result["hits"] == dict.fromkeys(result["hits"], [])  # no file under spark.local.dir held the marker
    assert result["control"]  # while a plain groupBy of the tokens leaves it there, in plain text


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")  # the commands' opt-in warnings (corpus vocabulary, ...) are expected
    work = Path(sys.argv[1])
    (work / "result.json").write_text(json.dumps(run(work)))
