"""`tidemark partitions` and `tidemark history` on a small lake written by the real stream and the
real dedup: pending receipts before and after a date's deduplication, a date's lineage in time
order, an owed notice, and Airflow reported as unavailable rather than guessed."""

from __future__ import annotations

import json

import pytest

from tidemark.base.layout import as_event_date
from tidemark.cli import main
from tidemark.iceberg import table_versions
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.panes import receipts
from tidemark.store.lake import Lake

# slow (not in make test-fast): a real stream and a dedup (module fixture)
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    from streaming_job.job import StreamConfig, run_stream
    from tidemark.demo.generate import Workload, generate

    base = tmp_path_factory.mktemp("history")
    landing, lake = str(base / "landing"), Lake.open(base / "lake")
    generate(landing, Workload(events=300, users=6, days=2, files=4, seed=3), progress=False)
    run_stream(
        StreamConfig(
            landing=landing, lake=lake, checkpoint=str(base / "checkpoint"), available_now=True, max_files_per_trigger=2
        ),
        spark=spark,
    )
    assert len(receipts.list_event_dates(lake)) >= 2
    return lake


def json_lines(capsys, argv) -> list[dict]:
    capsys.readouterr()
    assert main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_partitions_pending_until_deduplicated_then_history_in_order(lake, spark, capsys, tmp_path):
    from tidemark.deduplication.dedup import run_dedup

    dates = receipts.list_event_dates(lake)
    before = {
        as_event_date(r["event_date"]): r for r in json_lines(capsys, ["partitions", "--lake", str(lake), "--json"])
    }
    assert sorted(before) == dates
    for event_date, row in before.items():
        stamps = receipts.list_receipts(lake, event_date)
        assert row["version"] is None
        assert row["pending"] == row["receipts"] == len(stamps) > 0
        assert row["pending_receipts"] == stamps
        assert row["lag_s"] > 0

    first = dates[0]
    run_dedup(lake, first, spark=spark)
    after = {
        as_event_date(r["event_date"]): r for r in json_lines(capsys, ["partitions", "--lake", str(lake), "--json"])
    }
    pointer = table_versions.current_version(lake, as_event_date(first))
    assert after[first]["version"] == pointer.version
    assert after[first]["pending"] == 0
    assert after[first]["lag_s"] == 0
    assert after[first]["sessions"] == pointer.sessions
    assert after[dates[1]]["pending"] == before[dates[1]]["pending"]  # not deduplicated yet

    # A notice the stream would have owed for the newest receipt partition of the date.
    newest = receipts.list_receipts(lake, first)[-1]
    body = availability_notice.build("sessions", [receipts.read_marker(lake, first, newest).to_json()])
    assert Outbox(lake).record(body)

    items = json_lines(
        capsys,
        [
            "history",
            "--lake",
            str(lake),
            "--event-date",
            first.isoformat(),
            "--json",
            "--home",
            str(tmp_path / "no-stack"),
        ],
    )
    source, items = items[0], items[1:]
    assert source["kind"] == "source"
    assert source["dag_runs"].startswith("unavailable")
    kinds = [i["kind"] for i in items]
    assert kinds.count("receipt") == len(receipts.list_receipts(lake, first))
    assert [i["id"] for i in items if i["kind"] == "version"] == [pointer.version]
    assert [i["state"] for i in items if i["kind"] == "version"] == ["current"]
    owed = [i for i in items if i["kind"] == "notice"]
    assert len(owed) == 1
    assert owed[0]["id"] == body["notice_id"]
    assert owed[0]["state"].startswith("owed")
    times = [i["time"] for i in items]
    assert times == sorted(times)
    assert kinds.index("version") > max(i for i, k in enumerate(kinds) if k == "receipt")

    # The table form says where DAG runs would come from.
    capsys.readouterr()
    assert (
        main(["history", "--lake", str(lake), "--event-date", first.isoformat(), "--home", str(tmp_path / "no-stack")])
        == 0
    )
    out = capsys.readouterr().out
    assert "unavailable" in out
    assert pointer.version in out
    capsys.readouterr()
    assert main(["partitions", "--lake", str(lake)]) == 0
    assert first.isoformat() in capsys.readouterr().out


def test_history_says_when_a_given_airflow_does_not_answer(lake, capsys, monkeypatch):
    from tidemark.devstack.process import free_port

    monkeypatch.setenv("AIRFLOW_PASSWORD", "not-a-real-one")
    url = f"http://127.0.0.1:{free_port()}"
    items = json_lines(
        capsys,
        [
            "history",
            "--lake",
            str(lake),
            "--event-date",
            receipts.list_event_dates(lake)[0].isoformat(),
            "--json",
            "--airflow-url",
            url,
        ],
    )
    assert items[0]["dag_runs"].startswith(f"unavailable: Airflow at {url} did not answer")
    assert "not-a-real-one" not in json.dumps(items)


def test_history_refuses_a_bad_date(lake, capsys):
    assert main(["history", "--lake", str(lake), "--event-date", "2026-02-31"]) == 2
    assert "invalid event_date" in capsys.readouterr().err
