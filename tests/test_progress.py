"""Long commands show their progress (tidemark/base/progress.py, tidemark/commands/progress_bar.py):
structured progress lines in the logs with done/left counts, a bar on a terminal, nothing more on
stdout (byte for byte) with --json or when stdout is a pipe, and a kill that stops a pass the way
Ctrl-C does. The migration's stop and resume are in tests/test_progress_migration.py."""

from __future__ import annotations

import io
import json
import os
import pty
import random
import signal
import subprocess
import sys
import threading
from datetime import date, datetime, timedelta
from unittest.mock import ANY

import pytest
from rich.console import Console

from tests.lakekit import SimulatedStream
from tests.markerkit import write_batch
from tidemark import cli
from tidemark.base.logs import get_logger, read_log_lines
from tidemark.base.progress import Progress, State, tracked
from tidemark.commands import progress_bar
from tidemark.panes import receipts
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.states: list[State] = []

    def update(self, state: State) -> None:
        self.states.append(state)


def progress_lines(err: str) -> list[dict]:
    return [line for line in read_log_lines(err) if line.get("event") == "progress"]


def test_a_long_pass_logs_done_and_left_every_few_seconds_not_per_item(capsys):
    clock, items = Clock(), 100_000
    with Progress("checking items", items, log=get_logger("test"), log_every_s=10, clock=clock) as progress:
        for _ in progress.each(range(items)):
            clock.now += 0.001  # 100 s in all: about one line per 10 s
    lines = progress_lines(capsys.readouterr().err)
    assert 9 <= len(lines) <= 12, len(lines)
    for line in lines:
        assert line["done"] + line["left"] == items
        assert line["total"] == items
        assert line["what"] == "checking items"
        assert line["component"] == "test"
    first, last = lines[0], lines[-1]
    assert 9_000 <= first["done"] <= 10_100
    assert first["elapsed_s"] == pytest.approx(10, abs=0.2)
    assert first["eta_s"] == pytest.approx(90, abs=1)  # the pace so far times what is left
    assert first["current"] == str(first["done"] - 1)  # the last item done
    assert (last["done"], last["left"], last["eta_s"], last.get("finished")) == (items, 0, 0.0, True)
    assert [line["done"] for line in lines].count(items) == 1  # the end is said once

    # One slow item: its pass has a line at its end, though nothing was logged before.
    with Progress("one slow date", 1, log=get_logger("test"), log_every_s=10, clock=clock) as progress:
        for _ in progress.each(["2026-03-01"]):
            clock.now += 30
    (only,) = progress_lines(capsys.readouterr().err)
    assert (only["done"], only["left"], only["elapsed_s"], only["finished"]) == (1, 0, 30.0, True)


def test_a_short_pass_logs_nothing_and_a_stopped_one_says_where(capsys):
    clock = Clock()
    for _ in tracked(["2026-01-01", "2026-01-02"], "quick", log=get_logger("test"), clock=clock):
        clock.now += 0.5
    assert progress_lines(capsys.readouterr().err) == []

    def interrupted_on_the_second_date() -> None:
        with Progress("re-deduplicating dates", 3, log=get_logger("test"), clock=clock) as progress:
            for day in progress.each(["2026-01-01", "2026-01-02", "2026-01-03"]):
                if day == "2026-01-02":
                    raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_on_the_second_date()
    (stopped,) = read_log_lines(capsys.readouterr().err)
    assert stopped["event"] == "stopped before the end"
    assert stopped["level"] == "warning"
    assert (stopped["stopped_at"], stopped["done"], stopped["left"]) == ("2026-01-02", 1, 2)


def test_the_display_gets_every_change_and_the_estimate():
    clock, shown = Clock(), Recorder()
    with Progress("indexing event dates", 4, display=shown, clock=clock) as progress:
        for _ in progress.each(["a", "b", "c", "d"]):
            clock.now += 3
    assert [(s.done, s.current) for s in shown.states[:4]] == [(0, None), (0, "a"), (1, "a"), (1, "b")]
    assert shown.states[2].eta_s == 9.0  # 3 s per item, 3 left
    assert shown.states[-1].finished
    assert shown.states[-1].done == 4
    assert shown.states[-1].left == 0
    unknown = State("x", None, 3, "c", 5.0)
    assert unknown.left is None
    assert unknown.eta_s is None


def terminal(monkeypatch) -> io.StringIO:
    """The bar's console made a terminal writing into a buffer (as a real one would on a tty)."""
    screen = io.StringIO()
    monkeypatch.setattr(
        progress_bar, "_console", lambda: Console(file=screen, force_terminal=True, width=160, color_system=None)
    )
    return screen


def test_a_terminal_shows_a_bar_with_counts_the_current_date_and_the_time_left(monkeypatch):
    screen = terminal(monkeypatch)
    clock = Clock()
    with progress_bar.shown() as display:
        assert isinstance(display, progress_bar.TerminalBar)
        with Progress("re-deduplicating dates", 5, display=display, clock=clock) as progress:
            for _ in progress.each(["2026-03-01", "2026-03-02", "2026-03-03"]):
                clock.now += 65
            display.progress.refresh()
            drawn = screen.getvalue()
    assert "re-deduplicating dates" in drawn
    assert "3/5" in drawn
    assert "2026-03-03" in drawn
    assert "━" in drawn  # the bar itself
    assert "(~0:02:10 left)" in drawn  # 65 s per date, 2 dates left

    # Not a terminal (a pipe, CI), or --json: no bar at all.
    monkeypatch.setattr(progress_bar, "_console", lambda: Console(file=io.StringIO()))
    with progress_bar.shown() as display:
        assert display is None
    with progress_bar.shown(enabled=False) as display:
        assert display is None


