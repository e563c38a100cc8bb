"""spark-submit entry point: spark-submit jobs/release_vectors.py --input ... --column ... --epsilon ..."""

import sys

from dpspark.cli import main

if __name__ == "__main__":
    sys.exit(main(["release-vectors", *sys.argv[1:]]))
