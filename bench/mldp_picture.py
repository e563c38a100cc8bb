"""The README's "MLDP benchmark's picture" tables, from a `dpspark compare` output directory.

    python bench/mldp_picture.py OUT_DIR [--epsilons 1,5,10]

One row per mechanism, each cell "ε=1 / ε=5 / ε=10": train-time accuracy, top-1 re-identification,
MLDP's Nw and Sw (25 words × 100 trials), PP, LOW and CS, as `compare` measured them
(compare.parquet); settings left out (refused by the mechanism) are listed under the table.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="a dpspark compare output directory")
    parser.add_argument("--epsilons", default="1,5,10")
    args = parser.parse_args(argv)
    out = Path(args.output)
    eps = [float(e) for e in args.epsilons.split(",")]
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