def test_a_kill_stops_a_pass_as_ctrl_c_does_and_the_handler_is_put_back():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's: a SIGTERM here would end the test process")
    before = signal.getsignal(signal.SIGTERM)

    def sigterm_to_self() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 5)  # the handler runs at the next bytecode; this only waits

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), progress_bar.kill_interrupts():
        sigterm_to_self()
    assert signal.getsignal(signal.SIGTERM) == before


def _lake_with_receipts(tmp_path) -> Lake:
    lake = Lake.open(tmp_path / "lake")
    rng = random.Random(3)
    for batch in range(6):
        write_batch(lake, rng, batch, days=4)
    return lake


def test_reindex_draws_its_bar_on_stderr_and_leaves_stdout_as_it_was(tmp_path, monkeypatch, capsys):
    lake = _lake_with_receipts(tmp_path)
    assert cli.main(["reindex", "--lake", str(lake)]) == 0
    plain = capsys.readouterr().out

    screen = terminal(monkeypatch)
    assert cli.main(["reindex", "--lake", str(lake)]) == 0
    assert capsys.readouterr().out == plain  # byte for byte
    drawn, dates = screen.getvalue(), len(receipts.list_event_dates(lake))
    assert "indexing event dates" in drawn
    assert f"{dates}/{dates}" in drawn
    assert dates > 1


def test_reconcile_json_is_byte_identical_with_a_terminal_and_without(tmp_path, monkeypatch, capsys):
    lake = Lake.open(tmp_path / "lake")
    SimulatedStream(lake, 1).batch(
        [("u", "a", _at("2026-03-06T10:00"), "play"), ("v", "b", _at("2026-03-07T11:00"), "play")], mode=0.5
    )
    args = ["reconcile", "--lake", str(lake), "--full", "--grace", "0s", "--home", str(tmp_path / "none")]
    assert cli.main([*args, "--json"]) == 0
    plain = capsys.readouterr().out
    assert [line.count('"no_version"') for line in plain.splitlines()] == [1, 1]

    screen = terminal(monkeypatch)
    assert cli.main([*args, "--json"]) == 0
    assert capsys.readouterr().out == plain
    assert screen.getvalue() == ""

    assert cli.main(args) == 0  # for a person: the bar, then the table
    assert "examining dates" in screen.getvalue()
    assert "2/2" in screen.getvalue()
    assert "stale event dates" in capsys.readouterr().out


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text + ":00+00:00")


def test_a_real_terminal_gets_the_bar_on_stderr_and_a_pipe_gets_stdout_unchanged(tmp_path):
    """`tidemark reindex` with stderr on a pty and stdout on a pipe, as `tidemark reindex ... | jq` in a
    terminal: the bar is drawn on the terminal, and stdout is the one JSON line it always was."""
    lake = _lake_with_receipts(tmp_path)
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = [sys.executable, "-m", "tidemark.cli", "reindex", "--lake", str(lake)]
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120, check=False)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: everything was read
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    assert proc.returncode == 0, drawn[-2000:]
    dates = len(receipts.list_event_dates(lake))
    assert json.loads(proc.stdout) == {
        "lake": str(lake),
        "event_dates": dates,
        "spanning_partitions": ANY,
        "complete": True,
    }
    assert proc.stdout.count(b"\n") == 1
    assert b"\x1b" not in proc.stdout
    assert b"indexing event dates" in drawn
    assert f"{dates}/{dates}".encode() in drawn
    assert "━".encode() in drawn


class FakeAirflow:
    """The REST client reconcile asks (tidemark.orchestration.airflow_api.AirflowClient): no run yet."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def get_dag_run(self, dag_id, run_id):
        return None

    def trigger_dag_run(self, dag_id, run_id, conf, note=None):
        from tidemark.orchestration.airflow_api import TriggerResult

        self.started.append(conf["event_date"])
        return TriggerResult(run_id, created=True)


def test_reconcile_trigger_and_the_packing_pass_report_each_of_their_passes(tmp_path, monkeypatch):
    from tidemark.orchestration import reconcile
    from tidemark.panes import pack_cache, pack_maintenance

    lake = Lake.open(tmp_path / "lake")
    SimulatedStream(lake, 1).batch(
        [("u", "a", _at("2026-03-06T10:00"), "play"), ("v", "b", _at("2026-03-07T11:00"), "play")], mode=0.5
    )
    shown, airflow = Recorder(), FakeAirflow()
    stale, _ = reconcile.reconcile(lake, airflow, trigger=True, grace=timedelta(0), full=True, display=shown)
    assert airflow.started == ["2026-03-06", "2026-03-07"]
    assert [s.event_date for s in stale] == [date(2026, 3, 6), date(2026, 3, 7)]
    last = {state.what: state for state in shown.states}
    assert set(last) == {"examining dates", "looking up the stale dates' runs", "starting runs"}
    assert all(state.finished and (state.done, state.total) == (2, 2) for state in last.values())
    assert last["starting runs"].current == "2026-03-07"

    monkeypatch.setattr(pack_cache, "PACK_AT", 1)
    shown = Recorder()
    result = pack_maintenance.run_pass(lake, now=_at("2026-04-01T00:00"), display=shown)
    assert [p.event_date for p in result.packed] == [date(2026, 3, 7), date(2026, 3, 6)]  # newest first
    assert [(s.done, s.current) for s in shown.states if s.current] == [
        (0, "2026-03-07"),
        (1, "2026-03-07"),
        (1, "2026-03-06"),
        (2, "2026-03-06"),
        (2, "2026-03-06"),
    ]
