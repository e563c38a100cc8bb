"""More refusals and fixes on a real local[2] session: perturb_text and release settings, a
dotted column with a corpus vocabulary, and --remote without the Spark Connect client."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.cli import main
from dpspark.errors import ConfigError, PrivacyWarning

pytestmark = pytest.mark.spark

REVIEWS = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path) -> Path:
    """A copy of the example input in a directory of its own."""
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(REVIEWS, d / "reviews.parquet")
    return d


@pytest.mark.parametrize(
    "settings",
    [{"output": "out"}, {"partition": "date=2026-11-21"}, {"mode": "overwrite"}, {"output": "out", "mode": "error"}],
)
def test_perturb_text_refuses_release_settings(spark, tmp_path, data, settings):
    before = snapshot(tmp_path)
    df = spark.read.parquet(str(data / "reviews.parquet"))
    settings = {k: str(tmp_path / v) if k == "output" else v for k, v in settings.items()}
    with pytest.raises(ConfigError) as refused:
        dpspark.perturb_text(df, "text", 1.0, **settings)
    message = str(refused.value)
    assert "call dpspark.release(df, output=" in message
    assert f"takes no {', '.join(settings)}:" in message
    assert snapshot(tmp_path) == before  # nothing written, the input unchanged


@pytest.mark.runtime
def test_vocabulary_from_corpus_with_a_dotted_column(spark, tmp_path, glove):
    pool = [w for w in glove.words[200:600] if w.isalpha()][:120]
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(pool, 12)) for _ in range(200)]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(len(corpus))), "a.b": corpus}), src)
    before = src.read_bytes()
    out = tmp_path / "o"
    args = ["perturb", "--input", str(src), "--output", str(out), "--columns", "a.b", "--epsilon", "5"]
    with pytest.warns(PrivacyWarning, match="derived from the private corpus"):
        assert main([*args, "--vocab-from-corpus", "--vocab-size", "80"]) == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["id"] for r in sorted(rows, key=lambda r: r["id"])] == list(range(len(corpus)))
    words = {w for r in rows for w in r["a.b"].split()}
    assert words and words <= set(pool)  # the output vocabulary came from the dotted column
    assert src.read_bytes() == before


@pytest.mark.runtime
def test_remote_without_the_connect_client(tmp_path, data):
    # A process where the Connect client's packages cannot be imported (as without dpspark[connect]).
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    argv = ["perturb", "--input", str(data / "reviews.parquet"), "--output", str(out), "--columns", "text"]
    argv += ["--epsilon", "1", "--remote", "sc://localhost:15002", "--quiet"]
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.modules["grpc"] = None  # import grpc fails, as when grpcio is not installed
            from dpspark.cli import main
            sys.exit(main({argv!r}))
            """
        )
    )
    before = snapshot(tmp_path)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == ConfigError.exit_code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one sentence, no traceback
    assert lines[0].startswith("dpspark perturb: error: remote sc://localhost:15002 needs the Spark Connect client")
    assert "pip install 'dpspark[connect]'" in lines[0]
    assert not out.exists() and snapshot(tmp_path) == before


@pytest.mark.runtime
def test_risk_token_counts_with_a_dotted_column(spark):
    """privacy-risk counts the corpus's tokens through map_in_arrow: a dotted name works."""
    from dpspark.spark.transform import token_counts

    texts = ["the city is quiet", "the dog", None]
    plain = spark.createDataFrame([(t,) for t in texts], "text string")
    dotted = plain.withColumnRenamed("text", "body.text")
    assert (
        token_counts(dotted, "body.text")
        == token_counts(plain, "text")
        == {"the": 2, "city": 1, "is": 1, "quiet": 1, "dog": 1}
    )
