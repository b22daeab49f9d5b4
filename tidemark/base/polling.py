"""Wait until something is true, with a deadline: the one poll loop (tenacity underneath).

    wait_for(lambda: port_open(port), timeout=60, what="the emulator")
    wait_for(check, 600, "run finished", interval=2, abort=lambda: proc.poll() is not None and ...)

check() returning a truthy value ends the wait with that value. An exception from check() listed
in `not_yet` counts as "not ready" (a server still starting refuses connections); any other
exception ends the wait at once, as does `abort()` raising, which is called after each "not ready"
(a process that died will never become ready). After `timeout` seconds: TimeoutError naming `what` and the last "not ready" exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


class _NotYet(Exception):
    def __init__(self, cause: BaseException | None = None):
        super().__init__(cause)
        self.cause = cause


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.25,
    not_yet: tuple[type[BaseException], ...] = (),
    abort: Callable[[], None] | None = None,
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll check() every `interval` seconds until it returns a truthy value (returned)."""

    def attempt() -> T:
        cause: BaseException | None = None
        try:
            value = check()
        except not_yet as exc:
            value, cause = None, exc
        if value:
            return value
        if abort is not None:
            abort()
        raise _NotYet(cause)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(interval),
        retry=tenacity.retry_if_exception_type(_NotYet),
        reraise=False,
    )
    try:
        return retrying(attempt)
    except tenacity.RetryError as exc:
        last = exc.last_attempt.exception()
        cause = last.cause if isinstance(last, _NotYet) else None
        because = f" (last: {type(cause).__name__}: {str(cause)[:300]})" if cause is not None else ""
        more = detail() if detail is not None else ""
        raise TimeoutError(f"{what} not ready after {timeout:g}s{because}{more}") from cause
