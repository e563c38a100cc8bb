"""A release's record, on every engine: the re-release check, the ledger entry, the manifest and the commit of
the stage into the output (``dpspark.spark.release`` on Spark, ``dpspark.local`` in this process). No pyspark:
the file system is ``dpspark.spark.fs.FileSystem``'s (a Hadoop one, or this machine's).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from datetime import datetime, timezone
from typing import Any

import dpspark
from dpspark import ledger
from dpspark.config import ReleaseSettings
from dpspark.errors import DPSparkError, ReleaseRefusedError
from dpspark.outputs import to_json
from dpspark.spark import io
from dpspark.spark.fs import FileSystem
from dpspark.units import SHAPE

log = logging.getLogger("dpspark")


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def log_started(command: str, run_id: str, spec: dict[str, str] | None) -> None:
    log.info(json.dumps({"event": f"{command}_started", "run_id": run_id, "partition": ledger.spec_text(spec)}))


def seal(manifest: dict[str, Any], t_start: float) -> dict[str, Any]:
    """The manifest's last two keys: the run's seconds, then ``status`` (a reader that sees it sees the whole
    manifest)."""
    manifest["duration_s"] = round(time.time() - t_start, 3)
    manifest["status"] = "succeeded"
    return manifest


def log_finished(command: str, run_id: str, manifest: dict[str, Any]) -> None:
    fields = {"counts": manifest["counts"], "duration_s": manifest["duration_s"], "status": manifest["status"]}
    log.info(json.dumps({"event": f"{command}_finished", "run_id": run_id, **fields}))


def check_rerelease(
    c: ReleaseSettings, output: str, spec: dict[str, str] | None, earlier: list[dict]
) -> list[dict[str, Any]]:
    """The earlier releases of the same records; refused unless ``allow_rerelease``."""
    clash = ledger.overlapping(earlier, spec)
    if clash and not c.allow_rerelease:
        last = clash[-1]
        raise ReleaseRefusedError(
            f"{ledger.spec_text(spec)} of {c.output or output} overlaps {len(clash)} earlier release(s) "
            f"(latest: {ledger.spec_text(last['partition'])}, run {last['run_id']} at {last['finished_at']}, epsilon "
            f"{last['epsilon']:g}); releasing the same records again spends privacy again (the epsilons add up): "
            "pass --allow-rerelease to do it on purpose"
        )
    return clash


def ledger_entry(
    job: Any, run_id: str, spec: dict[str, str] | None, again: bool, observed: dict[str, int]
) -> dict[str, Any]:
    """The release's ledger entry: its mechanism's guarantee type, the exact unit of its bound and what it
    spent there (``job.ledger_terms``; under a privacy unit its ``epsilon`` is the unit's budget)."""
    c = job.config
    terms = job.ledger_terms(observed)
    return ledger.entry(
        run_id,
        spec,
        terms.pop("epsilon", getattr(c, "epsilon", 0.0)),
        str(getattr(c, "mechanism", job.command)),
        now(),
        again,
        **terms,
        command=job.command,
        rows=observed["rows"],
    )


def manifest(
    job: Any,
    run_id: str,
    started: str,
    entry: dict[str, Any],
    where: tuple[str | None, str, dict[str, str] | None],
    observed: dict[str, int],
    earlier: list[dict[str, Any]],
    timings: dict[str, float],
) -> dict[str, Any]:
    """The manifest's fields that every engine writes alike, in order: the run, ``where`` (the input, the output
    and the partition spec), the job's own fields, the counts the output shows, the ledger and the timings. The
    engine's own fields follow them (Spark's: ``spark``, ``spread``), then ``duration_s`` and ``status``."""
    source, output, spec = where
    return {
        "manifest_version": io.MANIFEST_VERSION,
        "dpspark_version": dpspark.__version__,
        "command": job.command,
        "run_id": run_id,
        "started_at": started,
        "finished_at": entry["finished_at"],
        "input": source,
        "output": output,
        "partition": ledger.spec_text(spec) if spec else None,
        **job.manifest_fields(observed),
        "counts": {k: v for k, v in observed.items() if not k.startswith(SHAPE)},
        "ledger": ledger.summary([*earlier, entry]),
        "timings": timings,
    }


def commit(
    fs: FileSystem,
    paths: io.Paths,
    stage: str,
    spec: dict[str, str] | None,
    existed: bool,
    earlier: list[dict[str, Any]],
    entry: dict[str, Any],
    manifest: dict[str, Any],
    side_files: dict[str, bytes],
) -> None:
    out = paths.output
    if spec is None:
        # A full release: everything goes into the stage, which then replaces the output
        # (``io.publish``, the commit every report takes too), the ledger checked under the lock.
        for e in earlier:  # an overwritten release keeps its history
            io.write_ledger_entry(fs, stage, e)
        io.write_ledger_entry(fs, stage, entry)

        def unchanged() -> None:
            if existed and fs.exists(out):
                ledger.check_unchanged(earlier, io.read_ledger(fs, out), spec, paths.output_given)

        io.publish(fs, paths, stage, side_files.items(), manifest, existed, entry["run_id"], unchanged)
        return
    # ETL: record the release, then move the partition's directory into the output. The
    # entry goes first: a run killed in between leaves a release recorded that may not
    # have happened (a re-run then needs --allow-rerelease), never the reverse.
    rel = io.find_partition(fs, stage, spec)
    if rel is None:
        if manifest["counts"]["rows"]:
            raise DPSparkError(
                f"the stage {stage} holds no directory for {ledger.spec_text(spec)} although the run wrote "
                f"{manifest['counts']['rows']} rows: nothing was published; please report this"
            )
        rel = "/".join(f"{k}={io.escape_value(v)}" for k, v in spec.items())
        fs.mkdirs(f"{stage}/{rel}")  # an empty partition writes no directory: record it all the same
    src, dst = f"{stage}/{rel}", f"{out}/{rel}"
    for name, data in side_files.items():
        fs.write_bytes(f"{src}/{name}", data)
    with paths.lock(entry["run_id"]):
        current = io.read_ledger(fs, out) if fs.exists(out) else []
        ledger.check_unchanged(earlier, current, spec, paths.output_given)
        recorded = io.write_ledger_entry(fs, out, entry)
        try:
            fs.mkdirs(posixpath.dirname(dst))
            if fs.exists(dst):  # only reached with allow_rerelease: the earlier release of it is replaced
                io.commit_stage(fs, io.Paths(fs, None, dst), src, True, entry["run_id"])
            else:
                fs.rename(src, dst)
        except BaseException:
            fs.remove(recorded)
            raise
        manifest["ledger"] = ledger.summary([*current, entry])
        fs.write_text(f"{out}/{io.MANIFEST}", to_json(manifest))
    fs.remove(stage)
