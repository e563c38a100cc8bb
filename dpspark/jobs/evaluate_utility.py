"""`dpspark evaluate-utility` for spark-submit: spark-submit "$(python -m dpspark.jobs evaluate_utility)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("evaluate-utility")
