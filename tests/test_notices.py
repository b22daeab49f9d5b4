"""Notice schema, outbox and cadence, on a temporary lake (no servers, no Spark)."""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from tidemark.base import layout
from tidemark.base.layout import as_event_date
from tidemark.cli import main as cli_main
from tidemark.notices import availability_notice
from tidemark.notices.cadence import CadencePolicy, PendingGroups
from tidemark.notices.outbox import Outbox
from tidemark.notices.report import notices_status, unadvertised
from tidemark.notices.service import NoticeService
from tidemark.panes.receipts import BatchReport, ReceiptPartition
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def partition(
    lake: Lake,
    event_date: str,
    receipt_ts: str,
    batch_id: int = 0,
    late: bool = False,
    watermark: str = "2026-03-07T12:00:00.000000Z",
    rows: int = 2,
    events: int = 5,
) -> dict:
    return {
        "event_date": event_date,
        "receipt_ts": receipt_ts,
        "batch_id": batch_id,
        "uri": lake.receipt_dir(as_event_date(event_date), receipt_ts),
        "rows": rows,
        "events": events,
        "pane_kinds": ["early"],
        "min_event_ts": f"{event_date}T01:00:00.000000Z",
        "max_event_ts": f"{event_date}T02:00:00.000000Z",
        "watermark": watermark,
        "late": late,
        "extra": {},
    }


def write_marker(lake: Lake, part: dict) -> None:
    folder = lake.receipt_dir(as_event_date(part["event_date"]), part["receipt_ts"])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, lake_layout.RECEIPT_MARKER), "w") as out:
        json.dump(part, out)


def Report(batch_id: int, partitions: list[dict]) -> BatchReport:  # noqa: N802 - reads like the class
    """The stream's real batch report, its partitions as their markers say."""
    return BatchReport(
        batch_id,
        partitions[0]["receipt_ts"] if partitions else "",
        0,
        0,
        0,
        0,
        0,
        [ReceiptPartition.from_json(p) for p in partitions],
    )


# ---- schema -------------------------------------------------------------------------------------


def test_docs_example_follows_the_schema():
    text = Path(os.path.join(ROOT, "docs", "notices.md")).read_text()
    example = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    assert availability_notice.validate(example)["notice_id"] == availability_notice.notice_id(
        example["dataset"], layout.as_event_date(example["event_date"]), example["receipt_ts_list"]
    )
    # Every body field the docs' table names is a schema property, and the reverse.
    documented = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)?", text, re.M))
    names = {n for pair in documented for n in pair if n}
    assert set(availability_notice.schema()["properties"]) <= names | set(availability_notice.ATTRIBUTES)


def test_build_covers_partitions_deterministically(tmp_path):
    lake = Lake.open(tmp_path)
    a = partition(lake, "2026-03-06", "20260307T100000000Z", batch_id=3, late=True, rows=1, events=2)
    b = partition(lake, "2026-03-06", "20260307T100500000Z", batch_id=4, rows=4, events=9)
    one, other = (
        availability_notice.build("sessions", [a, b], "coalesced"),
        availability_notice.build("sessions", [b, a], "coalesced"),
    )
    assert one == other
    assert one["receipt_ts"] == b["receipt_ts"]
    assert one["uri"] == b["uri"]
    assert one["receipt_ts_list"] == [a["receipt_ts"], b["receipt_ts"]]
    assert (one["rows"], one["events"], one["batch_id"], one["late"]) == (5, 11, 4, True)
    assert availability_notice.decode(availability_notice.encode(one)) == one
    attrs = availability_notice.attributes(one)
    assert attrs == {
        "dataset": "sessions",
        "event_date": "2026-03-06",
        "late": "true",
        "schema_version": "1",
        "kind": "coalesced",
        "notice_id": one["notice_id"],
    }
    assert availability_notice.build("sessions", [a])["notice_id"] != one["notice_id"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"event_date": "2026-02-31"}, "event_date"),
        ({"late": "yes"}, "late"),
        ({"notice_id": "../../etc"}, "notice_id"),
        ({"kind": "weekly"}, "kind"),
        ({"unexpected": 1}, "unexpected"),
        # "format": "date-time" is checked, not only the type
        ({"watermark": "2026-13-07T25:00:00Z"}, "watermark"),
        ({"max_event_ts": "yesterday"}, "max_event_ts"),
        ({"published_at": "2026-03-07 10:00"}, "published_at"),
    ],
)
def test_invalid_notices_are_refused_naming_the_field(tmp_path, change, message):
    body = availability_notice.build("sessions", [partition(Lake.open(tmp_path), "2026-03-06", "20260307T100000000Z")])
    with pytest.raises(availability_notice.InvalidNotice, match=message):
        availability_notice.validate({**body, **change})


