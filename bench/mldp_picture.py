"""The "MLDP benchmark's picture" tables of docs/compare.md, from a `dpspark compare` output directory.

    python bench/mldp_picture.py OUT_DIR [--epsilons 1,5,10]
    python bench/mldp_picture.py --smoke   # the tables of a tiny `dpspark compare` run, made here

One row per mechanism, each cell "ε=1 / ε=5 / ε=10": train-time accuracy, top-1 re-identification,
MLDP's Nw and Sw (25 words × 100 trials), PP, LOW and CS, as `compare` measured them
(compare.parquet); settings left out (refused by the mechanism) are listed under the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

COLUMNS = (
    ("train-time_accuracy", "accuracy (%)", 100, 1),
    ("top1", "top-1 re-identification (%)", 100, 1),
    ("mldp_nw", "Nw (of 100)", 1, 1),
    ("mldp_sw", "Sw (of 100)", 1, 1),
    ("pp", "PP (%)", 100, 1),
    ("low", "LOW (%)", 100, 1),
    ("cs", "CS", 1, 3),
)


def tiny_compare(tmp: Path) -> Path:
    """A `dpspark compare` output of seconds: 100 SMS messages, CMP at ε = 10, 2,000 words, on the local engine
    (the same tables as Spark's: tests/spark/test_local_equals_spark.py)."""
    from dpspark.evaluation.datasets import sms_spam

    data, out = sms_spam(tmp, rows=100), tmp / "compare"
    cmd = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main())", "compare"]
    cmd += ["--input", data, "--text-column", "text", "--label-column", "label", "--output", str(out)]
    cmd += ["--mechanisms", "laplace", "--epsilons", "10", "--vocab-size", "2000", "--runs", "2"]
    cmd += ["--repeats", "1", "--mode", "train-time", "--refine", "0", "--max-words", "20"]
    cmd += ["--mldp-words", "5", "--mldp-trials", "10", "--engine", "local", "--quiet"]  # no JVM: the tables only
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # --quiet: stderr only on a failure
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="a dpspark compare output directory")
    parser.add_argument("--epsilons", default="1,5,10")
    parser.add_argument("--smoke", action="store_true", help="the tables of a tiny compare run made here (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="dpspark-bench-mldp-") as tmp:
            return table(tiny_compare(Path(tmp)), "10")
    if args.output is None:
        parser.error("the compare output directory is required (or --smoke)")
    table(Path(args.output), args.epsilons)


def table(out: Path, epsilons: str) -> None:
    """Print the tables of the compare output ``out`` at the ε of ``epsilons`` (comma-separated)."""
    eps = [float(e) for e in epsilons.split(",")]
    rows = pq.read_table(out / "compare.parquet").to_pylist()
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    by = {(r["mechanism"], r["epsilon"]): r for r in rows if r["stage"] == "grid"}
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    head = " / ".join(f"{e:g}" for e in eps)
    print(f"| mechanism (ε = {head}) | " + " | ".join(c[1] for c in COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for name in names:
        cells = []
        for key, _, scale, digits in COLUMNS:
            values = [by.get((name, e), {}).get(key) for e in eps]
            cells.append(" / ".join("–" if v is None else f"{scale * v:.{digits}f}" for v in values))
        print(f"| {name} | " + " | ".join(cells) + " |")
    base = manifest["baseline"]["accuracy"]
    print(
        f"\nNon-private baseline accuracy {100 * base:.1f}%; attacker's floor (prior only) "
        f"{100 * manifest['corpus']['floor_top1']:.1f}% top-1."
    )
    skipped: dict[str, list[dict]] = {}
    for s in manifest.get("skipped", []):
        skipped.setdefault(s["setting"], []).append(s)
    for name, refused in skipped.items():
        eps_left = ", ".join(f"{s['epsilon']:g}" for s in refused)
        print(f"Left out: {name} at ε = {eps_left} (refused: {refused[0]['reason'].split(' on this vocabulary')[0]}).")


if __name__ == "__main__":
    main()
