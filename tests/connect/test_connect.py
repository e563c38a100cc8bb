"""The perturb job through Spark Connect (no SparkContext), against a local server on 127.0.0.1.

The server is the pip-installed pyspark's SparkConnectServer, started by the fixture
and stopped by process group even when a test fails.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpspark.mechanisms import REGISTRY
from dpspark.spark.session import local_jvm_flags

# runtime: every Connect test but compare's and the notebooks', which run once, in make test (pyspark 3.5's
# clients get evaluate-utility's refusal, which the runtime matrix tests; the notebooks' runner is per runtime
# in tests/notebooks/). One worker runs them all, beside the classic runs they compare with.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("connect")]

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    import pyspark

    # pyspark 3.5's wheel has no Connect server (its jar comes from Maven, out of reach here):
    # the runtime matrix then serves this client from a newer pyspark's server.
    home = Path(os.environ.get("DPSPARK_CONNECT_SPARK_HOME") or Path(pyspark.__file__).parent)
    port = free_port()
    logs = tmp_path_factory.mktemp("connect")
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "dpspark-connect-test",
        "--master",
        "local[2]",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",  # as the classic session's (tests/conftest.py): the tests' tables are small
        "spark.sql.shuffle.partitions=4",
        # The JIT and collector of the local JVM dpspark starts (C1 only; the serial collector on a small
        # machine): the server's own C2 compiles and G1 threads took the cores its tests share.
        "--driver-java-options",
        local_jvm_flags(),
        "spark-internal",
    ]
    with open(logs / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=logs, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"Spark Connect server exited: {(logs / 'server.log').read_text()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError("Spark Connect server did not start within 120 s")
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


# The client interpreter: it reads one job per line on stdin ({"code", "out", "err"}), runs the code with
# file descriptors 1 and 2 on the job's two files, and answers {"rc"} on the reply pipe (argv[1]).
CLIENT = r"""
import json, os, sys, traceback
reply = os.fdopen(int(sys.argv[1]), "w")
saved = os.dup(1), os.dup(2)
for line in sys.stdin:
    job = json.loads(line)
    sys.stdout.flush(), sys.stderr.flush()
    with open(job["out"], "wb") as out, open(job["err"], "wb") as err:
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        try:
            exec(compile(job["code"], "<job>", "exec"), {"__name__": "__main__"})
            rc = 0
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, (int, type(None))):
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            rc = 1
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
    reply.write(json.dumps({"rc": rc}) + "\n")
    reply.flush()
"""


class Client:
    """One Spark Connect client interpreter for the module's jobs, each in its own namespace with its own
    stdout and stderr: a Connect client switches pyspark's session builder into Connect mode for the whole
    process, which must not leak into the classic local[2] session the other test modules share, and one
    interpreter for all of them starts and imports pyspark, dpspark and the embeddings once, not per job.
    It starts again when a job ended it (a crash, a timeout)."""

    def __init__(self, directory: Path):
        self.directory, self.proc, self.jobs = directory, None, 0

    def _start(self) -> None:
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(write)], stdin=subprocess.PIPE, pass_fds=(write,), text=True
        )
        os.close(write)
        self.replies = os.fdopen(read, "r")

    def run(self, code: str, timeout: float = 600) -> subprocess.CompletedProcess:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.jobs += 1
        out, err = (self.directory / f"job{self.jobs}.{name}" for name in ("out", "err"))
        self.proc.stdin.write(json.dumps({"code": code, "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        line = self.replies.readline() if ready else ""
        if not line:  # the job ended the interpreter, or ran past the timeout
            self.close()
            why = "ran past the timeout" if not ready else "died"
            raise AssertionError(f"the Connect client {why}: {err.read_text(errors='replace')[-3000:]}")
        rc = json.loads(line)["rc"]
        text = (p.read_text(encoding="utf-8", errors="replace") for p in (out, err))
        return subprocess.CompletedProcess(["<client>"], rc, next(text), next(text))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc.stdin.close()
            self.replies.close()
            self.proc = None


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    started = Client(tmp_path_factory.mktemp("client"))
    try:
        yield started
    finally:
        started.close()


@pytest.mark.runtime
def test_perturb_job_through_connect(connect_url, client, tmp_path, check_faithful):
    out = tmp_path / "o"
    args = [
        "perturb",
        "--input",
        str(SAMPLE),
        "--output",
        str(out),
        "--columns",
        "text,title",
        "--epsilon",
        "10",
        "--mechanism",
        "tem",
        "--vocab-size",
        "5000",
        "--remote",
        connect_url,
        "--quiet",
    ]
    done = client.run(f"import sys; from dpspark.cli import main; sys.exit(main({args!r}))")
    assert done.returncode == 0, done.stderr[-3000:]
    check_faithful(out)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["spark"]["master"] == "spark connect" and m["counts"]["rows"] == 500
    assert m["mechanism"] == "tem" and m["guarantee_type"] == "metric"


@pytest.mark.runtime
def test_api_through_connect_is_stable_within_a_run(connect_url, client):
    code = f"""
