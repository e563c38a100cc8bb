"""`dpspark privacy-stats` for spark-submit: spark-submit "$(python -m dpspark.jobs privacy_stats)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("privacy-stats")
