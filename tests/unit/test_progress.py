import logging
import time

import pytest

from dpspark.progress import Progress, _duration, watching

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def test_duration_and_estimate():
    assert [_duration(s) for s in (4.4, 65, 3725)] == ["4 s", "1 min 05 s", "1 h 02 min"]
    p = Progress("privacy-stats", 14)
    p.started -= 60  # a minute in, a quarter of the work done: three more minutes to go
    assert p.line(3, 0.25) == "privacy-stats: 3/14 grid points done, 11 left (25% of the work; about 3 min 00 s to go)"
    assert p.line(14, 1.0) == "privacy-stats: 14/14 grid points done, 0 left (took 1 min 00 s)"


def test_watching_reports_while_running_and_at_the_end(caplog):
    state = {"done": 0}
    p = Progress("calibrate", 3)
    with caplog.at_level(logging.INFO, logger="dpspark.progress"):
        with watching(p, lambda: (state["done"], state["done"] / 3), every=0.05):
            for i in range(1, 4):
                time.sleep(0.2)
                state["done"] = i
    assert p.lines[-1].startswith("calibrate: 3/3 grid points done, 0 left (took ")
    assert any(" 1/3 " in line or " 2/3 " in line for line in p.lines[:-1])  # seen during the work
    assert [r.getMessage() for r in caplog.records] == p.lines  # each distinct line logged once


def test_the_finished_line_is_reported_once():
    p = Progress("job", 2)
    p.report(1, 0.5)
    p.report(2, 1.0)
    p.started -= 5  # a later second: the same state, another "took" figure
    p.report(2, 1.0)  # the watcher's last poll and the caller's final report
    assert len(p.lines) == 2 and "took" in p.lines[-1]


def test_a_unit_longer_than_the_heartbeat_still_shows_a_line(monkeypatch):
    """No unit finishes and the estimate is unchanged: the line repeats once the heartbeat has passed, so a
    long step never looks hung for more than HEARTBEAT seconds."""
    import dpspark.progress as progress

    p = Progress("privacy-risk: exact likelihoods", 4, "tasks")
    p.report(0, 0.0)
    p.report(0, 0.0)
    assert len(p.lines) == 1  # within the heartbeat: not repeated
    monkeypatch.setattr(progress, "HEARTBEAT", 0.0)
    p.report(0, 0.0)
    assert p.lines == [p.lines[0]] * 2 and p.lines[0].startswith("privacy-risk: exact likelihoods: 0/4 tasks done")
