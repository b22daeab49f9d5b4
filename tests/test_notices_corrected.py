"""The corrected-partition notice: schema, what a version's notice says, one outbox entry per
published version (commit hook, retried commit, the DAG's safety net). No servers, no Spark: versions
are built with pyarrow (tests/icebergkit.py) and committed with tidemark.publish."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from tests.icebergkit import commit_recording as commit
from tests.icebergkit import prepared_run, receipt, version_with
from tests.icebergkit import publish_recorded_run as publish_run
from tidemark import corrected_notice, publish
from tidemark import table as iceberg
from tidemark.lake import Lake
from tidemark.notices import corrected

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = "2026-03-10"


def owed(lake: Lake) -> list[dict]:
    return [e["notice"] for e in corrected.outbox(lake).owed()]


def test_each_published_version_records_one_notice_saying_how_the_date_changed(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    v1 = version_with(lake, [receipt(1)], {"a" * 32: (5, 2), "b" * 32: (9, 1)})
    v2 = version_with(
        lake, [receipt(1), receipt(2)], {"a" * 32: (5, 2), "b" * 32: (30, 3), "c" * 32: (3, 1)}, affected=["2026-03-11"]
    )
    v3 = version_with(lake, [receipt(1), receipt(2), receipt(3)], {"b" * 32: (30, 3), "c" * 32: (3, 1)})
    v4 = version_with(lake, [receipt(1), receipt(2), receipt(3), receipt(4)], {"b" * 32: (30, 3), "c" * 32: (3, 1)})
    first, second, third, fourth = owed(lake)
    assert [n["version"] for n in (first, second, third, fourth)] == [v["version"] for v in (v1, v2, v3, v4)]
    assert first["previous_version"] is None and first["change"] == {
        "kind": "first",
        "sessions_added": 2,
        "sessions_removed": 0,
        "sessions_changed": 0,
        "sessions_unchanged": 0,
    }
    assert second["previous_version"] == v1["version"] and second["change"] == {
        "kind": "changed",
        "sessions_added": 1,
        "sessions_removed": 0,
        "sessions_changed": 1,
        "sessions_unchanged": 1,
    }
    assert second["affected_dates"] == ["2026-03-11"] and second["rows"] == 3
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
    attrs = corrected.outbox(lake).owed()[1]["attributes"]
    assert attrs == {
        "dataset": "sessions",
        "event_date": D,
        "change": "changed",
        "version": v2["version"],
        "schema_version": "1",
        "notice_id": second["notice_id"],
    }


def test_a_version_recorded_again_writes_no_second_entry(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    marker = prepared_run(lake, D, [receipt(1)])
    assert commit(lake, marker).committed
    # The commit retried after a lost answer (its version is current), the DAG's safety net, a rerun.
    assert commit(lake, copy.deepcopy(marker)).committed
    assert corrected.record_current(lake, D) is None
    assert not commit(lake, prepared_run(lake, D, [receipt(1)])).committed  # nothing new: no version
    assert len(owed(lake)) == 1
    # After it was sent, too.
    box = corrected.outbox(lake)
    box.mark_sent(box.owed()[0], "m1", "2026-03-10T02:00:00.000Z")
    assert corrected.record_current(lake, D) is None and box.owed() == [] and len(box.sent()) == 1


def test_a_crash_between_the_commit_and_its_notice_is_healed_by_the_safety_net(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")

    def crash(*_):
        raise OSError("disk full")  # the hook cannot write: the commit must still succeed

    monkeypatch.setattr(corrected.Outbox, "record", crash)
    outcome = publish_run(lake, D, [receipt(1)], sessions=2)
    assert outcome.committed and publish.current_version(lake, D)["version"] == outcome.current["version"]
    monkeypatch.undo()
    assert owed(lake) == []
    body = corrected.record_current(lake, D)
    assert body["version"] == outcome.current["version"] and body["rows"] == 2
    assert [n["notice_id"] for n in owed(lake)] == [body["notice_id"]]


def test_without_a_topic_notify_records_and_leaves_the_notice_owed(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    monkeypatch.delenv("TIDEMARK_CORRECTED_TOPIC_PATH", raising=False)
    publish.commit(lake, prepared_run(lake, D, [receipt(1)]))  # a commit whose process died before the record
    assert corrected.notify(lake, D) == {"recorded": True, "owed": 1, "topic": None}
    assert corrected.notify(lake, D) == {"recorded": False, "owed": 1, "topic": None}


def test_schema_refuses_what_a_consumer_could_not_trust():
    body = corrected_notice.build(
        "sessions",
        D,
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
    text = open(os.path.join(ROOT, "docs", "notices.md")).read()
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
    box = corrected.outbox(lake)
    first = next(e for e in box.owed() if e["notice"]["version"] == v1["version"])
    box.mark_sent(first, "m-1", "2026-03-10T05:00:00.000Z")
    capsys.readouterr()

    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [
        (r["topic"], r["state"], r["event_date"], r["version"], r["previous_version"], r["change"]["kind"])
        for r in rows
    ] == [
        ("corrected", "sent", D, v1["version"], None, "first"),
        ("corrected", "owed", D, v2["version"], v1["version"], "changed"),
    ]
    assert rows[0]["message_id"] == "m-1" and rows[1]["change"]["sessions_added"] == 1

    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sent": 1, "owed": 1}
    assert cli_main(["notices", "--lake", str(lake), "--topic", "all", "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "availability": {"sent": 0, "owed": 0, "waiting": 0},
        "corrected": {"sent": 1, "owed": 1},
    }
    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--state", "owed"]) == 0
    table = capsys.readouterr().out
    assert "corrected notices: 1 sent, 1 owed" in table and v2["version"] in table and v1["version"] in table
    assert "changed: +1 -0 ~1 =0" in table
    # The availability listing is what it was: corrected notices only when asked for.
    assert cli_main(["notices", "--lake", str(lake), "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sent": 0, "owed": 0, "waiting": 0}
    assert cli_main(["notices", "--lake", str(lake), "--topic", "corrected", "--check"]) == 2
    assert "--check is about availability notices" in capsys.readouterr().err
