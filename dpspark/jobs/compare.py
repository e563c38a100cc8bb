"""`dpspark compare` for spark-submit: spark-submit "$(python -m dpspark.jobs compare)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("compare")