import json
from pyspark.sql import SparkSession
import dpspark
session = SparkSession.builder.remote({connect_url!r}).getOrCreate()
df = session.read.parquet({str(SAMPLE)!r})
out = dpspark.perturb_text(df, columns=["text"], epsilon=10, vocab_size=5000)
first = {{r["id"]: r["text"] for r in out.collect()}}
second = {{r["id"]: r["text"] for r in out.collect()}}
raw = {{r["id"]: r["text"] for r in df.collect()}}
print(json.dumps({{"same": first == second, "changed": sum(1 for k, t in raw.items() if t and first[k] != t.lower()),
                  "schema_same": out.schema == df.schema}}))
"""
    done = client.run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same"] and result["schema_same"] and result["changed"] > 400


@pytest.mark.runtime
def test_privacy_stats_through_connect_equals_classic(connect_url, client, classic, stats_every_mechanism, tmp_path):
    """No SparkContext on Connect: the DataFrame twin of reduceByKey gives the classic run's table for a seed
    (tests/spark/test_stats_job.py runs it), for a grid of every mechanism (the noise family and the
    exponential one, with its exact figures)."""
    names = [n for n in REGISTRY if n != "truncated-gumbel"]
    args = [*stats_every_mechanism, "--output", str(tmp_path / "connect"), "--remote", connect_url]
    done = client.run(f"import sys; from dpspark.cli import main; sys.exit(main({args!r}))")
    assert done.returncode == 0, done.stderr[-3000:]
    import pyarrow.parquet as pq

    connect, classic_table = (
        pq.read_table(d / "per_word.parquet") for d in (tmp_path / "connect", classic(stats_every_mechanism))
    )
    # The draws are keyed: the Monte Carlo columns are equal to the bit. The exact E[Nw], E[Sw] are
    # float64 sums over a GEMM row, whose last bits follow the driver's BLAS threads: equal to 1e-12.
    exact = ["exact_nw", "exact_sw"]
    assert connect.num_rows == 2 * len(names) * 30
    assert connect.drop(exact).equals(classic_table.drop(exact))
    for column in exact:
        a, b = (np.array(t.column(column).to_pylist(), dtype=float) for t in (connect, classic_table))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert set(connect.column("mechanism").to_pylist()) == set(names)
    m = json.loads((tmp_path / "connect" / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["draws"] == 2 * len(names) * 30 * 12


@pytest.mark.runtime
def test_release_vectors_and_calibrate_through_connect(connect_url, client, tmp_path):
    vectors, calibrated = tmp_path / "v", tmp_path / "c"
    runs = [
        ["release-vectors", "--input", str(SAMPLE), "--output", str(vectors), "--column", "text", "--epsilon", "5"],
        # calibrate runs the statistics itself when given no --stats directory
        ["calibrate", "--output", str(calibrated), "--epsilons", "1,10,40", "--lambdas", "1", "--words", "20"],
    ]
    runs[1] += ["--runs", "10", "--vocab-size", "2000", "--max-nw-fraction", "0.5"]
    code = "import sys; from dpspark.cli import main\n" + "".join(
        f"assert main({[*args, '--remote', connect_url, '--quiet']!r}) == 0\n" for args in runs
    )
    done = client.run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    import pyarrow.parquet as pq

    released = pq.read_table(vectors)
    assert released.num_rows == 500 and {len(v) for v in released.column("text").to_pylist() if v} == {51}
    m = json.loads((vectors / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["spark"]["master"] == "spark connect"
    assert json.loads((calibrated / "_dpspark_manifest.json").read_text())["status"] == "succeeded"


def cli_through_connect(
    args: list[str], connect_url: str, client: Client, expect: int = 0
) -> subprocess.CompletedProcess:
    args = [*args, "--remote", connect_url]
    done = client.run(f"import sys; from dpspark.cli import main; sys.exit(main({args!r}))")
    assert done.returncode == expect, done.stderr[-3000:]
    return done


@pytest.mark.runtime
def test_privacy_risk_through_connect_equals_classic(connect_url, client, classic, risk_on_the_sample, tmp_path):
    """No SparkContext on Connect: the statistics' DataFrame counts and the DataFrame attack give the
    classic run's shares (tests/spark/test_risk.py runs it) to the bit for a seed (integer sums: no float
    summation order to differ)."""
    cli_through_connect([*risk_on_the_sample, "--output", str(tmp_path / "connect")], connect_url, client)
    import pyarrow.parquet as pq

    connect = pq.read_table(tmp_path / "connect" / "risk.parquet")
    assert connect.num_rows == 2 and connect.equals(pq.read_table(classic(risk_on_the_sample) / "risk.parquet"))
    m = json.loads((tmp_path / "connect" / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["corpus"]["words_measured"] == 60 and m["draws"] == 2 * 60 * 4


@pytest.mark.runtime
def test_evaluate_utility_through_connect_equals_classic(connect_url, client, classic, utility_on_sms120, tmp_path):
    """evaluate-utility on Spark Connect, every client version (no pyspark.ml: the classifier is dpspark's
    engine): the same split, the same noise and the same fit give the classic run's metrics
    (tests/spark/test_utility.py runs it) to the bit for a seed. The 120 rows are one task on both paths."""
    cli_through_connect([*utility_on_sms120, "--output", str(tmp_path / "connect")], connect_url, client)
    import pyarrow.parquet as pq

    connect = pq.read_table(tmp_path / "connect" / "results.parquet")
    assert connect.num_rows == 2  # the baseline and test-time rows
    assert connect.equals(pq.read_table(classic(utility_on_sms120) / "results.parquet"))
    m = json.loads((tmp_path / "connect" / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["rows"]["train"] + m["rows"]["test"] == 120


def test_compare_through_connect_equals_classic(connect_url, client, classic, compare_on_sms120, tmp_path):
    """compare's whole job on Connect (the shipped bundles, the perturbations, the classifier, the privacy-risk engine,
    the text metrics' sums): for a seed, compare.parquet's figures equal the classic run's
    (tests/spark/test_compare.py runs it), to the bit but the seconds each setting took. Two mechanisms, one
    ε, the 120 rows (one task, as above). Run once, in make test (not marked runtime): evaluate-utility, tested
    per runtime above, runs the same classifier and transform."""
    cli_through_connect([*compare_on_sms120, "--output", str(tmp_path / "connect")], connect_url, client)
    import pyarrow.parquet as pq

    ours, theirs = tmp_path / "connect", classic(compare_on_sms120)
    connect, classic_table = (pq.read_table(d / "compare.parquet") for d in (ours, theirs))
    assert connect.num_rows == 2 and connect.drop(["time_s"]).equals(classic_table.drop(["time_s"]))
    equal = (pq.read_table(d / "equal_privacy.parquet") for d in (ours, theirs))
    assert next(equal).equals(next(equal))
    m, c = (json.loads((d / "_dpspark_manifest.json").read_text()) for d in (ours, theirs))
    assert m["status"] == "succeeded" and m["mechanisms"] == ["laplace", "tem"]
    assert m["recommended"] == c["recommended"] and m["corpus"] == c["corpus"] and m["baseline"] == c["baseline"]
    for name in m["files"]:
        assert (ours / name).stat().st_size > 0, name
    assert "## Recommendation" in (ours / "report.md").read_text(encoding="utf-8")


@pytest.mark.runtime
def test_embedding_model_through_connect(connect_url, client, sms120, tmp_path):
    """The mean-embedding features (mapInArrow over the shipped bundle) on Connect, and a model fitted on
    perturbed text (train-time)."""
    args = ["evaluate-utility", "--input", sms120, "--text-column", "text", "--label-column", "label"]
    args += ["--model", "embedding-logreg", "--mode", "train-time", "--epsilons", "1000", "--lambdas", "1"]
    args += ["--repeats", "1", "--vocab-size", "2000", "--seed", "2", "--quiet"]
    cli_through_connect([*args, "--output", str(tmp_path / "e")], connect_url, client)
    import pyarrow.parquet as pq

    rows = {r["mode"]: r for r in pq.read_table(tmp_path / "e" / "results.parquet").to_pylist()}
    assert set(rows) == {"baseline", "train-time"}
    assert rows["baseline"]["auc"] > 0.8 and rows["train-time"]["auc"] > 0.8  # ε = 1000: little noise


def test_notebooks_through_connect(connect_url, client, sms120, tmp_path):
    """Serverless and standard access mode: every notebook runs on a Spark Connect session, where
    there is no SparkContext and no RDD (the runner gives no ``sc`` either), and publishes through
    the library's release calls."""
    notebooks = SAMPLE.parents[1] / "notebooks"
    runs = {
        "perturb_text.py": {"input": str(SAMPLE), "output": str(tmp_path / "text"), "epsilon": "10"},
        "privacy_stats.py": {
            **{"output": str(tmp_path / "stats"), "runs": "6", "words": "20"},
            **{"epsilons": "5,10", "lambdas": "0,1", "vocab_size": "5000"},
        },
        "release_vectors.py": {"input": str(SAMPLE), "output": str(tmp_path / "vectors"), "epsilon": "5"},
        "privacy_utility.py": {
            **{"input": sms120, "output": str(tmp_path / "pu"), "epsilons": "50", "lambdas": "1", "repeats": "1"},
            **{"vocab_size": "500", "runs": "4", "max_utility_loss": "0.05", "max_reidentification": "0.99"},
        },
    }
    code = f"""
import json
from pyspark.sql import SparkSession
from dpspark.notebook_runner import run_notebook
spark = SparkSession.builder.remote({connect_url!r}).getOrCreate()
shown = {{}}
for name, widgets in {runs!r}.items():
    result = run_notebook({str(notebooks)!r} + "/" + name, widgets, spark=spark)
    assert "sc" not in result["namespace"]
    shown[name] = len(result["displayed"])
print(json.dumps(shown))
"""
    done = client.run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {name: 3 if name == "privacy_utility.py" else 2 for name in runs}
    import pyarrow.parquet as pq

    text = json.loads((tmp_path / "text" / "_dpspark_manifest.json").read_text())
    assert text["status"] == "succeeded" and text["spark"]["master"] == "spark connect"
    assert text["counts"]["rows"] == 500
    assert len(list((tmp_path / "text" / "_dpspark_ledger").glob("*.json"))) == 1  # dpspark.release's ledger entry
    assert pq.read_table(tmp_path / "stats" / "per_word.parquet").num_rows == 2 * 2 * 20  # ε {5, 10} × λ {0, 1}
    vectors = json.loads((tmp_path / "vectors" / "_dpspark_manifest.json").read_text())
    assert vectors["status"] == "succeeded" and vectors["spark"]["master"] == "spark connect"
    if "privacy_utility.py" in runs:
        for report in ("utility", "risk"):
            manifest = json.loads((tmp_path / "pu" / report / "_dpspark_manifest.json").read_text())
            assert manifest["status"] == "succeeded"
        assert (tmp_path / "pu" / "calibration" / "frontier.csv").is_file()
