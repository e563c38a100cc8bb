"""The local JVM's class-data cache: Spark's classes as HotSpot loaded them, mapped in at the next start.

A local Spark JVM spends most of its start loading and verifying the same thousands of classes from Spark's
jars. HotSpot's application class-data sharing (AppCDS, JDK 13 and later) keeps what one run loaded in an
archive that later JVMs map instead: `make demo`'s perturb command took 10.3 s instead of 15.1 s (medians
of 5 interleaved pairs, bench/bench_demo.py, 2-core AMD EPYC). The first JVM of a Spark install writes the
archive as it exits (about 180 MB, some 10 s on 2 cores); the run after adopts it.

What it holds and whom it trusts: class metadata and bytecode of the jars on the JVM's class path, no
data (classes Spark generates for a query have no jar and are not archived). A JVM runs what the archive
says, so it lives in a directory of the user's own, mode 0700: ``$DPSPARK_JVM_CACHE_DIR``, else
``$XDG_CACHE_HOME/dpspark/jvm``, else ``~/.cache/dpspark/jvm``; a directory another user owns or can
write is not used. HotSpot itself refuses an archive of another JVM build or class path (it then starts
as without one, and says nothing: its cds logging is off), and each Spark install, Java and set of JVM
flags has an archive of its own (the file name's key); the four used last are kept.
``DPSPARK_JVM_CACHE=off`` turns it off, and JVM options of the user's own that choose an archive
(``SPARK_SUBMIT_OPTS``) are left alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shlex
import shutil
import time
from pathlib import Path

from dpspark.scratch import user_cache

log = logging.getLogger("dpspark")

SWITCH = "DPSPARK_JVM_CACHE"
DIR_ENV = "DPSPARK_JVM_CACHE_DIR"
KEEP = 4  # archives of other installs kept (CI's runtime matrix runs four Spark installs on one machine)
_OWN_CHOICE = re.compile(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)|-Xshare:")
# A dynamic archive's first four bytes (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian), which the
# JVM writes last, over a header it first leaves blank: a file that starts so was written to the end.
_MAGIC = (0xF00BABA8).to_bytes(4, "little")
_SETTLED_S = 10  # a dump whose file has not changed for this long is over
_STALE_S = 3600  # an unfinished dump older than this died with its JVM
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Each start checks the archive's checksums (0.06 s): a damaged archive is then refused, not run.
_MAP = "-XX:+VerifySharedSpaces"


def enabled() -> bool:
    """Whether dpspark may map or write an archive (``DPSPARK_JVM_CACHE=off`` says not)."""
    return os.environ.get(SWITCH, "").lower() not in ("off", "0", "false", "no")


def folder() -> Path:
    """The directory of the archives (see the module's docstring)."""
    given = os.environ.get(DIR_ENV)
    if given:
        return Path(given).expanduser()
    return user_cache("jvm")


def _private(path: Path) -> bool:
    """``path`` is a directory of this user's that nobody else can write (created so when missing). Not on a
    system without POSIX owners (Windows): there is nothing to check it by."""
    if not hasattr(os, "getuid"):
        return False
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _java() -> Path | None:
    """The java Spark's launcher runs (spark-class: $JAVA_HOME/bin/java, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    exe = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(os.path.realpath(exe)) if exe and os.path.isfile(exe) else None


def _java_release(java: Path) -> str | None:
    """The JDK's ``release`` file (JAVA_VERSION="17.0.15" ...), or None where there is none."""
    try:
        return (java.parent.parent / "release").read_text(errors="replace")
    except OSError:
        return None


def _major(release: str) -> int:
    m = re.search(r'^JAVA_VERSION="(?:1\.)?(\d+)', release, re.MULTILINE)
    return int(m.group(1)) if m else 0


def _jars() -> Path | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = Path(_find_spark_home()) / "jars"
    except Exception:  # noqa: BLE001 - no Spark home to be found: no archive
        return None
    return jars if jars.is_dir() else None


def _class_path_arguments() -> str:
    """What of the launcher's arguments ($PYSPARK_SUBMIT_ARGS) changes the JVM's own class path: the driver's
    class path (``--driver-class-path``, ``spark.driver.extraClassPath``). ``--jars`` and ``--packages`` load
    through Spark's class loader, which the archive does not hold; the rest (a warehouse directory, say)
    changes nothing the archive holds and must not give each run an archive of its own."""
    try:
        words = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    except ValueError:
        return os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    kept = []
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word.startswith("--driver-class-path"):
            kept.append(word if "=" in word else f"{word} {following}")
        elif "spark.driver.extraClassPath" in word:
            kept.append(word)
    return " ".join(kept)


def _key(java: Path, release: str, jars: Path, flags: str) -> str:
    """What an archive is valid for: the JVM build, Spark's jars (names, sizes, times), the flags and the
    class path the launcher adds (``_class_path_arguments``)."""
    h = hashlib.sha256()
    for part in (str(java), release, flags, _class_path_arguments(), str(jars)):
        h.update(part.encode() + b"\0")
    for jar in sorted(jars.iterdir()):
        st = jar.stat()
        h.update(f"{jar.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _finished(part: Path, now: float) -> bool:
    try:
        if now - part.stat().st_mtime < _SETTLED_S:
            return False
        with part.open("rb") as f:
            return f.read(4) == _MAGIC
    except OSError:
        return False


def _tidy(where: Path, keep: Path) -> None:
    """Drop dead dumps, the finished dumps of installs that have their archive (a JVM that started before the
    archive was there writes one as it exits: some 200 MB each), and the archives of other installs beyond
    the ``KEEP`` used last."""
    now = time.time()
    for part in where.glob("spark-*.part"):
        try:
            redundant = (where / f"{part.name.split('.', 1)[0]}.jsa").exists() and _finished(part, now)
            if redundant or now - part.stat().st_mtime > _STALE_S:
                part.unlink()
        except OSError:
            pass
    others = [p for p in where.glob("spark-*.jsa") if p != keep]
    others.sort(key=lambda p: p.stat().st_mtime if p.exists() else 0, reverse=True)
    for old in others[KEEP - 1 :]:
        old.unlink(missing_ok=True)


def flags(base: str) -> str:
    """The JVM options that map this install's archive (``""`` when there is none to use or write).

    ``base``: the JVM flags of the session (they are part of the archive's key). Where no archive is there
    yet, a finished dump of an earlier run is adopted; where none is, this JVM writes one as it exits, to a
    name of its own (two first runs side by side both write one; the next run keeps one)."""
    if not enabled():
        return ""
    if _OWN_CHOICE.search(os.environ.get("SPARK_SUBMIT_OPTS", "")):
        return ""
    java = _java()
    release = _java_release(java) if java else None
    jars = _jars()
    if java is None or release is None or jars is None or _major(release) < 17:
        return ""
    where = folder()
    if not _private(where):
        log.debug("JVM class cache not used: %s is not a private directory of this user's", where)
        return ""
    key = _key(java, release, jars, base)
    archive = where / f"spark-{key}.jsa"
    now = time.time()
    if not archive.is_file():
        done = [p for p in where.glob(f"spark-{key}.*.part") if _finished(p, now)]
        if done:
            os.replace(done[0], archive)  # the other finished dumps go in _tidy
    _tidy(where, archive)
    if archive.is_file():
        try:
            os.utime(archive)  # used last: kept longest
        except OSError:
            pass
        # A JVM that dies mapping a damaged archive (HotSpot 17 does, on a cut-short file) leaves its crash
        # log here, not in the user's directory; get_session then starts it again without (``forget``).
        return f"-XX:SharedArchiveFile={archive} {_MAP} -XX:ErrorFile={where}/hs_err_pid%p.log {_QUIET}"
    part = where / f"spark-{key}.{os.getpid()}-{secrets.token_hex(4)}.part"
    return f"-XX:ArchiveClassesAtExit={part} {_QUIET}"


def forget(given: str) -> bool:
    """Remove the archive that ``given`` (what ``flags`` returned) maps: a JVM that did not start with it is
    then started again without one. True when there was one to remove."""
    m = re.search(r"-XX:SharedArchiveFile=(\S+)", given)
    if m is None:
        return False
    Path(m.group(1)).unlink(missing_ok=True)
    return True
