"""The corrected-partition notice: schema, what a version's notice says, one outbox entry per
published version (commit hook, retried commit, the DAG's safety net). No servers, no Spark: versions
are built with pyarrow (tests/icebergkit.py) and committed with tidemark.iceberg.commits."""

from __future__ import annotations

import copy
import json
import os
import re
from datetime import date
from pathlib import Path

import pytest

from tests.icebergkit import commit_recording as commit
from tests.icebergkit import prepared_run, receipt, version_with
from tests.icebergkit import publish_recorded_run as publish_run
from tidemark.iceberg import commits, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.notices import corrected_delivery, corrected_notice
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = "2026-03-10"  # as notices and their JSON spell it
DAY = date(2026, 3, 10)  # as the library takes it


def owed(lake: Lake) -> list[dict]:
    return [e["notice"] for e in corrected_delivery.outbox(lake).owed()]


def test_each_published_version_records_one_notice_saying_how_the_date_changed(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2), "b" * 32: (9, 1)})
    v2 = version_with(
        lake, [receipt(1), receipt(2)], {"a" * 32: (5, 2), "b" * 32: (30, 3), "c" * 32: (3, 1)}, affected=["2026-03-11"]
    )
    v3 = version_with(lake, [receipt(1), receipt(2), receipt(3)], {"b" * 32: (30, 3), "c" * 32: (3, 1)})
    v4 = version_with(lake, [receipt(1), receipt(2), receipt(3), receipt(4)], {"b" * 32: (30, 3), "c" * 32: (3, 1)})
    first, second, third, fourth = owed(lake)
    assert [n["version"] for n in (first, second, third, fourth)] == [v.version for v in (v1, v2, v3, v4)]
    assert first["previous_version"] is None
    assert first["change"] == {
        "kind": "first",
        "sessions_added": 2,
        "sessions_removed": 0,
        "sessions_changed": 0,
        "sessions_unchanged": 0,
    }
    assert second["previous_version"] == v1.version
    assert second["change"] == {
        "kind": "changed",
        "sessions_added": 1,
        "sessions_removed": 0,
        "sessions_changed": 1,
        "sessions_unchanged": 1,
    }
    assert second["affected_dates"] == ["2026-03-11"]
    assert second["rows"] == 3
    assert third["change"] == {
        "kind": "changed",
        "sessions_added": 0,
        "sessions_removed": 1,
        "sessions_changed": 0,
        "sessions_unchanged": 2,
    }
    assert fourth["change"]["kind"] == "unchanged"  # a new version with the same sessions
    # Where to read it: the snapshot that published the version holds exactly its sessions.
    tbl = iceberg.load(lake)
    for body, n in ((first, 2), (second, 3), (fourth, 2)):
        assert body["table"]["identifier"] == "tidemark.sessions_dedup"
        assert tbl.scan(snapshot_id=body["table"]["snapshot_id"]).to_arrow().num_rows == n
        assert os.path.isdir(body["path"].removeprefix("file://"))
    attrs = corrected_delivery.outbox(lake).owed()[1]["attributes"]
    assert attrs == {
        "dataset": "sessions",
        "event_date": D,
        "change": "changed",
        "version": v2.version,
        "schema_version": "1",
        "notice_id": second["notice_id"],
    }


def test_a_version_after_or_before_an_empty_one_records_its_notice(tmp_path):
    # A date whose first version holds no session (only affected by a session of the day before)
    # and then gets one, and back: pyiceberg scans a snapshot without files with other Arrow
    # types (large_string) than one with files; every version still gets its notice.
    lake = Lake.open(tmp_path / "lake")
    empty = version_with(lake, [receipt(1)], {})
    one = version_with(lake, [receipt(1), receipt(2)], {"a" * 32: (5, 2)})
    empty_again = version_with(lake, [receipt(1), receipt(2), receipt(3)], {})
    notices = owed(lake)
    assert [n["version"] for n in notices] == [v.version for v in (empty, one, empty_again)]
    first, added, removed = (n["change"] for n in notices)
    assert first["kind"] == "first"
    assert first["sessions_added"] == 0
    assert added["kind"] == "changed"
    assert (added["sessions_added"], added["sessions_removed"]) == (1, 0)
    assert removed["kind"] == "changed"
    assert (removed["sessions_added"], removed["sessions_removed"]) == (0, 1)
    # the DAG's notify task (the safety net) finds the current version's notice recorded
    assert corrected_delivery.record_current(lake, DAY) is None


