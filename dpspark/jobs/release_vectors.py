"""`dpspark release-vectors` for spark-submit: spark-submit "$(python -m dpspark.jobs release_vectors)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("release-vectors")
