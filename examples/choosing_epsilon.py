"""The "Choosing ε" table of docs/choosing-epsilon.md: what each mechanism leaves of the sample at several ε.

    python examples/choosing_epsilon.py [--runs 3] [--seed N]

For every mechanism and ε of its grid, the sample's text column (examples/reviews.parquet, 500
synthetic reviews) is perturbed ``--runs`` times with fresh OS randomness, through the same
mechanism objects a release uses (``dpspark.prepare``; default vocabulary and embedding), and the
mean over runs is printed as a Markdown table. ``--seed N`` fixes the randomness instead (it warns):
the docs' table is the one ``--seed 2026`` prints, so that its test compares like with like.

- tokens unchanged: the share of tokens released as themselves;
- rows naming someone that still show a name: of the rows holding one of the sample's personal
  words (tom, baker, jane, doe, springfield), the share whose output holds one of its own;
- CS: the mean cosine between the mean GloVe vector of a row and of its output (1 = unchanged
  meaning by this crude measure; ``dpspark.evaluation.field_metrics``).

ε is not one scale across mechanisms (their guarantees differ): each row of the grid is the
mechanism's own, chosen to bracket where its output goes from noise to a copy of the input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import dpspark
from dpspark.config import PerturbConfig
from dpspark.evaluation import field_metrics as fm
from dpspark.rng import derived_generator, new_job_key, secure_generator
from dpspark.text import tokenize

SAMPLE = Path(__file__).with_name("reviews.parquet")
PERSONAL = frozenset({"tom", "baker", "jane", "doe", "springfield"})
# Each mechanism's own ε grid, bracketing its usable window on GloVe 50-d (50,000 words).
GRID = {
    "laplace": (4, 5, 6, 7, 8, 10, 12),
    "mahalanobis": (4, 5, 6, 7, 8, 10, 12),
    "vickrey": (4, 5, 6, 8, 10, 12),
    "tem": (2, 2.5, 3, 3.5, 4, 6),
    "santext": (2, 2.5, 3, 3.5, 4, 6),
    "custext": (0.5, 1, 2, 4, 8, 16),
    "syntf-words": (10, 15, 20, 25, 30, 40),
    "1-diffractor": (0.05, 0.1, 0.2, 0.3, 0.5, 1),
}


def measure(
    mechanism: str,
    epsilon: float,
    texts: list[str],
    runs: int,
    embeddings,  # noqa: ANN001
    key: bytes | None = None,
) -> dict[str, float]:
    config = PerturbConfig.parse(
        {"input": str(SAMPLE), "output": "unused", "columns": ["text"], "epsilon": epsilon, "mechanism": mechanism}
    )
    prepared = dpspark.prepare(config, embeddings=embeddings)
    perturber = prepared.perturber()
    encode = fm.glove_encoder(prepared.embeddings)
    original = [tokenize(t)[0] for t in texts]
    named = [i for i, toks in enumerate(original) if PERSONAL & set(toks)]
    unchanged, names, cs = [], [], []
    for run in range(runs):
        rng = secure_generator() if key is None else derived_generator(key, mechanism, float(epsilon), run)
        out = [t.split() for t in perturber.perturb_texts(texts, rng)]
        unchanged.append(1 - fm.perturbation_percentage(original, out))
        names.append(np.mean([bool(PERSONAL & set(original[i]) & set(out[i])) for i in named]))
        cs.append(fm.cosine_similarity(original, out, encode))
    return {"unchanged": float(np.mean(unchanged)), "names": float(np.mean(names)), "cs": float(np.mean(cs))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="perturbations per setting (3)")
    parser.add_argument("--seed", type=int, help="fixed randomness, for a reproducible table (warns); default: OS")
    parser.add_argument("--mechanisms", default=",".join(GRID), help="comma-separated (all of the table)")
    args = parser.parse_args(argv)
    texts = [t for t in pq.read_table(SAMPLE, columns=["text"]).column("text").to_pylist() if t]
    key = None if args.seed is None else new_job_key(args.seed)
    embeddings = dpspark.load_embeddings()  # the default GloVe, loaded once
    print("| mechanism | ε | tokens unchanged (%) | rows naming someone that still show a name (%) | CS |")
    print("|---|---|---|---|---|")
    for name in args.mechanisms.split(","):
        for e in GRID[name]:
            m = measure(name, e, texts, args.runs, embeddings, key)
            print(f"| {name} | {e:g} | {100 * m['unchanged']:.1f} | {100 * m['names']:.1f} | {m['cs']:.3f} |")


if __name__ == "__main__":
    main()