def test_a_version_recorded_again_writes_no_second_entry(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    marker = prepared_run(lake, D, [receipt(1)])
    assert commit(lake, marker).committed
    # The commit retried after a lost answer (its version is current), the DAG's safety net, a rerun.
    assert commit(lake, copy.deepcopy(marker)).committed
    assert corrected_delivery.record_current(lake, DAY) is None
    assert not commit(lake, prepared_run(lake, D, [receipt(1)])).committed  # nothing new: no version
    assert len(owed(lake)) == 1
    # After it was sent, too.
    box = corrected_delivery.outbox(lake)
    box.mark_sent(box.owed()[0], "m1", "2026-03-10T02:00:00.000Z")
    assert corrected_delivery.record_current(lake, DAY) is None
    assert box.owed() == []
    assert len(box.sent()) == 1


def test_a_crash_between_the_commit_and_its_notice_is_healed_by_the_safety_net(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")

    def crash(*_):
        raise OSError("disk full")  # the hook cannot write: the commit must still succeed

    monkeypatch.setattr(corrected_delivery.Outbox, "record", crash)
    outcome = publish_run(lake, D, [receipt(1)], sessions=2)
    assert outcome.committed
    assert table_versions.current_version(lake, DAY).version == outcome.current.version
    monkeypatch.undo()
    assert owed(lake) == []
    body = corrected_delivery.record_current(lake, DAY)
    assert body["version"] == outcome.current.version
    assert body["rows"] == 2
    assert [n["notice_id"] for n in owed(lake)] == [body["notice_id"]]


def test_without_a_topic_notify_records_and_leaves_the_notice_owed(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    monkeypatch.delenv("TIDEMARK_CORRECTED_TOPIC_PATH", raising=False)
    commits.commit(lake, prepared_run(lake, D, [receipt(1)]))  # a commit whose process died before the record
    assert corrected_delivery.notify(lake, DAY) == {"recorded": True, "owed": 1, "topic": None}
    assert corrected_delivery.notify(lake, DAY) == {"recorded": False, "owed": 1, "topic": None}


def test_schema_refuses_what_a_consumer_could_not_trust():
    body = corrected_notice.build(
        "sessions",
        DAY,
        "20260310T020000000Z",
        "20260310T010000000Z",
        corrected_notice.change_of(
            "20260310T010000000Z",
            {"sessions_added": 1, "sessions_removed": 0, "sessions_changed": 0, "sessions_unchanged": 4},
        ),
        5,
        {"identifier": "tidemark.sessions_dedup", "location": "file:///l", "snapshot_id": 7},
        "file:///l/run",
        [],
        "2026-03-10T02:00:01.000Z",
    )
    assert corrected_notice.decode(corrected_notice.encode(body)) == body
    bad = {
        "event_date": ("event_date", "2026-02-31"),
        "version": ("version", "2026-03-10T02:00:00Z"),
        "committed_at": ("committed_at", "yesterday"),  # the date-time format is checked
        "previous_version": ("previous_version", "20260310T030000000Z"),  # not older
        "notice_id": ("notice_id", "0" * 32),
        "change.kind": ("change", {**body["change"], "kind": "first"}),
        "extra": ("surprise", 1),
    }
    for _name, (field, value) in bad.items():
        with pytest.raises(corrected_notice.InvalidNotice):
            corrected_notice.validate({**body, field: value})
    with pytest.raises(corrected_notice.InvalidNotice):
        corrected_notice.decode(b"{not json")
    assert corrected_notice.change_of("20260310T010000000Z", None)["kind"] == "unknown"


def test_docs_example_follows_the_schema():
    text = Path(os.path.join(ROOT, "docs", "notices.md")).read_text()
    section = text[text.index("## The corrected-partition notice") :]
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    assert corrected_notice.validate(example)
    documented = set(re.findall(r"^\| `([\w.]+)`", section, re.M))
    assert set(corrected_notice.schema()["properties"]) <= documented
    assert set(corrected_notice.ATTRIBUTES) <= documented


def test_the_notices_command_lists_corrected_notices_with_their_versions(tmp_path, capsys, monkeypatch):
    from tidemark.cli import main as cli_main

    monkeypatch.setenv("COLUMNS", "250")  # rich folds long cells in a narrow table

    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    v2 = version_with(lake, [receipt(1), receipt(2)], {"a" * 32: (9, 3), "b" * 32: (3, 1)})
    box = corrected_delivery.outbox(lake)
    first = next(e for e in box.owed() if e["notice"]["version"] == v1.version)
    box.mark_sent(first, "m-1", "2026-03-10T05:00:00.000Z")
    capsys.readouterr()

    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [
        (r["topic"], r["state"], r["event_date"], r["version"], r["previous_version"], r["change"]["kind"])
        for r in rows
    ] == [
        ("corrected", "sent", D, v1.version, None, "first"),
        ("corrected", "owed", D, v2.version, v1.version, "changed"),
    ]
    assert rows[0]["message_id"] == "m-1"
    assert rows[1]["change"]["sessions_added"] == 1

    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sent": 1, "owed": 1}
    assert cli_main(["notices", "--lake", str(lake), "--topic", "all", "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "availability": {"sent": 0, "owed": 0, "waiting": 0},
        "corrected": {"sent": 1, "owed": 1},
    }
    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--state", "owed"]) == 0
    table = capsys.readouterr().out
    assert "corrected notices: 1 sent, 1 owed" in table
    assert v2.version in table
    assert v1.version in table
    assert "changed: +1 -0 ~1 =0" in table
    # The availability listing is what it was: corrected notices only when asked for.
    assert cli_main(["notices", "--lake", str(lake), "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sent": 0, "owed": 0, "waiting": 0}
    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--check"]) == 2
    assert "--check is about availability notices" in capsys.readouterr().err


# -- two sinks: Pub/Sub and Airflow's asset events ----------------------------------------------


def test_an_entry_stays_owed_to_each_sink_until_that_sink_has_it(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    box = corrected_delivery.outbox(lake)
    (entry,) = box.owed()
    assert box.owed("airflow") == [entry]
    box.mark_sent(entry, "m1", "2026-03-10T00:00:00Z")  # Pub/Sub has it; Airflow does not yet
    assert box.owed() == []
    assert box.owed("airflow") == [entry]
    assert os.path.exists(box.path("outbox", entry["notice"]["notice_id"]))
    assert corrected_delivery.record_current(lake, DAY) is None  # still known: no second entry
    box.mark_sent(entry, "17", "2026-03-10T00:00:01Z", sink="airflow")
    assert box.owed() == []
    assert box.owed("airflow") == []
    assert not os.path.exists(box.path("outbox", entry["notice"]["notice_id"]))
    assert [e["message_id"] for e in box.sent("airflow")] == ["17"]
    assert box.sent()[0]["message_id"] == "m1"
    assert box.sent("airflow")[0]["notice"]["version"] == v1.version
    # A drain killed between the last sent record and the outbox delete: owed() finishes it.
    version_with(lake, [receipt(1), receipt(2)], {"a" * 32: (9, 3)})
    (second,) = box.owed("airflow")
    for sink in ("pubsub", "airflow"):
        sent_file = box.path(box._sink(sink), second["notice"]["notice_id"])
        os.makedirs(os.path.dirname(sent_file), exist_ok=True)
        with open(sent_file, "w") as handle:
            json.dump({**second, "message_id": "x", "published_at": "2026-03-10T00:00:02Z"}, handle)
    assert box.owed() == []
    assert box.owed("airflow") == []
    assert not os.path.exists(box.path("outbox", second["notice"]["notice_id"]))
    with pytest.raises(ValueError, match="unknown sink"):
        box.owed("kafka")


def test_only_an_entry_whose_send_was_attempted_may_have_reached_airflow(tmp_path):
    """The airflow sink's attempt log: written before each POST, removed once Airflow answered. An
    entry with none was never posted (no look-up at Airflow needed); one with an attempt, or one
    recorded before the log began (an older drain did not log), may have been."""
    lake = Lake.open(tmp_path / "lake")
    box = corrected_delivery.outbox(lake)
    version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    (old,) = box.owed("airflow")
    attempts = box.attempts("airflow")
    began = attempts.began()
    assert old["recorded_at"] <= began
    assert attempts.may_have_been_sent(old)
    assert box.attempts("airflow").began() == began  # the log's start is written once
    version_with(lake, [receipt(1), receipt(2)], {"a" * 32: (9, 3)})
    new = next(e for e in box.owed("airflow") if e["notice"]["notice_id"] != old["notice"]["notice_id"])
    assert new["recorded_at"] > began
    assert not attempts.may_have_been_sent(new)
    attempts.mark(new["notice"]["notice_id"])
    assert attempts.may_have_been_sent(new)
    box.mark_sent(new, "18", "2026-03-10T00:00:03Z", sink="airflow")
    assert not os.path.exists(box.path("asset_events_attempted", new["notice"]["notice_id"]))
    with pytest.raises(ValueError, match="keeps no attempt log"):
        box.attempts("pubsub")


def _warnings(err: str, event: str) -> list[dict]:
    """The structured log lines (JSON on stderr) at level warning whose message starts with `event`."""
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("level") == "warning" and line["event"].startswith(event)]


def test_the_publish_tasks_wait_for_an_unreachable_api_is_a_duration_from_the_environment():
    assert corrected_delivery.emit_timeout({}) == corrected_delivery.EMIT_TIMEOUT_S
    assert (
        corrected_delivery.emit_timeout({corrected_delivery.EMIT_TIMEOUT_ENV: " "}) == corrected_delivery.EMIT_TIMEOUT_S
    )
    assert corrected_delivery.emit_timeout({corrected_delivery.EMIT_TIMEOUT_ENV: "2m"}) == 120.0
    assert corrected_delivery.emit_timeout({corrected_delivery.EMIT_TIMEOUT_ENV: "500ms"}) == 0.5
    with pytest.raises(ValueError, match="TIDEMARK_ASSET_EVENTS_TIMEOUT: invalid duration '30'"):
        corrected_delivery.emit_timeout({corrected_delivery.EMIT_TIMEOUT_ENV: "30"})


def test_with_airflow_down_the_asset_events_stay_owed_and_the_dag_task_does_not_fail(tmp_path, capsys):
    """The DAG's publish task (corrected_delivery.emit) with the API unreachable: no exception (the
    run must not fail for it), the entry stays owed, and a warning names the date and version."""
    from tidemark.devstack.process import free_port
    from tidemark.orchestration.airflow_api import AirflowClient

    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    client = AirflowClient(f"http://127.0.0.1:{free_port()}", "none", timeout=(0.5, 1.0))  # nothing listens
    assert corrected_delivery.emit_owed(lake, client, timeout=2, backoff_max=0.5) == 1
    assert len(corrected_delivery.outbox(lake).owed("airflow")) == 1
    assert corrected_delivery.outbox(lake).sent("airflow") == []
    capsys.readouterr()
    result = corrected_delivery.emit(lake, DAY, client, timeout=1)
    assert result == {
        "recorded": False,
        "version": v1.version,
        "owed": 1,
        "delivered": False,
        "reason": "unreachable",
    }
    (warning,) = _warnings(capsys.readouterr().err, "asset events stay owed: Airflow API unreachable")
    assert warning["event_date"] == D
    assert warning["version"] == v1.version
    assert warning["owed_versions"] == [f"{D}={v1.version}"]
    assert [e["notice"]["version"] for e in corrected_delivery.outbox(lake).owed("airflow")] == [v1.version]


def test_without_an_airflow_api_configured_the_entry_stays_owed_at_once(tmp_path, capsys, monkeypatch):
    """`airflow dags test` on a laptop: no tidemark_airflow_api connection, no AIRFLOW_BASE_URL.
    The task's client factory (airflow_api.for_tasks, the real one) says NotConfigured; emit records
    the date's entry (the safety net) and leaves it owed without waiting for any timeout."""
    import time

    from tidemark.orchestration import airflow_api

    monkeypatch.delenv("AIRFLOW_BASE_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_TIDEMARK_AIRFLOW_API", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    box = corrected_delivery.outbox(lake)
    # A crash between the commit and its hook: the entry is missing until the safety net records it.
    for entry in box.owed("airflow"):
        os.remove(box.path("outbox", entry["notice"]["notice_id"]))
    assert box.owed("airflow") == []
    capsys.readouterr()
    began = time.monotonic()
    result = corrected_delivery.emit(lake, DAY, airflow_api.for_tasks, timeout=60)
    assert time.monotonic() - began < 30
    assert result == {
        "recorded": True,
        "version": v1.version,
        "owed": 1,
        "delivered": False,
        "reason": "not configured",
    }
    (warning,) = _warnings(capsys.readouterr().err, "asset events stay owed: no Airflow API configured")
    assert warning["event_date"] == D
    assert warning["version"] == v1.version
    assert warning["owed"] == 1
    assert [e["notice"]["version"] for e in box.owed("airflow")] == [v1.version]
    # A connection that exists but is wrong is an operator's error to see, not "not configured".
    monkeypatch.setenv("AIRFLOW_BASE_URL", "ftp://nowhere")
    with pytest.raises(airflow_api.ConfigError, match="AIRFLOW_BASE_URL must be set"):
        corrected_delivery.emit(lake, DAY, airflow_api.for_tasks)


class _RefusingAirflow:
    """A real HTTP server on loopback that knows the asset and refuses every event with a 422 (what
    Airflow answers a body it cannot accept: a bug of ours, not an outage). Airflow itself accepts
    every body tidemark builds, so a refusal cannot be provoked there."""

    def __init__(self):
        import http.server
        import threading

        posts = self.posts = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                if self.path.startswith("/api/v2/assets/events"):
                    self._json(200, {"asset_events": [], "total_entries": 0})
                else:
                    self._json(200, {"assets": [{"id": 7, "name": "tidemark.sessions_dedup"}], "total_entries": 1})

            def do_POST(self):  # noqa: N802
                posts.append(self.rfile.read(int(self.headers["Content-Length"])))
                self._json(422, {"detail": [{"type": "missing", "loc": ["body", "asset_id"]}]})

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_refused_asset_event_fails_the_task_at_once_and_stays_owed(tmp_path, capsys):
    import time

    from tidemark.orchestration.airflow_api import AirflowClient, AirflowRejected

    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2)})
    refusing = _RefusingAirflow()
    try:
        began = time.monotonic()
        with pytest.raises(AirflowRejected, match="HTTP 422"):
            corrected_delivery.emit(lake, DAY, AirflowClient(refusing.url, "none"), timeout=60)
        assert time.monotonic() - began < 10  # not retried until the timeout: retrying cannot help
        assert len(refusing.posts) == 1
    finally:
        refusing.close()
    assert [e["notice"]["version"] for e in corrected_delivery.outbox(lake).owed("airflow")] == [v1.version]
    errors = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert any(
        e["level"] == "error" and e["event"].startswith("sink refused a notice") and e["sink"] == "airflow"
        for e in errors
    )
