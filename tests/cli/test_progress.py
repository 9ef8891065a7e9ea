"""A long task's phases on reconciler.progress, and how the CLI shows them: plain lines without a
terminal, one live line rewritten in place on a terminal (the real runs: tests/traffic/test_progress.py)."""

from __future__ import annotations

import io
import logging
import re

import pytest

from reconciler import progress
from reconciler.cli.progress import LiveLine, PlainLines

pytestmark = pytest.mark.unit


def _told(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "reconciler.progress"]


def test_a_task_tells_its_phases_with_the_time_since_it_began_and_its_end(caplog):
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        with progress.task():
            progress.phase("starting Spark (local[2])")
            with progress.task():  # on_sample's own task, inside the command's
                progress.phase("reading 1,000 messages")
            progress.phase("writing the report")
    lines = _told(caplog)
    assert lines[0] == "starting Spark (local[2])…"
    assert re.fullmatch(r"reading 1,000 messages… \(after \d+\.\d s\)", lines[1])
    assert re.fullmatch(r"writing the report… \(after \d+\.\d s\)", lines[2])
    assert re.fullmatch(r"done in \d+\.\d s", lines[3])
    assert len(lines) == 4


def test_an_exception_ends_the_task_as_stopped_and_phases_outside_a_task_are_silent(caplog):
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        progress.phase("starting Spark (local[2])")
        with pytest.raises(KeyboardInterrupt), progress.task():
            progress.phase("evaluating 3 filters over 1 topic")
            raise KeyboardInterrupt
        with progress.task():
            pass  # no phase, nothing to end
    lines = _told(caplog)
    assert lines[0] == "evaluating 3 filters over 1 topic…"
    assert re.fullmatch(r"stopped after \d+\.\d s", lines[1])
    assert len(lines) == 2


def _live(stream: io.StringIO) -> logging.Logger:
    logger = logging.getLogger("tests.progress.live")
    logger.handlers[:] = [LiveLine(stream)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def _after(record_logger: logging.Logger, phase: progress.Phase | None, message: str) -> None:
    record_logger.info(message, extra={} if phase is None else {progress.PHASE: phase})


def test_a_live_line_is_rewritten_in_place_a_notice_goes_above_it_and_the_end_finishes_it():
    stream = io.StringIO()
    logger = _live(stream)
    started = 0.0  # long ago: the clock shows a large number, whatever it is
    _after(logger, progress.Phase(progress.Step.BEGINS, "starting Spark (local[2])", started), "starting Spark (local[2])…")
    _after(logger, None, "connection lost, retrying (attempt 2 of 6)…")
    _after(logger, progress.Phase(progress.Step.BEGINS, "reading 20 messages", started), "reading 20 messages…")
    _after(logger, progress.Phase(progress.Step.DONE, "reading 20 messages", started), "done in 1.0 s")
    text = stream.getvalue()
    assert text.endswith("\n") and text.count("\n") == 2  # the notice's line and the finished line
    notice, finished, rest = text.split("\n")
    assert rest == ""
    assert re.fullmatch(r"\r\x1b\[Kstarting Spark \(local\[2\]\)… [\d.]+ s(\r\x1b\[Kstarting Spark \(local\[2\]\)… [\d.]+ s)*"
                        r"\r\x1b\[Kconnection lost, retrying \(attempt 2 of 6\)…", notice), notice
    # What a terminal shows last on that line: the text after the last carriage return.
    assert re.fullmatch(r"\x1b\[Kreading 20 messages… done in [\d.]+ s", finished.rsplit("\r", 1)[1])
    assert "\r\x1b[Kstarting Spark (local[2])… " in finished and "\r\x1b[Kreading 20 messages… " in finished


def test_a_live_line_left_running_is_finished_when_the_handler_closes():
    stream = io.StringIO()
    handler = LiveLine(stream)
    stream.close = lambda: None  # keep the text readable after close()
    record = logging.LogRecord("reconciler.progress", logging.INFO, __file__, 1, "x…", None, None)
    setattr(record, progress.PHASE, progress.Phase(progress.Step.BEGINS, "evaluating 1 filter over 1 topic", 0.0))
    handler.handle(record)
    handler.close()
    assert stream.getvalue().startswith("\r\x1b[Kevaluating 1 filter over 1 topic… ") and stream.getvalue().endswith("\n")


def test_a_live_line_is_cut_to_the_terminal_width():
    stream = io.StringIO()
    logger = _live(stream)
    _after(logger, progress.Phase(progress.Step.BEGINS, "x" * 500, 0.0), "x…")
    _after(logger, progress.Phase(progress.Step.STOPPED, "x" * 500, 0.0), "stopped after 1.0 s")
    for drawn in stream.getvalue().split("\r\x1b[K")[1:]:
        assert len(drawn.rstrip("\n")) <= 79  # StringIO has no terminal: 80 columns assumed


def test_without_a_terminal_the_cli_prints_every_record_as_a_plain_line(capsys):
    from reconciler.cli import configure_logging

    configure_logging(False)
    shown = [h for h in logging.getLogger("reconciler.progress").handlers if isinstance(h, PlainLines | LiveLine)]
    assert [type(h) for h in shown] == [PlainLines]
    with progress.task():
        progress.phase("starting Spark (local[2])")
        progress.phase("reading the sample")
    err = capsys.readouterr().err
    assert re.fullmatch(r"starting Spark \(local\[2\]\)…\nreading the sample… \(after [\d.]+ s\)\ndone in [\d.]+ s\n", err), err


@pytest.mark.parametrize(
    ("master", "shown"),
    [
        ("local[*]", "local[*]"),
        ("spark://spark-master:7077", "spark://spark-master:7077"),
        ("sc://spark.example.com:443/;use_ssl=true;token=s3cr3t", "sc://spark.example.com:443"),
        ("k8s://https://admin:pw@k8s.example.com:6443", "k8s://https://k8s.example.com:6443"),
        ("yarn", "yarn"),
    ],
)
def test_progress_names_the_spark_master_without_its_secrets(master, shown):
    from reconciler.traffic.spark.session import shown_master

    assert shown_master(master) == shown


def test_with_v_progress_is_a_log_line_among_the_others():
    from reconciler.cli import configure_logging

    logger, root = logging.getLogger("reconciler.progress"), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(True)
        assert not [h for h in logger.handlers if isinstance(h, PlainLines | LiveLine)]
        assert logger.propagate and logger.isEnabledFor(logging.INFO)
    finally:
        root.handlers[:] = handlers  # -v's stderr handler must not outlive the test
        root.setLevel(level)
        configure_logging(False)
