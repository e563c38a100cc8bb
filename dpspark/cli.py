"""The ``dpspark`` command. Flags override the YAML file given with --config.

Every subcommand's flags are derived from its configuration model (``dpspark.config``):
one ``--flag-name`` per field, the field's description as help, so the CLI, the YAML
files, the notebooks and the Python API accept exactly the same settings.

Exit codes: 0 success; 1 unexpected failure; 2 invalid configuration (an output that
overlaps the input included); 3 bad input data; 4 unusable embeddings; 5 output
refused (exists with --mode error, is not an earlier dpspark release, or cannot be
written); 6 calibrate: no ε (with utility / risk bounds: no (ε, λ)) of the grid meets
the bounds; 7 the records were already released (pass --allow-rerelease to spend
privacy again on purpose); 8 the output's release ledger is damaged.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import Any

NO_EPSILON_MEETS_BOUNDS = 6

COMMANDS = {
    # command: (config model name in dpspark.config, help)
    "perturb": ("PerturbConfig", "privately perturb every token of Parquet text columns"),
    "release-vectors": ("VectorsConfig", "release private vectors (PrivEmb or M1) of an array/vector or text column"),
    "privacy-stats": ("StatsConfig", "Nw/Sw plausible-deniability statistics over a grid of ε and λ"),
    "calibrate": ("CalibrateConfig", "the largest ε per λ whose worst-case Nw/Sw meet your bounds"),
    "embedding-report": (
        "EmbeddingReportConfig",
        "geometry of the embedding: k-NN distance percentiles, density (Xu Table 5), spectrum of Σ",
    ),
    "evaluate-utility": (
        "EvaluateUtilityConfig",
        "downstream utility of perturbed text: MLlib classifiers train-time / test-time over ε and λ",
    ),
    "privacy-risk": (
        "RiskConfig",
        "re-identification risk: the share of corpus tokens an informed attacker recovers, per ε and λ",
    ),
    "evaluate-vectors": (
        "EvaluateVectorsConfig",
        "PrivEmb (M2) against M1: distance, inner-product and linear-classifier utility (paper §5)",
    ),
}


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _scalar_type(annotation: Any) -> Any:
    """int, float, bool or str for a field's annotation (Optional unwrapped; lists come as text)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _scalar_type(args[0])
    for kind in (bool, int, float):  # bool first: it is an int; constrained ints/floats are subclasses
        if isinstance(annotation, type) and issubclass(annotation, kind):
            return kind
    return str


def flag_name(field: str, alias: str | None) -> str:
    return "--" + (alias or field).replace("_", "-")


def add_model_arguments(parser: argparse.ArgumentParser, model: Any) -> None:
    """One flag per field of ``model`` (``--vocab-size`` for vocab_size, ``--lambda`` for lam)."""
    for name, (alias, annotation, description) in model.fields().items():
        kind = _scalar_type(annotation)
        dest = alias or name
        flag = flag_name(name, alias)
        if kind is bool:
            parser.add_argument(flag, dest=dest, type=_bool, nargs="?", const=True, help=description)
        else:
            parser.add_argument(flag, dest=dest, type=kind, help=description)


