"""Regenerate examples/reviews.parquet: synthetic product reviews (no real person's text).

python examples/make_sample.py
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OPENERS = ["I bought this", "My wife ordered the", "We received our", "Just got the", "After two weeks with the"]
ITEMS = ["blender", "laptop bag", "coffee maker", "running shoes", "desk lamp", "phone case", "garden hose"]
VERDICTS = [
    "and it works great.",
    "but the handle broke after a week.",
    "and the delivery was very fast!",
    "but customer service never answered my emails.",
    "and it's exactly what the picture shows.",
    "but it was too small for our kitchen.",
    "and I would buy it again.",
]
EXTRAS = [
    "",
    " Contact me at jane.doe@example.com for details.",
    " Order number 4471-2231, shipped to Springfield.",
    " My name is Tom Baker and I live near the old mill.",
    " Highly recommended to anyone who cooks every day.",
    " The price went up since last month, though.",
]


def main() -> None:
    rng = np.random.default_rng(2026)
    n = 500
    texts: list[str | None] = []
    for i in range(n):
        if i % 97 == 13:
            texts.append(None)
        elif i % 89 == 7:
            texts.append("")
        else:
            parts = [rng.choice(OPENERS), rng.choice(ITEMS), rng.choice(VERDICTS)]
            texts.append(" ".join(parts) + str(rng.choice(EXTRAS)))
    table = pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),
            "text": pa.array(texts, pa.string()),
            "title": pa.array([f"Review of {rng.choice(ITEMS)}" for _ in range(n)], pa.string()),
            "rating": pa.array(rng.integers(1, 6, n), pa.int32()),
            "helpful": pa.array(rng.random(n) * 10, pa.float64()),
        }
    )
    out = Path(__file__).with_name("reviews.parquet")
    pq.write_table(table, out)
    print(f"wrote {n} rows to {out}")


if __name__ == "__main__":
    main()
