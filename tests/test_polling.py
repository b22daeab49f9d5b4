"""tidemark.base.polling.wait_for: the one poll-with-deadline loop."""

from __future__ import annotations

import pytest

from tidemark.base.polling import wait_for


def counter(ready_at: int, value="ready", error: Exception | None = None):
    calls = []

    def check():
        calls.append(1)
        if len(calls) >= ready_at:
            return value
        if error is not None:
            raise error
        return None

    return check, calls


def test_returns_the_first_truthy_value():
    check, calls = counter(3, value={"id": 7})
    assert wait_for(check, 10, "thing", interval=0.01) == {"id": 7}
    assert len(calls) == 3


def test_listed_exceptions_mean_not_yet_and_are_named_on_timeout():
    check, calls = counter(3, error=ConnectionRefusedError("port closed"))
    assert wait_for(check, 10, "server", interval=0.01, not_yet=(OSError,)) == "ready"
    never, _ = counter(10**9, error=ConnectionRefusedError("port closed"))
    with pytest.raises(
        TimeoutError, match=r"server not ready after 0.2s \(last: ConnectionRefusedError: port closed\)"
    ):
        wait_for(never, 0.2, "server", interval=0.01, not_yet=(OSError,))


def test_other_exceptions_end_the_wait_at_once():
    check, calls = counter(10**9, error=RuntimeError("DAG import errors"))
    with pytest.raises(RuntimeError, match="import errors"):
        wait_for(check, 30, "dag", interval=0.01, not_yet=(OSError,))
    assert len(calls) == 1


def test_abort_stops_a_wait_that_can_never_succeed():
    check, calls = counter(10**9)

    def died():
        if len(calls) >= 2:
            raise RuntimeError("the server exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_for(check, 30, "server", interval=0.01, abort=died)
    assert len(calls) == 2


def test_timeout_detail_is_appended():
    with pytest.raises(TimeoutError, match="stack not ready after 0.1s; see log.txt"):
        wait_for(lambda: False, 0.1, "stack", interval=0.01, detail=lambda: "; see log.txt")
