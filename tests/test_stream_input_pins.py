"""A micro-batch's input is fixed at its first attempt: a replay after a crash reads the content the
first attempt read, under the input rules it used, whatever happened to the landing or the options
in between (streaming_job/batch.py, tidemark/ingest/input_pins.py, docs/input-contract.md).

Each test kills a real stream at a named step of its batch (tidemark.base.crashpoints), changes the
landing or the options, and lets the restart replay the batch."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tests.streamkit import event, panes, partition_snapshot
from tidemark.base import crashpoints
from tidemark.ingest import landing_ledger
from tidemark.ingest.quarantine import read_quarantine
from tidemark.store.lake import Lake

pytestmark = pytest.mark.slow  # each test runs two short streams (~15 s apiece)


def run_stream(tmp_path, crash_at: str | None = None, *extra: str) -> int:
    """One `tidemark stream --available-now` over tmp_path's landing, lake and checkpoint; its exit code."""
    env = {**os.environ, "TIDEMARK_LOG_LEVEL": "WARNING"}
    env.pop(crashpoints.ENV, None)
    if crash_at:
        env[crashpoints.ENV] = crash_at
    argv = [sys.executable, "-m", "tidemark.cli", "stream", "--available-now"]
    for name in ("landing", "lake", "checkpoint"):
        argv += [f"--{name}", str(tmp_path / name)]
    with open(tmp_path / "stream.log", "ab") as log:
        return subprocess.run([*argv, *extra], stdout=log, stderr=log, env=env, timeout=600).returncode


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
    for _, path in landing_ledger._entries(lake, None):
        entry = lake.read_json(path) or {}
        if entry.get("source") == "stream":
            out.append(entry)
    return out


def lake_events(lake: Lake) -> set[tuple[str, str]]:
    return {(row["user_id"], event_id) for row in panes(lake) for event_id in row["event_ids"]}


@pytest.mark.parametrize("crash_at", ["receipt-marker@1", "batch-committed"])
def test_a_file_replaced_before_the_replay_is_read_as_the_first_attempt_read_it(tmp_path, crash_at):
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


def test_a_replay_judges_lines_with_the_input_rules_of_the_first_attempt(tmp_path):
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
