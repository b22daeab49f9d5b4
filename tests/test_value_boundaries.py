"""An event date is parsed once, where it enters (docs/architecture.md, "Value types"): a bad one is
refused there, with a message that says what is wrong, before any path, run id or SQL is built."""

from __future__ import annotations

import base64
import io
import json
import os
from contextlib import redirect_stdout
from datetime import date, datetime, timezone

import pytest

from tidemark import cli
from tidemark.base import layout
from tidemark.store.lake import Lake

DAGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dags")
# (what was given, what the message must say)
BAD = [
    ("2026-02-30", "invalid event_date '2026-02-30': day is out of range for month"),
    ("2026-3-7", "invalid event_date '2026-3-7': expected a calendar date as YYYY-MM-DD"),
    ("../../etc", "invalid event_date '../../etc': expected a calendar date as YYYY-MM-DD"),
]


def test_the_parse_returns_a_date_and_the_text_form_is_one_function():
    day = layout.as_event_date("2026-03-07")
    assert day == date(2026, 3, 7)
    assert layout.as_event_date(day) is day
    assert layout.event_date_text(day) == "2026-03-07"
    with pytest.raises(layout.InvalidPartitionValue, match="an instant, expected a calendar date"):
        layout.as_event_date(datetime(2026, 3, 7, tzinfo=timezone.utc))
    with pytest.raises(layout.InvalidPartitionValue, match="a NoneType, expected YYYY-MM-DD text or a date"):
        layout.as_event_date(None)
    with pytest.raises(TypeError, match="parse text with as_event_date"):
        layout.event_date_text("2026-03-07")  # type: ignore[arg-type]  # text must be parsed first


def test_the_lake_names_a_folder_only_from_a_date(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    day = date(2026, 3, 7)
    assert lake.run_dir(day, "0" * 32).endswith("/sessions_dedup/data/event_date=2026-03-07/run=" + "0" * 32)
    for path_of in (lambda d: lake.event_date_dir(d), lambda d: lake.run_dir(d, "0" * 32), lambda d: lake.reach_dir(d)):
        with pytest.raises(TypeError, match="parse text with as_event_date"):
            path_of("2026-03-07")  # text is parsed where it enters, never by the lake


@pytest.mark.parametrize(("given", "says"), BAD)
@pytest.mark.parametrize("command", ["dedup", "read"])
def test_the_cli_refuses_a_bad_date_in_its_option_type(tmp_path, capsys, command, given, says):
    assert cli.main([command, "--lake", str(tmp_path / "lake"), "--event-date", given]) == 2  # a usage error
    assert f"argument --event-date: {says}" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "lake" / "sessions_dedup")  # refused before any path


@pytest.mark.parametrize(("given", "says"), BAD)
def test_the_function_refuses_a_notice_with_a_bad_date(given, says):
    from cloud_function import main
    from tidemark.notices import availability_notice

    good = availability_notice.build(
        "sessions",
        [
            {
                "event_date": "2026-03-07",
                "receipt_ts": "20260307T201500123Z",
                "batch_id": 3,
                "uri": "file:///lake/sessions/event_date=2026-03-07/receipt_ts=20260307T201500123Z",
                "rows": 4,
                "events": 9,
                "pane_kinds": ["early"],
                "watermark": "2026-03-07T20:05:00Z",
                "late": False,
            }
        ],
    )
    data = base64.b64encode(json.dumps({**good, "event_date": given}).encode()).decode()

    def never_called():
        raise AssertionError("a notice with a bad date must not reach Airflow")

    with redirect_stdout(io.StringIO()):
        result = main.handle({"data": data, "messageId": "m-1", "attributes": {}}, client_factory=never_called)
    # the notice's schema (its pattern and date format) refuses it first, naming the field
    assert result["outcome"] == "rejected"
    assert result["reason"].startswith(f"event_date: '{given}'")


def test_a_corrected_notice_naming_no_real_date_is_refused():
    from tidemark.notices import corrected_notice

    body = corrected_notice.build(
        "sessions",
        date(2026, 3, 7),
        "20260307T201500123Z",
        None,
        corrected_notice.change_of(None, None),
        rows=0,
        table={"identifier": "tidemark.sessions_dedup", "location": "file:///lake", "snapshot_id": 1},
        path="file:///lake/x",
        affected_dates=[],
        committed_at="2026-03-07T20:16:00Z",
    )
    with pytest.raises(corrected_notice.InvalidNotice, match="affected_dates.0: '2026-02-30' is not a 'date'"):
        corrected_notice.validate({**body, "affected_dates": ["2026-02-30"]})


@pytest.mark.parametrize(("given", "says"), BAD)
def test_the_dag_refuses_a_bad_date_in_its_param_in_every_task_before_it_touches_the_lake(monkeypatch, given, says):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tidemark_dedup_dag_boundaries", os.path.join(DAGS, "tidemark_dedup.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    resolved: list[str] = []
    monkeypatch.setattr(module.settings, "lake_uri", lambda: resolved.append("lake") or "/nowhere")
    dag = module.tidemark_dedup()
    # every task that reads the run's params parses the date itself (run_target)
    for task_id in ("publish", "notify_corrected"):
        with pytest.raises(layout.InvalidPartitionValue) as refused:
            dag.get_task(task_id).python_callable(params={"event_date": given})
        assert says in str(refused.value), task_id
    # the dedup parses it before its skip check and before anything reaches spark-submit's command line
    with pytest.raises(layout.InvalidPartitionValue) as refused:
        dag.get_task("dedup").execute({"params": {"event_date": given}})
    assert says in str(refused.value), "dedup"
    with pytest.raises(layout.InvalidPartitionValue, match="invalid event_date"):
        module.run_target({"event_date": given})
    with pytest.raises(layout.InvalidPartitionValue, match="invalid event_date None"):
        module.run_target(None)
    assert resolved == []  # refused before the lake was looked up
    lake, day = module.run_target({"event_date": "2026-03-07"})
    assert day == date(2026, 3, 7)
    assert isinstance(lake, Lake)
    assert resolved == ["lake"]


@pytest.mark.parametrize(("given", "says"), BAD)
def test_text_given_to_the_library_is_parsed_once_at_its_entry(tmp_path, given, says):
    from tidemark.deduplication.dedup import run_dedup
    from tidemark.iceberg import reader, table_versions

    lake = Lake.open(tmp_path / "lake")
    with pytest.raises(layout.InvalidPartitionValue) as refused:
        run_dedup(lake, given)
    assert says in str(refused.value)
    # The readers take a date only: text, valid or not, is refused (a script parses it first).
    for call in (lambda: reader.read_sessions(lake, given), lambda: table_versions.current_version(lake, given)):
        with pytest.raises(TypeError, match="parse text with as_event_date"):
            call()
    assert not os.path.exists(tmp_path / "lake")  # nothing was read or written
