"""`dpspark perturb` for spark-submit: spark-submit "$(python -m dpspark.jobs perturb)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("perturb")
