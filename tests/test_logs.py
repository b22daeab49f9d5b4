"""The JSON log lines: fields JSON has no type for are written as people and scripts read them."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

from tidemark.base.logs import get_logger, read_log_lines


def test_dates_and_instants_are_logged_as_iso_text(capsys):
    moment = datetime(2026, 3, 7, 20, 15, 0, 123000, tzinfo=timezone(timedelta(hours=2)))
    get_logger("test").info(
        "logged", event_date=date(2026, 3, 7), at=moment, whole=datetime(2026, 3, 7, tzinfo=timezone.utc)
    )
    (line,) = read_log_lines(capsys.readouterr().err)
    assert line["event_date"] == "2026-03-07"
    assert line["at"] == "2026-03-07T18:15:00.123000Z"  # in UTC
    assert line["whole"] == "2026-03-07T00:00:00Z"


def test_other_values_are_logged_by_their_repr(capsys):
    get_logger("test").info("logged", span=timedelta(minutes=30))
    (line,) = read_log_lines(capsys.readouterr().err)
    assert line["span"] == "datetime.timedelta(seconds=1800)"


def test_inside_an_airflow_task_lines_go_to_the_standard_logger_at_their_level(monkeypatch, caplog, capsys):
    # Airflow 3 records a task's stderr at level ERROR; its standard logging keeps each record's level.
    import logging

    from tidemark.base import logs

    log = get_logger("test")
    log.warning("outside a task", event_date=date(2026, 3, 7))
    assert [line["event"] for line in read_log_lines(capsys.readouterr().err)] == ["outside a task"]
    assert not [r for r in caplog.records if r.name == "tidemark.test"]

    monkeypatch.setenv(logs.AIRFLOW_TASK_ENV, "dedup")
    with caplog.at_level(logging.DEBUG, logger="tidemark.test"):
        log.info("published", event_date=date(2026, 3, 7))
        log.warning("slow", event_date=date(2026, 3, 7))
    records = [r for r in caplog.records if r.name == "tidemark.test"]
    assert [(r.levelno, read_log_lines(r.getMessage())[0]["event"]) for r in records] == [
        (logging.INFO, "published"),
        (logging.WARNING, "slow"),
    ]
    assert read_log_lines(records[0].getMessage())[0]["event_date"] == "2026-03-07"
