"""The local JVM's class-data cache (dpspark.jvm_cache), without a JVM: which options a start gets, when a
finished dump is adopted, which directories are trusted, and what is kept. A Java home and a Spark home of
this test's own ($JAVA_HOME, $SPARK_HOME): a ``release`` file and a few jars."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from dpspark import jvm_cache
from dpspark.config import PerturbConfig
from dpspark.prepare import local_writes

BASE = "-XX:TieredStopAtLevel=1"
MAGIC = (0xF00BABA8).to_bytes(4, "little")


@pytest.fixture
def homes(tmp_path, monkeypatch):
    java = tmp_path / "jdk"
    (java / "bin").mkdir(parents=True)
    (java / "bin" / "java").write_text("#!/bin/sh\n")
    (java / "release").write_text('JAVA_VERSION="17.0.15"\n')
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    for name in ("spark-core_2.13-4.0.0.jar", "scala-library-2.13.jar"):
        (spark / "jars" / name).write_bytes(b"PK" + name.encode())
    cache = tmp_path / "cache"
    monkeypatch.setenv("JAVA_HOME", str(java))
    monkeypatch.setenv("SPARK_HOME", str(spark))
    monkeypatch.setenv(jvm_cache.DIR_ENV, str(cache))
    for name in (jvm_cache.SWITCH, "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    return java, spark, cache


def _dump_path(flags: str):
    m = re.fullmatch(r"-XX:ArchiveClassesAtExit=(\S+\.part) -Xlog:cds=off -Xlog:cds\+dynamic=off", flags)
    assert m, flags
    return Path(m.group(1))


def _finish(part, age_s=60):
    """What a JVM leaves when its dump is over: the header (magic first) written last, some time ago."""
    part.write_bytes(MAGIC + b"\0" * 1000)
    then = time.time() - age_s
    os.utime(part, (then, then))


def test_a_first_start_dumps_to_a_name_of_its_own_in_a_private_directory(homes):
    _, _, cache = homes
    first, second = jvm_cache.flags(BASE), jvm_cache.flags(BASE)
    assert _dump_path(first).parent == cache and _dump_path(first) != _dump_path(second)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert not list(cache.iterdir())  # the JVM writes the file as it exits, not before


def test_a_finished_dump_is_adopted_and_mapped_checked(homes):
    _, _, cache = homes
    part = _dump_path(jvm_cache.flags(BASE))
    other = _dump_path(jvm_cache.flags(BASE))  # a second first run beside it, that dumped too
    _finish(part)
    _finish(other)
    flags = jvm_cache.flags(BASE)
    (archive,) = cache.glob("spark-*.jsa")
    assert flags == (
        f"-XX:SharedArchiveFile={archive} -XX:+VerifySharedSpaces -XX:ErrorFile={cache}/hs_err_pid%p.log "
        "-Xlog:cds=off -Xlog:cds+dynamic=off"
    )
    assert archive.name == re.sub(r"\..*", ".jsa", part.name)
    assert not list(cache.glob("*.part"))  # one kept, the other dropped
    assert jvm_cache.flags(BASE) == flags  # and used from then on
    # JVMs that started before the archive was there write one too as they exit: dropped once finished.
    done, settling = (archive.with_name(f"{archive.stem}.{n}.part") for n in ("9-ab", "10-cd"))
    _finish(done)
    _finish(settling, age_s=0)  # its JVM may still be writing: left for now
    jvm_cache.flags(BASE + " -Dother")  # any start tidies, one that writes an archive of its own too
    assert not done.exists() and settling.exists()


@pytest.mark.parametrize("state", ["no header yet", "still being written"])
def test_an_unfinished_dump_is_not_adopted(homes, state):
    _, _, cache = homes
    part = _dump_path(jvm_cache.flags(BASE))
    if state == "no header yet":  # a JVM killed while it wrote the regions: the header is still blank
        part.write_bytes(b"\0" * 1004)
        then = time.time() - 60
        os.utime(part, (then, then))
    else:
        _finish(part, age_s=0)
    assert "ArchiveClassesAtExit" in jvm_cache.flags(BASE) and not list(cache.glob("*.jsa"))


def test_each_install_java_and_flag_set_has_its_own_archive(homes, monkeypatch):
    java, spark, cache = homes
    _finish(_dump_path(jvm_cache.flags(BASE)))
    mapped = jvm_cache.flags(BASE)
    assert "SharedArchiveFile" in mapped
    assert "ArchiveClassesAtExit" in jvm_cache.flags(BASE + " -XX:+UseSerialGC")
    (spark / "jars" / "delta-spark.jar").write_bytes(b"PK")
    assert "ArchiveClassesAtExit" in jvm_cache.flags(BASE)
    (spark / "jars" / "delta-spark.jar").unlink()
    # Launcher arguments: the driver's class path counts; the rest (a test session's warehouse) does not.
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.sql.warehouse.dir=/tmp/w1 pyspark-shell")
    assert jvm_cache.flags(BASE) == mapped
    for args in (
        "--driver-class-path /opt/x.jar pyspark-shell",
        "--conf spark.driver.extraClassPath=/x.jar pyspark-shell",
    ):
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", args)
        assert "ArchiveClassesAtExit" in jvm_cache.flags(BASE)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    (java / "release").write_text('JAVA_VERSION="21.0.2"\n')
    assert "ArchiveClassesAtExit" in jvm_cache.flags(BASE)
    (java / "release").write_text('JAVA_VERSION="17.0.15"\n')
    assert jvm_cache.flags(BASE) == mapped


def test_the_four_archives_used_last_are_kept(homes):
    _, _, cache = homes

    def install(i: int):
        flags = f"{BASE} -Dinstall={i}"
        if "ArchiveClassesAtExit" in jvm_cache.flags(flags):
            _finish(_dump_path(jvm_cache.flags(flags)))
            assert "SharedArchiveFile" in jvm_cache.flags(flags)  # adopted, used now
        return re.search(r"SharedArchiveFile=(\S+)", jvm_cache.flags(flags)).group(1)

    archives = []
    for i in range(4):
        archives.append(install(i))
        then = time.time() - 1000 + i  # used in this order, long ago
        os.utime(archives[-1], (then, then))
    assert install(0) == archives[0]  # the first used again now
    archives.append(install(4))  # a fifth install: the one used longest ago goes
    assert {str(p) for p in cache.glob("spark-*.jsa")} == {archives[i] for i in (0, 2, 3, 4)}


@pytest.mark.parametrize(
    "setting",
    ["switched off", "the user's own archive", "Java 11", "no release file", "a directory others can write"],
)
def test_no_cache_where_it_is_not_ours_to_use(homes, monkeypatch, setting):
    java, _, cache = homes
    if setting == "switched off":
        monkeypatch.setenv(jvm_cache.SWITCH, "off")
    elif setting == "the user's own archive":
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xmx2g -XX:SharedArchiveFile=/opt/app.jsa")
    elif setting == "Java 11":  # no dynamic archive before JDK 13; only 17 and later were measured
        (java / "release").write_text('JAVA_VERSION="11.0.22"\n')
    elif setting == "no release file":
        (java / "release").unlink()
    else:  # a shared volume: anyone who can write an archive there chooses what the JVM runs
        cache.mkdir(mode=0o777)
        cache.chmod(0o777)
    assert jvm_cache.flags(BASE) == ""
    assert not (cache.exists() and list(cache.iterdir()))


def test_forget_removes_the_mapped_archive_only(homes):
    _, _, cache = homes
    dump = jvm_cache.flags(BASE)
    assert not jvm_cache.forget(dump)
    _finish(_dump_path(dump))
    mapped = jvm_cache.flags(BASE)
    assert jvm_cache.forget(mapped) and not list(cache.glob("*.jsa"))


def test_the_class_cache_is_a_directory_the_run_writes(homes, monkeypatch, tmp_path):
    """The overlap checks keep it out of the inputs (as the artefact cache), unless it is switched off."""
    _, _, cache = homes
    config = PerturbConfig(input="in.parquet", output="out", columns=["text"], epsilon=1.0)
    assert local_writes(config)["the JVM's class cache ($DPSPARK_JVM_CACHE_DIR)"] == cache
    monkeypatch.setenv(jvm_cache.SWITCH, "off")
    assert list(local_writes(config)) == ["the artefact cache"]
