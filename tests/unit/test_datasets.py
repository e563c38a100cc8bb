"""The labelled datasets read from installed packages: what they hold, and a fixed choice of rows."""

from __future__ import annotations

import collections

import pyarrow.parquet as pq
import pytest

from dpspark.evaluation.datasets import SMS_SPAM_ROWS, rotten_tomatoes, rotten_tomatoes_table, sms_spam_table

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def test_sms_spam_has_its_messages_and_two_labels():
    t = sms_spam_table()
    assert t.num_rows == SMS_SPAM_ROWS and t.column_names == ["id", "text", "label"]
    assert collections.Counter(t.column("label").to_pylist()) == {"ham": SMS_SPAM_ROWS - 638, "spam": 638}


def test_rotten_tomatoes_reviews_without_the_plot_summaries(tmp_path):
    t = rotten_tomatoes_table()
    assert t.column_names == ["id", "text", "label", "movie"]
    assert collections.Counter(t.column("label").to_pylist()) == {"fresh": 7403, "rotten": 5405}
    assert all(isinstance(x, str) and x for x in t.column("text").to_pylist())
    some = rotten_tomatoes_table(rows=1000)  # evenly spaced: both labels and many movies, a fixed choice
    labels = collections.Counter(some.column("label").to_pylist())
    assert some.num_rows == 1000 and 500 < labels["fresh"] < 650 and len(set(some.column("movie").to_pylist())) > 300
    assert some.column("text").to_pylist() == rotten_tomatoes_table(rows=1000).column("text").to_pylist()
    path = rotten_tomatoes(tmp_path, rows=1000)
    assert pq.read_table(path).num_rows == 1000 and rotten_tomatoes(tmp_path, rows=1000) == path
