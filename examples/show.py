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
    setting = " ".join(f"{k}={v}" for k, v in manifest["mechanism_parameters"].items() if k != "name")
    bound = manifest.get("euclidean_epsilon_bound")  # the noise family's Lemma 2 bound
    bound = f" (Euclidean-equivalent epsilon <= {bound:.4g})" if bound is not None else ""
    print(
        f"mechanism={manifest['mechanism']} {setting}{bound} [{manifest['guarantee_type']}]; "
        f"counts: {manifest['counts']}\n"
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
