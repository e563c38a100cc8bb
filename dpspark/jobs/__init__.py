"""spark-submit entry points, shipped in the wheel (spark-submit needs a file, not a module).

    spark-submit [options] "$(python -m dpspark.jobs perturb)" --config conf/perturb.yaml --epsilon 8

``python -m dpspark.jobs NAME`` prints the path of job NAME's file in the installed package;
``python -m dpspark.jobs.NAME [flags]`` runs it in-process (a Databricks "Python wheel" task can
call the ``dpspark`` console script instead: package ``dpspark``, entry point ``dpspark``, the
command and its flags as parameters). Each job is ``dpspark <command>`` under the session
spark-submit started.
"""

from __future__ import annotations

import sys


def run(command: str) -> None:
    """Run ``dpspark <command>`` with this process's arguments and exit with its code."""
    from dpspark.cli import main

    sys.exit(main([command, *sys.argv[1:]]))