def test_build_refuses_mixed_dates(tmp_path):
    lake = Lake.open(tmp_path)
    with pytest.raises(availability_notice.InvalidNotice, match="one event_date"):
        availability_notice.build(
            "sessions",
            [
                partition(lake, "2026-03-06", "20260307T100000000Z"),
                partition(lake, "2026-03-07", "20260307T100000000Z"),
            ],
        )


# ---- outbox -------------------------------------------------------------------------------------


def test_outbox_records_once_and_moves_to_sent(tmp_path):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    body = availability_notice.build("sessions", [partition(lake, "2026-03-06", "20260307T100000000Z")])
    assert outbox.record(body) is True
    assert outbox.record(body) is False  # a replayed batch: same id, nothing new
    [entry] = outbox.owed()
    assert entry["notice"] == body
    assert entry["attributes"] == availability_notice.attributes(body)
    outbox.mark_sent(entry, "17", "2026-03-07T10:00:01.000Z")
    assert outbox.owed() == []
    assert outbox.record(body) is False
    [sent] = outbox.sent()
    assert (sent["message_id"], sent["notice"]["notice_id"]) == ("17", body["notice_id"])


def test_interrupted_mark_sent_is_not_owed(tmp_path):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    body = availability_notice.build("sessions", [partition(lake, "2026-03-06", "20260307T100000000Z")])
    outbox.record(body)
    entry = outbox.owed()[0]
    # Crash between the two steps of mark_sent: the sent record exists, the outbox entry too.
    from tidemark.store import storage

    storage.write_json_atomic(outbox.path("sent", body["notice_id"]), {**entry, "message_id": "1"})
    assert outbox.owed() == []
    assert not os.path.exists(outbox.path("outbox", body["notice_id"]))


def test_outbox_refuses_a_notice_id_that_is_not_hex(tmp_path):
    with pytest.raises(ValueError, match="invalid notice_id"):
        Outbox(Lake.open(tmp_path)).path("outbox", "../../x")


# ---- cadence ------------------------------------------------------------------------------------


def test_routing_by_policy(tmp_path):
    lake = Lake.open(tmp_path)
    fresh = partition(lake, "2026-03-07", "20260307T100000000Z", watermark="2026-03-07T11:00:00.000000Z")
    old = partition(lake, "2026-03-01", "20260307T100000000Z", watermark="2026-03-07T11:00:00.000000Z", late=True)
    assert CadencePolicy().route(fresh) == ("partition", None)
    assert CadencePolicy().route(old) == ("partition", None)
    policy = CadencePolicy(
        coalesce=timedelta(minutes=5), late_horizon=timedelta(days=3), digest_interval=timedelta(hours=1)
    )
    assert policy.route(fresh) == ("coalesced", timedelta(minutes=5))
    assert policy.route(old) == ("late_digest", timedelta(hours=1))
    # 2026-03-03 ended 3 days 11 hours before the watermark; 2026-03-04 only 2 days 11 hours.
    assert policy.is_old({**old, "event_date": "2026-03-03"})
    assert not policy.is_old({**old, "event_date": "2026-03-04"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"coalesce": timedelta(0)},
        {"late_horizon": timedelta(seconds=-1)},
        {"digest_interval": timedelta(milliseconds=10)},
    ],
)
def test_cadence_refuses_nonsense(kwargs):
    with pytest.raises(ValueError, match="^notice "):
        CadencePolicy(**kwargs)


