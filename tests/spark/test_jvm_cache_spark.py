"""The local JVM's class-data cache with a real JVM (dpspark.jvm_cache): a session's first JVM writes the
archive as it exits, the next maps it, and a damaged archive costs one restart, never the run. Fresh
processes with an empty cache directory of the test's own ($DPSPARK_JVM_CACHE_DIR)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.spark  # the JVM and the jars directory, not the pyspark API: make test only

MAGIC = (0xF00BABA8).to_bytes(4, "little")
# A session as a CLI run starts one; it prints whether its JVM mapped an archive of the cache, and counts.
SESSION = """
    import os, sys
    from dpspark.spark.session import get_session
    spark = get_session("local[1]")
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/maps") as maps:
        mapped = any(os.environ["DPSPARK_JVM_CACHE_DIR"] in line for line in maps)
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    jvm_args = " ".join(runtime.getInputArguments())
    dumps = "and dumps" if "-XX:ArchiveClassesAtExit=" in jvm_args else "only"
    print("mapped" if mapped else "not mapped", dumps, spark.range(1000).count())
"""


def _session(cache, cwd) -> str:
    drop = ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS", "SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT")
    drop += ("PYSPARK_GATEWAY_SECRET",)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYSPARK_PYTHON=sys.executable, DPSPARK_JVM_CACHE_DIR=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SESSION)], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _dumped(cache):
    """The archive the exited JVM wrote (it writes as it exits, after the Python process has ended)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for part in cache.glob("*.part"):
            with part.open("rb") as f:
                if f.read(4) == MAGIC:
                    time.sleep(1)
                    then = time.time() - 60  # the settle time, passed
                    os.utime(part, (then, then))
                    return part
        time.sleep(0.5)
    raise AssertionError(f"no archive written in {cache}: {sorted(p.name for p in cache.iterdir())}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_the_first_jvm_writes_the_archive_the_next_maps_it_and_a_damaged_one_is_dropped(tmp_path):
    cache, cwd = tmp_path / "jvm", tmp_path / "cwd"
    cwd.mkdir()
    assert _session(cache, cwd) == "not mapped and dumps 1000"
    part = _dumped(cache)
    assert part.stat().st_size > 10_000_000

    assert _session(cache, cwd) == "mapped only 1000"
    (archive,) = cache.glob("*.jsa")

    # Cut short (a disk that lost its end): HotSpot 17 dies mapping it. The run starts its JVM again without
    # it, in the same run, and that JVM writes a new one as it exits.
    with archive.open("r+b") as f:
        f.truncate(archive.stat().st_size // 2)
    assert _session(cache, cwd) == "not mapped and dumps 1000"
    assert not archive.exists()
    assert list(cwd.iterdir()) == []  # no crash log in the user's directory
