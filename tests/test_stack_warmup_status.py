"""`tidemark status`'s row for the Connect warm-up `up` starts in the background: `running` while it
warms (what tells an operator why the first corrections are slow), `ended` with what it did once it
is done (not `stopped`: a task that ended is no failure), and its failure said as such."""

from __future__ import annotations

import json
import os

from rich.console import Console

from tests.helpers import ended_pid, write_stack_record
from tidemark.commands import status as status_command
from tidemark.commands.console import print_status
from tidemark.devstack import connect_warmup
from tidemark.devstack.stack import Stack


def _stack_with_warmup(tmp_path, pid: int, log_lines: list[dict]) -> Stack:
    stack = Stack(str(tmp_path / "home"))
    stack.configure(spark_connect=True)
    log_path = tmp_path / "home" / "logs" / f"{connect_warmup.NAME}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("".join(json.dumps(line) + "\n" for line in log_lines) + "a library's plain line\n")
    write_stack_record(stack, connect_warmup.NAME, pid, str(log_path))
    return stack


def _warmup_row(stack: Stack) -> dict:
    (row,) = [r for r in stack.status() if r["component"] == "spark connect warm-up"]
    return row


def test_a_running_warmup_is_running_and_says_what_waits_for_it(tmp_path):
    row = _warmup_row(_stack_with_warmup(tmp_path, os.getpid(), []))
    assert row["state"] == "running"
    assert "first corrections" in row["detail"]
    assert row["state"] in status_command.HEALTHY_STATES


def test_an_ended_warmup_says_what_it_did_and_is_no_failure(tmp_path):
    ended = {
        "event": connect_warmup.ENDED_EVENT,
        "first_s": 11.2,
        "corrections_s": [4.1, 2.6, 2.2],
        "seconds": 104.3,
        "cpu_s": 20.1,
    }
    stack = _stack_with_warmup(tmp_path, ended_pid(), [{"event": "connect warm-up built its scratch lake"}, ended])
    row = _warmup_row(stack)
    assert row["state"] == "ended"
    assert row["detail"] == "the Connect server warmed in 104 s: 4 corrections, the first 11.2 s, the last 2.2 s"
    assert row["state"] in status_command.HEALTHY_STATES
    console = Console(record=True, width=300)
    print_status(stack, console)  # the table has a color for every state
    assert "spark connect warm-up" in console.export_text()


def test_a_failed_or_killed_warmup_says_so(tmp_path):
    failed = {"event": connect_warmup.ENDED_EVENT, "error": "cannot reach sc://127.0.0.1:1", "seconds": 3.0}
    row = _warmup_row(_stack_with_warmup(tmp_path, ended_pid(), [failed]))
    assert row["state"] == "ended"
    assert row["detail"] == "failed after 3 s (cannot reach sc://127.0.0.1:1): the Connect server runs cold"

    killed = _warmup_row(_stack_with_warmup(tmp_path / "killed", ended_pid(), [{"event": "connect warm-up built"}]))
    assert killed["detail"].startswith("ended without its summary line")


def test_no_row_without_a_warmup(tmp_path):
    stack = Stack(str(tmp_path / "home"))
    stack.configure(spark_connect=True)
    assert "spark connect warm-up" not in [r["component"] for r in stack.status()]
