"""The ``dpspark`` command. Flags override the YAML file given with --config.

Exit codes: 0 success; 1 unexpected failure; 2 invalid configuration;
3 bad input data; 4 unusable embeddings; 5 output exists (mode "error");
6 calibrate: no ε of the grid meets the bounds; 7 perturb --partition: the partition
was already released (pass --allow-rerelease to spend privacy again on purpose).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from dpspark.embeddings import FORMATS
from dpspark.errors import DPSparkError, InputDataError
from dpspark.text import OOV_POLICIES

NO_EPSILON_MEETS_BOUNDS = 6


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _perturb_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "perturb",
        help="privately perturb every token of Parquet text columns",
        argument_default=argparse.SUPPRESS,
        description="Rewrite text columns of a Parquet dataset with the multivariate Laplace or "
        "regularized Mahalanobis mechanism; everything else stays as it is.",
    )
    p.add_argument("--config", help="YAML file with any of these settings (flags win)")
    p.add_argument("--input", help="input Parquet file or directory")
    p.add_argument("--output", help="output directory (Parquet + _dpspark_manifest.json)")
    p.add_argument("--columns", help="text column(s) to perturb, comma-separated")
    p.add_argument("--epsilon", type=float, help="privacy parameter ε > 0 (required, no default)")
    p.add_argument("--mechanism", help="mahalanobis (default) or laplace")
    p.add_argument("--lambda", dest="lambda", type=float, help="λ in [0, 1] for mahalanobis (default 1)")
    p.add_argument("--embeddings", help="glove-6b-50d (default) or a path")
    p.add_argument("--embeddings-format", dest="embeddings_format", help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--embeddings-words", dest="embeddings_words", help="word list for .npy embeddings")
    p.add_argument("--vocab-size", dest="vocab_size", type=int, help="output vocabulary: first N words (50000)")
    p.add_argument("--vocab-file", dest="vocab_file", help="output vocabulary: a public word list, one per line")
    p.add_argument(
        "--vocab-from-corpus",
        dest="vocab_from_corpus",
        type=_bool,
        nargs="?",
        const=True,
        help="derive the vocabulary from the input (publishes its frequent words; warned)",
    )
    p.add_argument("--nn", help="nearest-neighbour search: exact (default) or annoy")
    p.add_argument("--annoy-trees", dest="annoy_trees", type=int, help="annoy: number of trees (50)")
    p.add_argument("--annoy-search-k", dest="annoy_search_k", type=int, help="annoy: search_k (-1 = default)")
    p.add_argument("--recall-queries", dest="recall_queries", type=int, help="noisy queries to measure annoy (2000)")
    p.add_argument("--oov", help=f"out-of-vocabulary policy: {', '.join(OOV_POLICIES)} (default unk)")
    p.add_argument("--oov-token", dest="oov_token", help="placeholder of the unk policy ([UNK])")
    p.add_argument(
        "--keep-original",
        dest="keep_original",
        type=_bool,
        nargs="?",
        const=True,
        help="also write the raw text as COL_original (opt-in: it is not private)",
    )
    p.add_argument("--mode", help="error (default) or overwrite when the output exists")
    p.add_argument("--seed", type=int, help="fixed seed: tests and experiments only (warns)")
    p.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's)")
    p.add_argument("--remote", help="Spark Connect URL (sc://host:port) instead of a local/cluster session")
    p.add_argument("--batch-rows", dest="batch_rows", type=int, help="rows per Arrow batch (10000)")
    p.add_argument("--partitions", type=int, help="tasks to spread the rows over (default: 4 per core if fewer)")
    p.add_argument(
        "--partition", help="ETL: process one input partition (e.g. date=2026-11-21) and overwrite only that one"
    )
    p.add_argument(
        "--allow-rerelease",
        dest="allow_rerelease",
        type=_bool,
        nargs="?",
        const=True,
        help="release a partition again on purpose (spends privacy again; recorded in the manifest)",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _stats_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with any of these settings (flags win)")
    p.add_argument("--output", help="output directory (per_word.parquet, summary.csv/.md, plots, manifest)")
    p.add_argument("--epsilons", help="ε grid, comma-separated (1,5,10,20,40)")
    p.add_argument("--lambdas", help="λ grid, comma-separated (0,0.25,0.5,0.75,1)")
    p.add_argument("--runs", type=int, help="K: runs of the mechanism per word (100)")
    p.add_argument("--words", type=int, help="number of vocabulary words sampled uniformly (500)")
    p.add_argument("--words-seed", dest="words_seed", type=int, help="seed of that public sample (0)")
    p.add_argument("--word-list", dest="word_list", help="measure these words instead (one per line)")
    p.add_argument("--corpus", help="measure the most frequent vocabulary words of this Parquet dataset")
    p.add_argument("--columns", help="text columns of --corpus")
    p.add_argument("--embeddings", help="glove-6b-50d (default) or a path")
    p.add_argument("--embeddings-format", dest="embeddings_format", help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--embeddings-words", dest="embeddings_words", help="word list for .npy embeddings")
    p.add_argument("--vocab-size", dest="vocab_size", type=int, help="output vocabulary: first N words (50000)")
    p.add_argument("--vocab-file", dest="vocab_file", help="output vocabulary: a public word list")
    p.add_argument("--nn", help="exact (default) or annoy")
    p.add_argument("--annoy-trees", dest="annoy_trees", type=int)
    p.add_argument("--annoy-search-k", dest="annoy_search_k", type=int)
    p.add_argument("--words-per-task", dest="words_per_task", type=int, help="words per work item (50)")
    p.add_argument("--runs-per-task", dest="runs_per_task", type=int, help="runs per work item (all K)")
    p.add_argument("--mode", help="error (default) or overwrite when the output exists")
    p.add_argument("--seed", type=int, help="fixed seed: tests and experiments only (warns)")
    p.add_argument("--master", help="Spark master URL (default local[*])")


def _calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stats", help="a privacy-stats output directory to read (else computed first)")
    p.add_argument("--max-nw-fraction", dest="max_nw_fraction", type=float, help="bound: Nw <= fraction*K (0.5)")
    p.add_argument("--min-sw", dest="min_sw", type=float, help="bound: Sw >= this")
    p.add_argument("--percentile", type=float, help="100 (default) = worst case; e.g. 95 for the 95th")


def build_parser() -> argparse.ArgumentParser:
    from dpspark import embedding_report, privemb_eval

    parser = argparse.ArgumentParser(prog="dpspark", description="Metric differential privacy for text on Spark.")
    sub = parser.add_subparsers(dest="command", required=True)
    _perturb_parser(sub)
    stats = sub.add_parser(
        "privacy-stats",
        argument_default=argparse.SUPPRESS,
        help="Nw/Sw plausible-deniability statistics over a grid of ε and λ",
    )
    _stats_arguments(stats)
    cal = sub.add_parser(
        "calibrate",
        argument_default=argparse.SUPPRESS,
        help="the largest ε per λ whose worst-case Nw/Sw meet your bounds",
    )
    _calibrate_arguments(cal)
    _stats_arguments(cal)
    embedding_report.add_parser(sub)
    privemb_eval.add_parser(sub)
    rel = sub.add_parser(
        "release-vectors",
        argument_default=argparse.SUPPRESS,
        help="release private vectors (PrivEmb or M1) of an array/vector or text column",
    )
    rel.add_argument("--input", help="input Parquet")
    rel.add_argument("--output", help="output directory (Parquet + Φ + manifest)")
    rel.add_argument("--column", help="array<float>/array<double>/ML vector column, or a text column (mean GloVe)")
    rel.add_argument("--epsilon", type=float, help="ε > 0 (required)")
    rel.add_argument("--delta", type=float, help="δ in (0, 1) (1e-6)")
    rel.add_argument("--beta", type=float, help="β in (0, 1): projection distortion (0.8)")
    rel.add_argument("--dim", type=int, help="m, overriding the formula")
    rel.add_argument("--mechanism", help="privemb (default) or m1")
    rel.add_argument("--embeddings", help="for text columns: glove-6b-50d (default) or a path")
    rel.add_argument("--seed", type=int, help="fixed seed: tests and experiments only (warns)")
    rel.add_argument("--mode", help="error (default) or overwrite")
    rel.add_argument("--master", help="Spark master URL")
    return parser


def perturb_settings(args: dict[str, Any]) -> dict[str, Any]:
    """YAML settings (if --config) overlaid with the flags that were given."""
    from dpspark.config import load_yaml

    settings = load_yaml(args.pop("config")) if "config" in args else {}
    if "lam" in settings:
        settings["lambda"] = settings.pop("lam")
    settings.update(args)
    return settings


def _cmd_perturb(args: dict[str, Any]) -> int:
    from dpspark.config import PerturbConfig
    from dpspark.spark.perturb import run_perturb

    quiet = args.pop("quiet", False)
    config = PerturbConfig.parse(perturb_settings(args))
    manifest = run_perturb(config)
    if not quiet:
        summary = {k: manifest[k] for k in ("status", "output", "mechanism", "epsilon", "lambda", "counts")}
        summary["euclidean_epsilon_bound"] = round(manifest["euclidean_epsilon_bound"], 4)
        summary["recall_at_1"] = manifest["nearest_neighbour"]["recall_at_1"]
        summary["timings"] = manifest["timings"]
        print(json.dumps(summary, indent=2))
    return 0


def _cmd_privacy_stats(args: dict[str, Any]) -> int:
    from dpspark.config import StatsConfig
    from dpspark.spark.stats import run_privacy_stats

    config = StatsConfig.parse(perturb_settings(args))
    m = run_privacy_stats(config)
    out = Path(config.output)
    print((out / "summary.md").read_text(encoding="utf-8"))
    print(
        f"{m['draws']:,} draws in {m['timings']['statistics_s']} s ({m['timings']['draws_per_s']:,.0f} draws/s); "
        f"statistics, tables and plots in {out.resolve()}"
    )
    return 0


def _cmd_calibrate(args: dict[str, Any]) -> int:
    import pyarrow.parquet as pq

    from dpspark import report
    from dpspark.stats import Bounds, calibrate

    bounds = Bounds(
        max_nw_fraction=args.pop("max_nw_fraction", 0.5 if "min_sw" not in args else None),
        min_sw=args.pop("min_sw", None),
        percentile=args.pop("percentile", 100.0),
    )
    stats_dir = args.pop("stats", None)
    if stats_dir is None:
        from dpspark.config import StatsConfig
        from dpspark.spark.stats import run_privacy_stats

        config = StatsConfig.parse(perturb_settings(args))
        run_privacy_stats(config)
        stats_dir = config.output
    per_word = Path(stats_dir) / "per_word.parquet"
    if not per_word.is_file():
        raise InputDataError(f"{per_word} not found: --stats must be a privacy-stats output directory")
    result = calibrate(report.grid(pq.read_table(per_word)), bounds)
    text = f"{'worst case' if bounds.percentile == 100 else f'{bounds.percentile:g}th percentile'}: " + ", ".join(
        t
        for t in (
            None if bounds.max_nw_fraction is None else f"Nw <= {bounds.max_nw_fraction:g}·K",
            None if bounds.min_sw is None else f"Sw >= {bounds.min_sw:g}",
        )
        if t
    )
    md = report.calibration_md(result, text)
    (Path(stats_dir) / "calibration.md").write_text(md, encoding="utf-8")
    (Path(stats_dir) / "calibration.json").write_text(json.dumps({"bounds": text, **result}, indent=2))
    print(md)
    if result["best"] is None:
        print("dpspark calibrate: no ε in range meets these bounds for any λ", file=sys.stderr)
        return NO_EPSILON_MEETS_BOUNDS
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = vars(build_parser().parse_args(argv))
    command = args.pop("command")
    try:
        if command == "perturb":
            return _cmd_perturb(args)
        if command == "privacy-stats":
            return _cmd_privacy_stats(args)
        if command == "calibrate":
            return _cmd_calibrate(args)
        if command == "release-vectors":
            from dpspark.spark.vectors import run_release_vectors

            m = run_release_vectors(args)
            print(
                json.dumps(
                    {
                        k: m[k]
                        for k in (
                            "status",
                            "mechanism",
                            "epsilon",
                            "delta",
                            "beta",
                            "input_dimension",
                            "output_dimension",
                            "rows",
                            "timings",
                        )
                    },
                    indent=2,
                )
            )
            return 0
        if command == "evaluate-vectors":
            from dpspark import privemb_eval

            return privemb_eval.run(args)
        if command == "embedding-report":
            from dpspark import embedding_report

            return embedding_report.run(args)
    except DPSparkError as exc:
        print(f"dpspark {command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 1


if __name__ == "__main__":
    sys.exit(main())