def test_coalesced_groups_close_when_their_window_ends(tmp_path):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    groups = PendingGroups(lake, "sessions", outbox)
    window = timedelta(minutes=5)
    first = [
        partition(lake, "2026-03-06", ts, batch_id=i)
        for i, ts in enumerate(["20260307T100000000Z", "20260307T100210000Z", "20260307T100459999Z"])
    ]
    nxt = partition(lake, "2026-03-06", "20260307T100500000Z", batch_id=3)
    other_date = partition(lake, "2026-03-07", "20260307T100100000Z", batch_id=1)
    for part in [*first, nxt, other_date]:
        assert groups.add(part, "coalesced", window)
    assert not groups.add(first[0], "coalesced", window)  # replay: already waiting

    assert groups.due(datetime(2026, 3, 7, 10, 4, 59, tzinfo=timezone.utc)) == []
    due = groups.due(datetime(2026, 3, 7, 10, 5, tzinfo=timezone.utc))
    assert len(due) == 2  # 2026-03-06 and 2026-03-07 of window 10:00-10:05, not 10:05-10:10
    bodies = [groups.close(gid) for gid in due]
    by_date = {b["event_date"]: b for b in bodies}
    assert by_date["2026-03-06"]["receipt_ts_list"] == [p["receipt_ts"] for p in first]
    assert by_date["2026-03-07"]["receipt_ts_list"] == [other_date["receipt_ts"]]
    assert {e["notice"]["notice_id"] for e in outbox.owed()} == {b["notice_id"] for b in bodies}

    # A replay of an advertised partition neither reopens the group nor makes a new notice.
    assert not groups.add(first[1], "coalesced", window)
    # State survives a restart: a new process sees the open group of 10:05.
    again = PendingGroups(lake, "sessions", outbox)
    again.load()
    assert [g["open"][0]["receipt_ts"] for g in again.waiting()] == [nxt["receipt_ts"]]
    assert not again.add(first[2], "coalesced", window)
    # Once batch 4 runs, batches <= 3 can no longer be replayed: closed records are dropped.
    again.forget_committed(4)
    assert len(os.listdir(lake.notices_dir("pending"))) == 1


def test_crash_between_outbox_write_and_group_update_gives_the_same_notice(tmp_path):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    groups = PendingGroups(lake, "sessions", outbox)
    window = timedelta(minutes=5)
    for ts in ("20260307T100000000Z", "20260307T100100000Z"):
        groups.add(partition(lake, "2026-03-06", ts), "coalesced", window)
    [gid] = groups.due(datetime(2026, 3, 7, 11, tzinfo=timezone.utc))
    # The outbox entry is written, the group file not yet updated (the process dies here).
    outbox.record(availability_notice.build("sessions", groups.groups[gid]["open"], "coalesced"))
    restarted = PendingGroups(lake, "sessions", outbox)
    restarted.load()
    body = restarted.close(gid)
    assert [e["notice"]["notice_id"] for e in outbox.owed()] == [body["notice_id"]]


def test_service_listener_records_before_publishing_and_replays_add_nothing(tmp_path):
    """The listener alone (sender thread not started): durable records, no network."""
    lake = Lake.open(tmp_path)
    service = NoticeService(lake, "projects/tidemark-local/topics/tidemark-availability")
    parts = [
        partition(lake, "2026-03-06", "20260307T100000000Z", batch_id=5),
        partition(lake, "2026-03-07", "20260307T100000000Z", batch_id=5),
    ]
    service.on_batch(Report(5, parts))
    service.on_batch(Report(5, parts))  # the same batch replayed
    owed = Outbox(lake).owed()
    assert sorted((e["notice"]["event_date"], e["notice"]["receipt_ts"]) for e in owed) == [
        ("2026-03-06", "20260307T100000000Z"),
        ("2026-03-07", "20260307T100000000Z"),
    ]
    assert service.owed_count() == 2


def test_report_and_cli_show_sent_owed_waiting_and_unadvertised(tmp_path, capsys):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    sent_part = partition(lake, "2026-03-06", "20260307T100000000Z")
    owed_part = partition(lake, "2026-03-06", "20260307T100100000Z")
    waiting_part = partition(lake, "2026-03-07", "20260307T100100000Z")
    forgotten = partition(lake, "2026-03-07", "20260307T100200000Z")
    for part in (sent_part, owed_part, waiting_part, forgotten):
        write_marker(lake, part)
    outbox.record(availability_notice.build("sessions", [sent_part]))
    outbox.mark_sent(outbox.owed()[0], "1", "2026-03-07T10:00:01.000Z")
    outbox.record(availability_notice.build("sessions", [owed_part]))
    PendingGroups(lake, "sessions", outbox).add(waiting_part, "coalesced", timedelta(minutes=5))

    status = notices_status(lake)
    assert [(r["event_date"], r["receipt_ts"]) for r in status["sent"]] == [("2026-03-06", sent_part["receipt_ts"])]
    assert [r["receipt_ts"] for r in status["owed"]] == [owed_part["receipt_ts"]]
    assert [r["receipt_ts"] for r in status["waiting"]] == [waiting_part["receipt_ts"]]
    assert unadvertised(lake) == [(date(2026, 3, 7), forgotten["receipt_ts"])]

    assert cli_main(["notices", "--lake", str(lake), "--format", "summary", "--check"]) == 1
    assert json.loads(capsys.readouterr().out) == {"sent": 1, "owed": 1, "waiting": 1, "unadvertised": 1}
    assert cli_main(["notices", "--lake", str(lake), "--format", "jsonl", "--state", "owed"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["state"], row["receipt_ts"]) == ("owed", owed_part["receipt_ts"])


@pytest.mark.parametrize(
    "topic",
    [
        "tidemark-availability",
        "projects/ab/topics/tidemark",
        "projects/tidemark-local/topics/x",
        "projects/tidemark-local/topics/goog-x",
        "projects/tidemark-local/subscriptions/abc",
        "projects/Tidemark/topics/abc",
    ],
)
def test_topic_paths_are_checked(topic):
    from tidemark.notices.sender import check_topic

    with pytest.raises(ValueError, match="invalid topic"):
        check_topic(topic)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--notify-topic", "not-a-topic"], "invalid topic"),
        (["--notify-topic", "projects/tidemark-local/topics/abc", "--notice-coalesce", "soon"], "invalid duration"),
        (
            ["--notify-topic", "projects/tidemark-local/topics/abc", "--notice-digest-interval", "0s"],
            "must be positive",
        ),
    ],
)
def test_stream_refuses_bad_notice_options_before_starting(tmp_path, capsys, options, message):
    argv = [
        "stream",
        "--landing",
        str(tmp_path / "in"),
        "--lake",
        str(tmp_path / "lake"),
        "--checkpoint",
        str(tmp_path / "ckpt"),
        *options,
    ]
    assert cli_main(argv) == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "lake")


