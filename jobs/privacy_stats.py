"""spark-submit entry point: spark-submit jobs/privacy_stats.py --config conf/privacy_stats.yaml [flags]."""

import sys

from dpspark.cli import main

if __name__ == "__main__":
    sys.exit(main(["privacy-stats", *sys.argv[1:]]))
