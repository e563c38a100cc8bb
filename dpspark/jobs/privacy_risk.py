"""`dpspark privacy-risk` for spark-submit: spark-submit "$(python -m dpspark.jobs privacy_risk)" [flags]."""

from dpspark.jobs import run

if __name__ == "__main__":
    run("privacy-risk")