def test_stream_config_carries_the_cadence(tmp_path):
    from tidemark.cli import build_parser
    from tidemark.commands.stream import config_from_args

    args = build_parser().parse_args(
        [
            "stream",
            "--landing",
            "in",
            "--lake",
            "lake",
            "--checkpoint",
            "ckpt",
            "--notify-topic",
            "projects/tidemark-local/topics/tidemark-availability",
            "--notice-coalesce",
            "5m",
            "--notice-late-horizon",
            "3d",
            "--notice-digest-interval",
            "2h",
        ]
    )
    config = config_from_args(args)
    assert (config.notify_topic, config.notice_coalesce, config.notice_late_horizon, config.notice_digest_interval) == (
        "projects/tidemark-local/topics/tidemark-availability",
        "5m",
        "3d",
        "2h",
    )


def test_a_group_closed_again_after_its_notice_was_sent_is_not_queued(tmp_path):
    """Crash between recording a group's notice and updating the group file; the restarted
    process drains the outbox first, then closes the group again: same id, already sent."""
    lake = Lake.open(tmp_path)
    service = NoticeService(
        lake,
        "projects/tidemark-local/topics/tidemark-availability",
        policy=CadencePolicy(coalesce=timedelta(minutes=5)),
    )
    part = partition(lake, "2026-03-06", "20260307T100000000Z")
    service.on_partition(part)
    [gid] = service.groups.due(datetime(2026, 3, 7, 11, tzinfo=timezone.utc))
    body = availability_notice.build("sessions", service.groups.groups[gid]["open"], "coalesced")
    service.outbox.record(body)
    service.outbox.mark_sent(service.outbox.owed()[0], "1", "2026-03-07T11:00:00.000Z")
    closed = service.groups.close(gid)
    assert closed["notice_id"] == body["notice_id"]
    service._enqueue(closed)
    assert service.owed_count() == 0
    assert service.idle()


def test_backfill_records_a_notice_for_each_unadvertised_partition(tmp_path, capsys):
    lake = Lake.open(tmp_path)
    covered = partition(lake, "2026-03-06", "20260307T100000000Z")
    forgotten = [
        partition(lake, "2026-03-06", "20260307T100100000Z", late=True),
        partition(lake, "2026-03-07", "20260307T100100000Z"),
    ]
    for part in (covered, *forgotten):
        write_marker(lake, part)
    Outbox(lake).record(availability_notice.build("sessions", [covered]))
    assert cli_main(["notices", "--lake", str(lake), "--backfill", "--check", "--format", "summary"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sent": 0, "owed": 3, "waiting": 0, "unadvertised": 0}
    owed = {(e["notice"]["event_date"], e["notice"]["receipt_ts"]): e["notice"] for e in Outbox(lake).owed()}
    for part in forgotten:
        body = owed[(part["event_date"], part["receipt_ts"])]
        assert (body["late"], body["rows"], body["uri"]) == (part["late"], part["rows"], part["uri"])
    assert cli_main(["notices", "--lake", str(lake), "--backfill", "--format", "summary"]) == 0  # idempotent
    assert json.loads(capsys.readouterr().out)["owed"] == 3


def test_close_waiting_needs_a_topic(tmp_path, capsys):
    assert cli_main(["notices", "--lake", str(tmp_path), "--close-waiting"]) == 2
    assert "--close-waiting needs --send" in capsys.readouterr().err
