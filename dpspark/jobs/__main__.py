"""``python -m dpspark.jobs NAME``: the path of a job's file, for spark-submit."""

import sys
from pathlib import Path

here = Path(__file__).resolve().parent
jobs = sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
if len(sys.argv) != 2 or sys.argv[1] not in jobs:
    sys.exit(f"usage: python -m dpspark.jobs NAME, NAME one of: {', '.join(jobs)}")
print(here / f"{sys.argv[1]}.py")
