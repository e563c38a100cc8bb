"""Visible progress on long work: Spark UI job names and progress lines with an estimate.

Progress lines go to the ``dpspark.progress`` logger at INFO, so the CLI prints them to
stderr and ``--quiet`` silences them with every other log line. They carry counts and
times only, never data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("dpspark.progress")
HEARTBEAT = 25.0  # seconds: a watched piece of work logs a line at least this often


def describe(spark: Any, command: str, step: str, run_id: str | None = None, *, connect: bool) -> None:
    """Name the Spark jobs that follow in the Spark UI: "dpspark <command>: <step>".

    Classic sessions set the job group (``dpspark-<run id>``, so one run's jobs can be found
    and cancelled together) and its description. Spark Connect (``connect``: the caller's
    ``dpspark.spark.session.is_connect(spark)``; this module imports no Spark code) has no
    SparkContext: there the jobs are tagged ``dpspark`` and ``dpspark-<command>`` instead.
    """
    text = f"dpspark {command}: {step}"
    if connect:
        spark.addTag("dpspark")
        spark.addTag(f"dpspark-{command}")
        return
    spark.sparkContext.setJobGroup(f"dpspark-{run_id or command}", text)


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 4 s, 1 min 05 s, 1 h 02 min."""
    return _duration(seconds)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Counts finished units out of ``total`` and reports them with a time estimate.

    The estimate extrapolates the elapsed time linearly from ``fraction`` (the share of the
    work done, which may be finer than whole units).
    """

    def __init__(self, label: str, total: int, unit: str = "grid points") -> None:
        self.label, self.total, self.unit = label, total, unit
        self.started = time.monotonic()
        self.lines: list[str] = []
        self.finished = False
        self.logged_at = self.started

    def line(self, done: int, fraction: float) -> str:
        elapsed = time.monotonic() - self.started
        text = f"{self.label}: {done}/{self.total} {self.unit} done, {self.total - done} left"
        if 0 < fraction < 1:
            text += f" ({fraction:.0%} of the work; about {_duration(elapsed * (1 - fraction) / fraction)} to go)"
        elif fraction >= 1:
            text += f" (took {_duration(elapsed)})"
        return text

    def report(self, done: int, fraction: float) -> None:
        """Log the line for (done, fraction) unless it repeats the last one of less than ``HEARTBEAT``
        seconds ago, or the work was already reported finished (the watcher's last poll and the
        caller's may both see it). A unit longer than the heartbeat still shows a line that often."""
        if self.finished:
            return
        self.finished = done >= self.total and fraction >= 1
        text = self.line(done, fraction)
        now = time.monotonic()
        if not self.lines or self.lines[-1] != text or now - self.logged_at >= HEARTBEAT:
            self.lines.append(text)
            self.logged_at = now
            log.info(text)


@contextmanager
def periodically(seconds: float, call: Callable[[], None]) -> Iterator[None]:
    """Call ``call()`` every ``seconds`` while the body runs (a daemon thread; a failure of ``call`` is
    logged at debug level and the calls go on: a progress line must never end the work)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            try:
                call()
            except Exception:  # noqa: BLE001 - see the docstring
                log.debug("progress line failed", exc_info=True)

    thread = threading.Thread(target=loop, name="dpspark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def watching(progress: Progress, poll: Callable[[], tuple[int, float]], every: float = 10.0) -> Iterator[None]:
    """Report ``poll()`` = (units done, fraction done) every ``every`` seconds while the body runs."""
    with periodically(every, lambda: progress.report(*poll())):
        yield
    progress.report(*poll())


class Costs:
    """Seconds per setting measured so far, and an estimate for a setting not yet measured: the mean of
    its series (the same mechanism and parameters at another ε), else of its mechanism, else of its kind
    (settings that cost alike: compare's, how the attacker gets its likelihoods), else of every setting
    measured; None before the first."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any, float]] = []  # (series, mechanism, kind, seconds)

    def record(self, series: str, mechanism: str, seconds: float, kind: Any = None) -> None:
        self.seen.append((series, mechanism, kind, seconds))

    def estimate(self, series: str, mechanism: str, kind: Any = None) -> float | None:
        for match in (
            lambda s, m, k: s == series,
            lambda s, m, k: m == mechanism,
            lambda s, m, k: kind is not None and k == kind,
            lambda s, m, k: True,
        ):
            times = [t for s, m, k, t in self.seen if match(s, m, k)]
            if times:
                return sum(times) / len(times)
        return None

    def mean(self) -> float | None:
        """The mean of every setting measured (None before the first)."""
        return sum(t for *_, t in self.seen) / len(self.seen) if self.seen else None


def eta_line(label: str, done: int, planned: int, remaining: float | None, step: str) -> str:
    """A run-wide progress line: settings measured out of those planned, and the time left in all."""
    text = f"{label}: {done}/{planned} settings measured ({step})"
    return text + ("; estimating the time left" if remaining is None else f"; about {_duration(remaining)} to go")


def log_progress(text: str) -> None:
    log.info(text)
