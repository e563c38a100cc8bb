"""compare's figures in MLflow: where MLflow is installed and a run is active (Databricks' tracking),
the figures as metrics, the settings and the recommendation as parameters, the report's files as
artifacts. Best effort: nothing here fails a comparison."""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import pyarrow as pa

from dpspark.mechanisms import SYMBOLS

log = logging.getLogger("dpspark")


def log_to_mlflow(manifest: dict[str, Any], table: pa.Table, local: Any) -> bool:
    """Where MLflow is installed and a run is active (Databricks' tracking): the figures of every
    setting as metrics (``<setting>_eps_<ε>/<figure>``), the comparison's settings and its
    recommendation as parameters (``dpspark_compare_*``), and the report's files as artifacts
    (``dpspark_compare/``). Without an active run nothing is logged (no run is created). Best effort:
    a tracking failure is logged as a warning and never fails the comparison. Returns whether it logged."""
    try:
        import mlflow
    except ImportError:
        return False
    run = mlflow.active_run()
    if run is None:
        return False
    try:
        mlflow.log_metrics(mlflow_metrics(table))
        for name in manifest["files"]:
            mlflow.log_artifact(str(local / name), artifact_path="dpspark_compare")
        # A parameter cannot change within a run: those an earlier compare of this run logged with another
        # value are kept (and named), the others logged.
        params = mlflow_params(manifest)
        logged = mlflow.tracking.MlflowClient().get_run(run.info.run_id).data.params
        clash = sorted(k for k, v in params.items() if k in logged and logged[k] != v)
        if clash:
            log.warning("MLflow run %s already has other values of %s: kept", run.info.run_id, ", ".join(clash))
        mlflow.log_params({k: v for k, v in params.items() if k not in logged})
    except Exception as exc:  # the tracking server's failure is not the comparison's
        log.warning("logging to MLflow failed (the comparison's files are written all the same): %s", exc)
        return False
    return True


def mlflow_metrics(table: pa.Table) -> dict[str, float]:
    """compare.parquet's finite numbers, one metric per setting and figure: ``laplace_eps_5/top1``."""
    metrics = {}
    for r in table.to_pylist():
        prefix = _mlflow_key(f"{r['setting']} eps {r['epsilon']:g}".replace(" ", "_"))
        for k, v in r.items():
            if isinstance(v, float) and math.isfinite(v) and k != "epsilon":
                metrics[f"{prefix}/{_mlflow_key(k)}"] = v
    return metrics


def mlflow_params(manifest: dict[str, Any]) -> dict[str, str]:
    """The comparison's settings and the recommended setting and ε (``none`` where none qualifies)."""
    chosen = manifest.get("recommended")
    params = {
        "mechanisms": ",".join(manifest["mechanisms"]),
        "epsilons": ",".join(f"{e:g}" for e in manifest["epsilons"]),
        "utility_metric": manifest["utility_metric"],
        "model": manifest["model"],
        "repeats": str(manifest["repeats"]),
        "runs": str(manifest["runs"]),
        "target_reidentification": f"{manifest['targets']['reidentification']:g}",
        "setting": "none" if chosen is None else chosen["setting"],
        "epsilon": "none" if chosen is None else f"{chosen['epsilon']:g}",
    }
    return {"dpspark_compare_" + k: v for k, v in params.items()}


def _mlflow_key(key: str) -> str:
    """MLflow's metric names take alphanumerics, underscores, dashes, periods, spaces and slashes; ASCII
    here, whatever the tracking server: Greek letters by their names (``dpspark.mechanisms.SYMBOLS``), ``1e+06`` as
    ``1e06``, ``=`` and anything else as ``_``."""
    for name, symbol in SYMBOLS.items():
        key = key.replace(symbol, name)
    return re.sub(r"[^\w\-./ ]", "_", key.replace("+", ""), flags=re.ASCII)
