"""tidemark.demo.wait.until, the demo's waits (no stack started): it returns when the check is done,
fails with on_timeout(the last status) after the timeout, and fails at once naming a stack
process that died."""

from __future__ import annotations

import pytest

from tidemark.demo import wait
from tidemark.devstack.stack import StackError


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


class Record:
    def __init__(self, alive: bool):
        self._alive, self.log_path = alive, "/logs/stream.log"

    def alive(self) -> bool:
        return self._alive


class Stack:
    def __init__(self, **records):
        self._records = records

    def records(self):
        return self._records


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


def test_until_fails_at_once_naming_a_process_that_died():
    with pytest.raises(StackError) as failed:
        wait.until(
            lambda: (False, "waiting"),
            60,
            "DAG runs",
            Progress(),
            lambda s: AssertionError(s),
            stack=Stack(airflow=Record(True), stream=Record(False)),
            interval=0.01,
        )
    assert failed.value.component == "stream"
    assert "exited while waiting for DAG runs" in str(failed.value)
