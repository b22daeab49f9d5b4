"""The progress of a long pass over many items (dates, mostly).

How many are done and left, which one is being worked on, and an estimate of the time left. The
domain code counts with a Progress; what it counts goes to
  - the logs: a structured "progress" line (what, done, left, total, current, elapsed_s, eta_s)
    once LOG_EVERY_S seconds have passed since the pass started or since the last such line, and a
    last one ("finished": true) when a pass of LOG_EVERY_S or more ends. A pass over 10^6 items
    writes a few lines a minute, not one per item, and a pass of a second writes none;
  - a Display, when the caller gives one: the CLI's terminal bar (tidemark/commands/progress_bar.py).
    The core imports no terminal library: it only calls update().
A pass stopped by an exception (KeyboardInterrupt, a kill turned into one, a failure) logs where it
stopped: the item being worked on and the counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from tidemark.base.logs import Logger, get_logger

LOG_EVERY_S = 10.0

T = TypeVar("T")


@dataclass(frozen=True)
class State:
    """One pass's progress at one moment."""

    what: str  # what the pass does, e.g. "re-deduplicating dates"
    total: int | None  # None: not known (yet)
    done: int
    current: str | None  # the item being worked on, or the last one done
    elapsed_s: float
    finished: bool = False

    @property
    def left(self) -> int | None:
        """Items not done yet; None without a total."""
        return None if self.total is None else max(self.total - self.done, 0)

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far; None before the first item is done or without a total."""
        left = self.left
        if left is None or not self.done:
            return None
        return round(self.elapsed_s / self.done * left, 1)

    def fields(self) -> dict[str, Any]:
        """The state as a log line's fields."""
        return {
            "what": self.what,
            "done": self.done,
            "left": self.left,
            "total": self.total,
            "current": self.current,
            "elapsed_s": round(self.elapsed_s, 1),
            "eta_s": self.eta_s,
            **({"finished": True} if self.finished else {}),
        }


class Display(Protocol):
    """Where a caller shows progress as it happens (a terminal bar); called on every change."""

    def update(self, state: State) -> None:
        """Show `state`."""
        ...


class Progress:
    """Counts one pass.

    Use it as a context manager around the pass::

    with Progress("re-deduplicating dates", len(dates), log=log, display=display) as progress:
        for event_date in progress.each(dates):
            ...
    """

    def __init__(
        self,
        what: str,
        total: int | None = None,
        *,
        log: Logger | None = None,
        display: Display | None = None,
        log_every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        **context: Any,
    ):
        """A pass doing `what` over `total` items (None: not known).

        `log`: where progress lines go (the "progress" component's logger by default); `display`:
        shown on every change; `log_every_s`: the least time between two progress lines; `clock`:
        seconds, monotonic; `context`: fields every line carries, e.g. lake=.
        """
        self.what = what
        self.total = total
        self.done = 0
        self.current: str | None = None
        self._log = log or get_logger("progress")
        self._display = display
        self._every = log_every_s
        self._clock = clock
        self._context = context  # fields every line carries, e.g. lake=
        self._started = clock()
        self._logged_at = self._started
        self._logged = False

    def state(self, finished: bool = False) -> State:
        """The pass's state now."""
        return State(self.what, self.total, self.done, self.current, self._clock() - self._started, finished)

    def working_on(self, item: object) -> None:
        """Name `item` as the one being worked on."""
        self.current = str(item)
        self._show()

    def advance(self, item: object | None = None, count: int = 1) -> None:
        """`count` more items done (`item`: the one just done, when working_on did not name it)."""
        self.done += count
        if item is not None:
            self.current = str(item)
        state = self._show()
        if self._clock() - self._logged_at >= self._every and self.done != self.total:  # the end: __exit__
            self._write("progress", state)

    def each(self, items: Iterable[T], name: Callable[[T], object] = str) -> Iterator[T]:
        """The items one by one, counted.

        Each is named current while the caller works on it, and counted done when the caller asks
        for the next one (or the loop ends).
        """
        for item in items:
            self.working_on(name(item))
            yield item
            self.advance()

    def __enter__(self) -> Progress:
        """Start the pass's clock and show it."""
        self._started = self._logged_at = self._clock()
        self._show()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Log the end of the pass, or where an exception stopped it."""
        if kind is None:
            state = self._show(finished=True)
            if self._logged or state.elapsed_s >= self._every:
                self._write("progress", state)
            return
        if kind is GeneratorExit:  # the caller left a tracked() loop early: its own code says why
            return
        state = self.state()
        self._log.warning(
            "stopped before the end",
            **state.fields(),
            stopped_at=state.current,
            error=f"{kind.__name__}: {exc}" if str(exc) else kind.__name__,
            **self._context,
        )

    def _show(self, finished: bool = False) -> State:
        state = self.state(finished)
        if self._display is not None:
            self._display.update(state)
        return state

    def _write(self, event: str, state: State) -> None:
        self._log.info(event, **state.fields(), **self._context)
        self._logged_at = self._clock()
        self._logged = True


def tracked(
    items: Iterable[T],
    what: str,
    *,
    total: int | None = None,
    log: Logger | None = None,
    display: Display | None = None,
    name: Callable[[T], object] = str,
    **context: Any,
) -> Iterator[T]:
    """`items` one by one, counted by a Progress of their own (total: len(items) when it has one).

    For a loop that needs no code of its own around the pass, e.g.::

        for event_date in tracked(dates, "packing closed dates", log=log, display=display): ...
    """
    if total is None and isinstance(items, Sized):
        total = len(items)
    with Progress(what, total, log=log, display=display, **context) as progress:
        yield from progress.each(items, name)
