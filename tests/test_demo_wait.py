"""tidemark.demo.wait.until, the demo's waits (no stack started): it returns when the check is done,
fails with on_timeout(the last status) after the timeout, and fails at once naming a stack
process that died."""

from __future__ import annotations

import os

import pytest

from tests.helpers import ended_pid, write_stack_record
from tidemark.demo import wait
from tidemark.devstack import connect_warmup
from tidemark.devstack.stack import Stack, StackError


class Progress:
    """rich.progress.Progress's add/update/remove, recording the descriptions shown."""

    def __init__(self):
        self.shown, self.removed = [], []

    def add_task(self, what, total=None):
        return what

    def update(self, task, description):
        self.shown.append(description)

    def remove_task(self, task):
        self.removed.append(task)


def test_until_returns_when_done_and_shows_the_status():
    progress, calls = Progress(), []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("not up yet")  # a component that cannot answer: not done
        return len(calls) >= 3, f"{len(calls)}/3 files"

    took = wait.until(check, 30, "stream", progress, lambda s: AssertionError(s), interval=0.01)
    assert took >= 0
    assert len(calls) == 3
    assert progress.removed == ["stream"]
    assert progress.shown[0].startswith("stream: 1/3 files")
    assert "ConnectionError: not up yet" in progress.shown[1]


def test_until_raises_on_timeout_with_the_last_status():
    progress = Progress()
    with pytest.raises(StackError, match="2 owed"):
        wait.until(
            lambda: (False, "2 owed"),
            0.2,
            "notices",
            progress,
            lambda s: StackError("stream", f"notices not all sent: {s}", "/logs/stream.log"),
            interval=0.05,
        )
    assert progress.removed == ["notices"]


def _stack(tmp_path, **alive: bool) -> Stack:
    """A real Stack's records (nothing started): each name's process alive (this test's) or ended."""
    stack = Stack(str(tmp_path / "home"))
    for name, up in alive.items():
        write_stack_record(stack, name, os.getpid() if up else ended_pid(), f"/logs/{name}.log")
    return stack


def test_until_fails_at_once_naming_a_process_that_died(tmp_path):
    with pytest.raises(StackError) as failed:
        wait.until(
            lambda: (False, "waiting"),
            60,
            "DAG runs",
            Progress(),
            lambda s: AssertionError(s),
            stack=_stack(tmp_path, **{"airflow-scheduler": True, "stream": False}),
            interval=0.01,
        )
    assert failed.value.component == "stream"
    assert "exited while waiting for DAG runs" in str(failed.value)
    assert failed.value.log_path == "/logs/stream.log"


def test_the_connect_warmup_ending_is_not_a_process_dying(tmp_path):
    """`up` starts the warm-up in the background and it ends a minute or two later, in the middle of
    the demo's waves: `make demo` failed there ("spark-connect-warmup: exited while waiting")."""
    stack = _stack(tmp_path, **{"stream": True, connect_warmup.NAME: False})
    calls = []

    def check():
        calls.append(1)
        return len(calls) >= 3, f"{len(calls)}/3"

    wait.until(check, 30, "pause before wave 3", Progress(), lambda s: AssertionError(s), stack=stack, interval=0.01)
    assert len(calls) == 3
    assert list(stack.exited()) == []
