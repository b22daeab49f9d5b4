"""The terminal side of tidemark.base.progress: a progress bar, and a kill that acts as Ctrl-C.

A rich progress bar on stderr for the long commands (`rules migrate`, `reindex`, `gc`,
`reconcile`), and a kill that stops them the way Ctrl-C does.

The bar is drawn only when stderr is a terminal and the command's output is for a person (not
`--json`); stdout never gets a byte of it. While it is drawn, the structured log lines (stderr) and,
when stdout is the same terminal, the command's own lines are printed above it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from tidemark.base.progress import State


def _console() -> Console:
    """The console the bar is drawn on (tests swap in one with force_terminal)."""
    return Console(stderr=True)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class TimeLeft(ProgressColumn):
    """The pass's own estimate of the time left, counted down between updates.

    Its pace so far (State.eta_s): a date can take minutes, longer than rich's own speed window.
    """

    def render(self, task: Task) -> Text:
        """The estimate less the time since it was made, as `(~H:MM:SS left)`."""
        eta, at = task.fields.get("eta_s"), task.fields.get("eta_at", 0.0)
        if eta is None or task.elapsed is None:
            return Text("(-:--:-- left)")
        return Text(f"(~{_clock(max(eta - (task.elapsed - at), 0))} left)")


class TerminalBar:
    """A tidemark.base.progress.Display: one bar per pass (`State.what`).

    With done/total, the item being worked on, the time spent and the estimate of the time left.
    """

    def __init__(self, console: Console) -> None:
        """A bar drawn on `console` (stderr), which the command's own stdout lines go above."""
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}"),
            TimeElapsedColumn(),
            TimeLeft(),
            console=console,
            transient=True,
            redirect_stdout=sys.stdout.isatty(),  # a pipe's lines stay on stdout, untouched
            redirect_stderr=True,
        )
        self._tasks: dict[str, TaskID] = {}

    def update(self, state: State) -> None:
        """Show a pass's new state (its bar added on its first update)."""
        task = self._tasks.get(state.what)
        if task is None:
            task = self._tasks[state.what] = self.progress.add_task(state.what, total=state.total, current="")
        elapsed = self.progress.tasks[task].elapsed or 0.0
        self.progress.update(
            task,
            total=state.total,
            completed=state.done,
            current=state.current or "",
            eta_s=0.0 if state.finished else state.eta_s,
            eta_at=elapsed,
        )


@contextlib.contextmanager
def shown(enabled: bool = True) -> Iterator[TerminalBar | None]:
    """A TerminalBar while the block runs when `enabled` and stderr is a terminal, else None.

    Without a bar the pass only logs its progress.
    """
    console = _console() if enabled else None
    if console is None or not console.is_terminal:
        yield None
        return
    bar = TerminalBar(console)
    with bar.progress:
        yield bar


@contextlib.contextmanager
def kill_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM (a plain `kill`) raises KeyboardInterrupt as Ctrl-C does.

    So the pass logs where it stopped and the command exits 130. Main thread only (signals).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
