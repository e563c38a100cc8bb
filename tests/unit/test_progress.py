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


def test_costs_estimate_from_the_series_then_the_mechanism_then_all():
    from dpspark.progress import Costs, eta_line

    c = Costs()
    assert c.estimate("tem β=0.001", "tem") is None
    c.record("tem β=0.001", "tem", 10.0)
    c.record("tem β=0.001", "tem", 20.0)
    c.record("laplace", "laplace", 4.0)
    assert c.estimate("tem β=0.001", "tem") == 15.0  # its series
    assert c.estimate("tem β=0.01", "tem") == 15.0  # its mechanism
    assert c.estimate("santext", "santext") == pytest.approx(34 / 3)  # everything measured
    assert c.mean() == pytest.approx(34 / 3)
    kinds = Costs()
    kinds.record("laplace", "laplace", 40.0, "fitted")
    kinds.record("tem β=0.001", "tem", 20.0, "exact")
    kinds.record("santext", "santext", 10.0, "exact")
    assert kinds.estimate("custext", "custext", "exact") == 15.0  # its kind
    assert kinds.estimate("vickrey", "vickrey", "fitted") == 40.0
    assert kinds.estimate("custext", "custext") == pytest.approx(70 / 3)  # no kind given: everything
    assert Costs().mean() is None
    assert eta_line("compare", 3, 40, 125.0, "grid: santext ε=5, utility") == (
        "compare: 3/40 settings measured (grid: santext ε=5, utility); about 2 min 05 s to go"
    )
    assert eta_line("compare", 0, 40, None, "preparing").endswith("; estimating the time left")


def test_periodically_calls_while_the_body_runs_and_survives_a_failing_call():
    from dpspark.progress import periodically

    calls = []

    def call():
        calls.append(1)
        raise RuntimeError("a progress line must never end the work")

    with periodically(0.02, call):
        time.sleep(0.2)
    n = len(calls)
    time.sleep(0.05)
    assert n >= 3 and len(calls) == n  # called repeatedly, and not after the body
