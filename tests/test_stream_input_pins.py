"""A micro-batch's input is fixed at its first attempt: a replay after a crash reads the content the
first attempt read, under the input rules it used, whatever happened to the landing or the options
in between (streaming_job/batch.py, tidemark/ingest/input_pins.py, docs/input-contract.md).

Each test kills a real stream at a named step of its batch (tidemark.base.crashpoints), changes the
landing or the options, and lets the restart replay the batch."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tests import reference
from tests.helpers import lake_session_set, session_set
from tests.streamkit import event, panes, partition_snapshot
from tidemark import cli
from tidemark.base import crashpoints
from tidemark.deduplication.dedup import run_dedup
from tidemark.ingest import contract, landing, landing_ledger
from tidemark.ingest.quarantine import read_quarantine
from tidemark.panes import receipts
from tidemark.session import rules_record
from tidemark.store.lake import Lake

pytestmark = pytest.mark.slow  # each test runs two short streams (~15 s apiece), one in a process of its own


def run_stream(tmp_path, crash_at: str | None = None, *extra: str) -> int:
    """One `tidemark stream --available-now` over tmp_path's landing, lake and checkpoint; its exit code.

    A run killed at a crash point is a process of its own (the crash point exits it); a restart runs
    the same command in this process, on the shared SparkSession's JVM (the command's builder gets it),
    so that each test starts one JVM for the stream, not two.
    """
    argv = ["stream", "--available-now"]
    for name in ("landing", "lake", "checkpoint"):
        argv += [f"--{name}", str(tmp_path / name)]
    if not crash_at:
        assert crashpoints.ENV not in os.environ
        return cli.main([*argv, *extra])
    env = {**os.environ, "TIDEMARK_LOG_LEVEL": "WARNING", crashpoints.ENV: crash_at}
    with open(tmp_path / "stream.log", "ab") as log:
        command = [sys.executable, "-m", "tidemark.cli", *argv, *extra]
        return subprocess.run(command, stdout=log, stderr=log, env=env, timeout=600).returncode


def land(path, lines: list[str]) -> bytes:
    """The file at `path` (re)placed by these lines, as a writer does: a hidden name, then a rename."""
    data = "".join(line + "\n" for line in lines).encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    return data


def days_ago(n: int, hour: int = 10) -> str:
    day = datetime.now(timezone.utc).date() - timedelta(days=n)
    return f"{day.isoformat()}T{hour:02d}:00:00Z"


def stream_entries(lake: Lake) -> list[dict]:
    """The ledger entries the stream wrote (not the audit's), oldest first."""
    out = []
    for _, file in landing_ledger._entries(lake, None):
        entry = file.read_json() or {}
        if entry.get("source") == "stream":
            out.append(entry)
    return out


def lake_events(lake: Lake) -> set[tuple[str, str]]:
    return {(row["user_id"], event_id) for row in panes(lake) for event_id in row["event_ids"]}


@pytest.mark.parametrize("crash_at", ["receipt-marker@1", "batch-committed"])
def test_a_file_replaced_before_the_replay_is_read_as_the_first_attempt_read_it(tmp_path, spark, crash_at):
    """h.jsonl holds events on three dates; the stream dies after one of the batch's three receipt
    partitions is complete (or once the whole batch is, before Spark's commit); h.jsonl is replaced
    by other events, one of them on a fourth date; the restart replays the batch. The lake holds
    the first content's events, all of them and nothing else; the new content is quarantined as a
    replaced file; the ledger records what was read by its digest."""
    lake = Lake.open(tmp_path / "lake")
    h = tmp_path / "landing" / "h.jsonl"
    first = [event(f"u{n}", f"old{n}", days_ago(n)) for n in (1, 2, 3)]
    old_bytes = land(h, first)
    assert run_stream(tmp_path, crash_at) == crashpoints.EXIT_CODE
    complete_before = partition_snapshot(lake)
    assert len(complete_before) == (1 if crash_at.startswith("receipt-marker") else 3)

    second = [event(f"u{n}", f"new{n}", days_ago(n, hour=11)) for n in (1, 2, 3, 4)]
    new_bytes = land(h, second)
    assert run_stream(tmp_path) == 0

    assert lake_events(lake) == {("u1", "old1"), ("u2", "old2"), ("u3", "old3")}
    for key, value in complete_before.items():
        assert partition_snapshot(lake)[key] == value
    (entry,) = stream_entries(lake)
    (record,) = entry["files"]
    assert (record["path"], record["lines"], record["sha256"]) == (
        "h.jsonl",
        3,
        hashlib.sha256(old_bytes).hexdigest(),
    )
    replaced = [row for row in read_quarantine(lake) if row["reason"] == landing_ledger.REPLACED]
    assert sorted(row["raw"] for row in replaced) == sorted(new_bytes.splitlines())


def test_a_replay_judges_lines_with_the_input_rules_of_the_first_attempt(tmp_path, spark):
    """The first attempt refuses an event two hours ahead of the receipt time (clock skew 1h); the
    stream dies after the batch, before Spark's commit; the restart with --max-clock-skew 3h
    replays it with the recorded 1h: the event stays refused, no partition is added."""
    lake = Lake.open(tmp_path / "lake")
    ahead = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [event("u1", "past", days_ago(1)), event("u2", "ahead", ahead)]
    land(tmp_path / "landing" / "f.jsonl", lines)
    assert run_stream(tmp_path, "batch-committed") == crashpoints.EXIT_CODE
    before = partition_snapshot(lake)
    refused = [row["raw"] for row in read_quarantine(lake)]
    assert refused == [lines[1].encode()]

    assert run_stream(tmp_path, None, "--max-clock-skew", "3h") == 0

    assert partition_snapshot(lake) == before
    assert lake_events(lake) == {("u1", "past")}
    assert [row["raw"] for row in read_quarantine(lake)] == refused
    (entry,) = stream_entries(lake)
    assert entry["input_rules"]["max_clock_skew"] == "1h"


def ledger_events(lake: Lake, contents: dict[str, bytes]) -> list:
    """What the ledger records as read: every stream entry's input files, identified by digest among
    the contents the test landed, judged at the entry's receipt time by the entry's input rules."""
    out = []
    for entry in stream_entries(lake):
        rules = landing_ledger.rules_of(entry)
        assert rules is not None
        received = landing_ledger.receipt_us(entry["receipt_ts"])
        for record in entry["files"]:
            if record["verdict"] == landing.INPUT:
                lines = landing.file_lines(contents[record["sha256"]])
                assert record["lines"] == len(lines)
                out += contract.read_lines(lines, received, rules)
    return out


MUTATIONS = ("keep", "replace", "append", "delete")
KILL_POINTS = ("ledger-recorded", "receipt-marker@1", "receipt-marker@2", "batch-committed")


@pytest.mark.parametrize("seed", [1, 8])  # receipt-marker@1, 3h; ledger-recorded, 1h
def test_a_killed_batch_replayed_under_other_landing_and_options_equals_what_the_ledger_read(tmp_path, spark, seed):
    """Property: kill a batch at a random step, then replace, append to or delete its files, land
    another and restart with a random --max-clock-skew. The lake, deduplicated, equals a batch
    sessionization (tests.reference) of exactly the contents the ledger records as read, each
    judged at its batch's receipt time by its batch's recorded input rules."""
    rng = random.Random(seed)
    lake = Lake.open(tmp_path / "lake")
    folder = tmp_path / "landing"
    now = datetime.now(timezone.utc)
    contents: dict[str, bytes] = {}
    serial = iter(range(10_000))

    def lines(n: int) -> list[str]:
        out = []
        for _ in range(n):
            k = next(serial)
            if rng.random() < 0.2:  # ahead of the receipt time: refused at a 1h skew, taken at 3h
                ts = now + timedelta(minutes=rng.randint(70, 150))
            else:
                ts = now - timedelta(days=rng.randint(1, 3), minutes=rng.randint(0, 600))
            out.append(event(f"u{rng.randint(0, 3)}", f"e{k}", ts.strftime("%Y-%m-%dT%H:%M:%SZ")))
        return out

    def put(name: str, new: list[str]) -> None:
        data = land(folder / name, new)
        contents[hashlib.sha256(data).hexdigest()] = data

    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        put(name, lines(rng.randint(3, 6)))
    kill = rng.choice(KILL_POINTS)
    assert run_stream(tmp_path, kill) in (0, crashpoints.EXIT_CODE)

    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        mutation = rng.choice(MUTATIONS)
        if mutation == "replace":
            put(name, lines(rng.randint(1, 4)))
        elif mutation == "append":
            with open(folder / name, "ab") as out:  # in place: the same inode as a hard-linked pin
                out.write("".join(line + "\n" for line in lines(2)).encode())
        elif mutation == "delete":
            os.remove(folder / name)
    put("d.jsonl", lines(3))
    skew = rng.choice(["1h", "3h"])
    assert run_stream(tmp_path, None, "--max-clock-skew", skew) == 0

    events = ledger_events(lake, contents)
    in_lake = {(row["user_id"], event_id) for row in panes(lake) for event_id in row["event_ids"]}
    assert in_lake == {(e.user_id, e.event_id) for e in events}, (kill, skew)
    rules = rules_record.rules_in_force(lake)[0]
    expected = reference.sessionize(((e.user_id, e.event_id, e.event_ts) for e in events), rules)
    for event_date in receipts.list_event_dates(lake):
        run_dedup(lake, event_date, rules, spark=spark)
        assert lake_session_set(lake, event_date) == session_set(expected, event_date), (event_date, kill, skew)
    assert not os.listdir(tmp_path / "checkpoint" / "pinned")  # every batch committed: no pin left
