"""Print where the perturbed output is and a few before/after lines: python examples/show.py IN OUT."""

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq


def main(src: str, dst: str, n: int = 5) -> None:
    before = pq.read_table(src).to_pylist()
    after = {r["id"]: r for r in pq.read_table(dst).to_pylist()}
    manifest = json.loads((Path(dst) / "_dpspark_manifest.json").read_text())
    print(f"\nPerturbed dataset written to {Path(dst).resolve()}")
    print(
        f"mechanism={manifest['mechanism']} epsilon={manifest['epsilon']} lambda={manifest['lambda']} "
        f"(Euclidean-equivalent epsilon <= {manifest['euclidean_epsilon_bound']:.4g}); counts: {manifest['counts']}\n"
    )
    shown = 0
    for row in before:
        if row["text"]:
            print(f"  before: {row['text']}\n  after:  {after[row['id']]['text']}\n")
            shown += 1
        if shown == n:
            break


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
