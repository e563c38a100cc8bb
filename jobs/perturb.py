"""spark-submit entry point: spark-submit jobs/perturb.py --config conf/perturb.yaml [flags]."""

import sys

from dpspark.cli import main

if __name__ == "__main__":
    sys.exit(main(["perturb", *sys.argv[1:]]))