def build_parser() -> argparse.ArgumentParser:
    from dpspark import __version__, config

    parser = argparse.ArgumentParser(prog="dpspark", description="Metric differential privacy for text on Spark.")
    parser.add_argument("--version", action="version", version=f"dpspark {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, (model, help_text) in COMMANDS.items():
        p = sub.add_parser(command, help=help_text, argument_default=argparse.SUPPRESS, description=help_text)
        p.add_argument("--config", help="YAML file with any of these settings (flags win)")
        add_model_arguments(p, getattr(config, model))
    return parser


def _print(obj: Any, quiet: bool) -> None:
    if not quiet:
        print(obj if isinstance(obj, str) else json.dumps(obj, indent=2, ensure_ascii=False))


def _cmd_perturb(c: Any) -> int:
    from dpspark.spark.perturb import run_perturb

    m = run_perturb(c)
    keys = ("status", "output", "partition", "mechanism", "epsilon", "lambda", "euclidean_epsilon_bound", "layout")
    summary = {k: m[k] for k in keys}
    summary["recall_at_1"] = m["nearest_neighbour"]["recall_at_1"]
    summary.update(counts=m["counts"], ledger=m["ledger"], timings=m["timings"])
    _print(summary, c.quiet)
    return 0


def _cmd_release_vectors(c: Any) -> int:
    from dpspark.spark.vectors import run_release_vectors

    m = run_release_vectors(c)
    keys = ("status", "output", "mechanism", "epsilon", "delta", "beta", "input_dimension", "output_dimension")
    _print({**{k: m[k] for k in keys}, "counts": m["counts"], "timings": m["timings"]}, c.quiet)
    return 0


def _cmd_privacy_stats(c: Any) -> int:
    from dpspark.spark.stats import run_privacy_stats

    m = run_privacy_stats(c)
    t = m["timings"]
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    _print(
        f"{table}{m['draws']:,} draws in {t['statistics_s']} s ({t['draws_per_s']:,.0f} draws/s); statistics, "
        f"tables and plots in {c.output}",
        c.quiet,
    )
    return 0


def _report_table(
    directory: str, name: str, flag: str, producer: str, columns: tuple[str, ...], finite: tuple[str, ...]
) -> Any:
    """The table ``name`` of a ``producer`` output (given as ``flag``), checked: a readable Parquet
    file with ``columns``, at least one row, and finite ``finite`` columns on every row measured
    at a grid point (evaluate-utility's baseline row has no (ε, λ))."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpspark.errors import InputDataError
    from dpspark.utility import BASELINE

    path = Path(directory) / name
    fix = f"{flag} must be a {producer} output directory"
    if not path.is_file():
        raise InputDataError(f"{path} not found: {fix}")
    try:
        table = pq.read_table(path)
    except pa.ArrowException as exc:
        raise InputDataError(f"{path} cannot be read as Parquet ({exc}): {fix}") from None
    missing = [col for col in columns if col not in table.column_names]
    if missing:
        raise InputDataError(f"{path} lacks the column(s) {', '.join(missing)}: {fix}, as {producer} writes it")
    if table.num_rows == 0:
        raise InputDataError(f"{path} has no rows: rerun {producer} and give its output directory as {flag}")
    keyed = table.select([col for col in ("mode", *finite) if col in table.column_names]).to_pylist()
    bad = sum(
        r.get("mode") != BASELINE and not all(isinstance(r[k], int | float) and math.isfinite(r[k]) for k in finite)
        for r in keyed
    )
    if bad:
        raise InputDataError(f"{path} has {bad} row(s) without a finite {'/'.join(finite)}: {fix}")
    return table


def _cmd_calibrate(c: Any) -> int:
    from dpspark import report
    from dpspark.outputs import to_json
    from dpspark.stats import Bounds, calibrate

    bounds = None
    if c.nw_sw_bounds or not c.joint:  # Nw/Sw alone keeps its default bound (max Nw <= 0.5·K)
        bounds = Bounds(
            max_nw_fraction=c.max_nw_fraction if c.max_nw_fraction is not None or c.min_sw is not None else 0.5,
            min_sw=c.min_sw,
            percentile=c.percentile,
        )
    stats_dir, computed = c.stats, False
    if bounds is not None and stats_dir is None:
        from dpspark.config import StatsConfig
        from dpspark.spark.stats import run_privacy_stats

        fields = set(StatsConfig.fields())
        run_privacy_stats(StatsConfig.parse({k: v for k, v in c.dict().items() if k in fields}))
        stats_dir, computed = c.output, True
    result, text = None, ""
    if bounds is not None:
        columns, finite = ("epsilon", "lambda", "nw", "sw", "runs"), ("epsilon", "lambda", "runs")
        per_word = _report_table(stats_dir, "per_word.parquet", "--stats", "privacy-stats", columns, finite)
        result = calibrate(report.grid(per_word), bounds)
        text = f"{'worst case' if bounds.percentile == 100 else f'{bounds.percentile:g}th percentile'}: " + ", ".join(
            t
            for t in (
                None if bounds.max_nw_fraction is None else f"Nw <= {bounds.max_nw_fraction:g}·K",
                None if bounds.min_sw is None else f"Sw >= {bounds.min_sw:g}",
            )
            if t
        )
    if c.joint:
        return _joint_calibrate(c, result, text, stats_dir if computed else None)
    md = report.calibration_md(result, text)
    (Path(stats_dir) / "calibration.md").write_text(md, encoding="utf-8")
    (Path(stats_dir) / "calibration.json").write_text(to_json({"bounds": text, **result}), encoding="utf-8")
    _print(md, c.quiet)
    if result["best"] is None:
        print("dpspark calibrate: no ε in range meets these bounds for any λ", file=sys.stderr)
        return NO_EPSILON_MEETS_BOUNDS
    return 0


def _joint_calibrate(c: Any, nw_result: dict | None, nw_text: str, own_dir: str | None) -> int:
    """Utility / re-identification bounds (with the Nw/Sw ones when given): Xu et al. §6."""
    from dpspark import report, utility
    from dpspark.errors import ConfigError, InputDataError
    from dpspark.outputs import to_json, writing_into
    from dpspark.stats import joint_calibrate

    points: dict[tuple[float, float], dict] = {}
    sources, grid = [], ("epsilon", "lambda")
    if c.utility:
        table = _report_table(c.utility, "summary.parquet", "--utility", "evaluate-utility", ("mode", *grid), grid)
        summary = table.to_pylist()
        if sum(s["mode"] == utility.BASELINE for s in summary) != 1:
            raise InputDataError(
                f"{Path(c.utility) / 'summary.parquet'} needs exactly one {utility.BASELINE} row: --utility must be "
                "an evaluate-utility output directory"
            )
        if f"{c.utility_metric}_mean" not in summary[0]:
            names = sorted(k.removesuffix("_mean") for k in summary[0] if k.endswith("_mean"))
            raise ConfigError(f"utility_metric {c.utility_metric!r} is not in {c.utility}; one of {', '.join(names)}")
        for key, loss in utility.utility_loss(summary, c.utility_metric).items():
            points.setdefault(key, {})["utility_loss"] = loss
        sources.append("utility")
    if c.risk:
        risk = _report_table(c.risk, "risk.parquet", "--risk", "privacy-risk", ("epsilon", "lambda", "top1"), grid)
        for r in risk.to_pylist():
            points.setdefault((r["epsilon"], r["lambda"]), {})["reidentification"] = r["top1"]
        sources.append("risk")
    if nw_result is not None:
        for row in nw_result["per_lambda"]:
            for chk in row["checked"]:
                points.setdefault((chk["epsilon"], row["lambda"]), {})["nw_sw_met"] = chk["met"]
        sources.append("stats")
    # Only the (ε, λ) that every source measured can be judged.
    need = {"utility": "utility_loss", "risk": "reidentification", "stats": "nw_sw_met"}
    points = {k: p for k, p in points.items() if all(need[s] in p for s in sources)}
    if not points:
        raise InputDataError(
            f"the {', '.join(sources)} outputs share no (ε, λ): run them over the same grid (--epsilons, --lambdas)"
        )
    result = joint_calibrate(points, c.max_utility_loss, c.max_reidentification)
    parts = [nw_text] if nw_text else []
    if c.max_utility_loss is not None:
        parts.append(f"{c.utility_metric} loss <= {c.max_utility_loss:g} (worse of train-time and test-time)")
    if c.max_reidentification is not None:
        parts.append(f"top-1 re-identification <= {c.max_reidentification:g}")
    text = "; ".join(parts)
    md = report.frontier_md(result, text)
    if own_dir is None and not c.output:
        raise ConfigError("output: give the directory for the calibration (--output DIR)")

    def write(out: Path, written: list[Path]) -> None:
        for name, data in (("calibration.md", md), ("calibration.json", to_json({"bounds": text, **result}))):
            written.append(out / name)
            (out / name).write_text(data, encoding="utf-8")
        written += [out / "frontier.csv", out / "frontier.png"]
        report.write_frontier_csv(result, out)
        report.write_frontier_plot(result, out, c.max_utility_loss, c.max_reidentification)

    if own_dir is not None:  # the privacy-stats output this run just wrote
        write(Path(own_dir), [])
    else:
        with writing_into(c.output, c.mode == "overwrite", "calibration") as written:
            write(Path(c.output), written)
    _print(md, c.quiet)
    if result["best"] is None:
        print("dpspark calibrate: no (ε, λ) of the grid meets these bounds", file=sys.stderr)
        return NO_EPSILON_MEETS_BOUNDS
    return 0


def _cmd_evaluate_utility(c: Any) -> int:
    from dpspark.spark.utility import run_evaluate_utility

    m = run_evaluate_utility(c)
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    t = m["timings"]
    _print(
        f"{table}\n{t['grid_points']} grid points in {t['grid_s']} s ({t['per_grid_point_s']} s each); "
        f"results, summary, plots and manifest in {c.output}",
        c.quiet,
    )
    return 0


def _cmd_privacy_risk(c: Any) -> int:
    from dpspark.spark.risk import run_privacy_risk

    m = run_privacy_risk(c)
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    _print(f"{table}\n{m['draws']:,} draws in {m['timings']['risk_s']} s; tables and plots in {c.output}", c.quiet)
    return 0


def _cmd_evaluation(command: str, c: Any) -> int:
    try:
        from dpspark.evaluation import embedding_report, privemb_eval
    except ImportError as exc:  # scikit-learn / vaderSentiment are the eval extra
        from dpspark.errors import ConfigError

        raise ConfigError(f"{command} needs the eval extra: pip install 'dpspark[eval]' ({exc})") from None
    return (embedding_report if command == "embedding-report" else privemb_eval).run(c)


def explain_failure(command: str, exc: Exception) -> int | None:
    """Print the one-sentence error of a failure the command explains and return its exit code;
    None for an unexpected failure (the caller re-raises it: exit 1 with a traceback)."""
    from dpspark.errors import ConfigError, DPSparkError, OutputError

    if isinstance(exc, DPSparkError):
        message, code = str(exc), exc.exit_code
    elif isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        where = f" holding {exc.filename}" if exc.filename else ""
        message, code = f"the disk{where} is full: free space or choose another --output", OutputError.exit_code
    elif isinstance(exc, ModuleNotFoundError) and exc.name in ("pyspark", "pandas"):
        message = (
            f"{command} runs on Spark and needs {exc.name}: pip install 'dpspark[spark]' "
            "(or run it where Spark is installed, e.g. with spark-submit or on Databricks)"
        )
        code = ConfigError.exit_code
    else:
        return None
    print(f"dpspark {command}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from dpspark import _blas

    kept = _blas.kept_kernel_note()
    _blas.prefer_fast_kernels()  # before numpy loads OpenBLAS (an explicit step of the command, not an import)
    args = vars(build_parser().parse_args(argv))
    command = args.pop("command")
    quiet = bool(args.get("quiet", False)) and args.get("quiet") not in ("false", "0")
    # --quiet prints nothing but errors: no log lines, no warnings (the manifest records the opt-ins).
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("dpspark").setLevel(logging.ERROR if quiet else logging.INFO)
    if kept:
        logging.getLogger("dpspark.blas").info(kept)  # "dpspark" itself logs JSON events only
    from dpspark import config

    try:
        model = getattr(config, COMMANDS[command][0])
        c = model.from_sources(args.pop("config", None), args)
        with warnings.catch_warnings():
            if c.quiet:
                warnings.simplefilter("ignore")
            if command == "perturb":
                return _cmd_perturb(c)
            if command == "release-vectors":
                return _cmd_release_vectors(c)
            if command == "privacy-stats":
                return _cmd_privacy_stats(c)
            if command == "calibrate":
                return _cmd_calibrate(c)
            if command == "evaluate-utility":
                return _cmd_evaluate_utility(c)
            if command == "privacy-risk":
                return _cmd_privacy_risk(c)
            return _cmd_evaluation(command, c)
    except Exception as exc:
        code = explain_failure(command, exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())
