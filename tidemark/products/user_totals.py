"""Example consumer of changesets: per-user totals across all dates (sessions, minutes of session).

The totals are maintained only from each version's changeset (tidemark/iceberg/changes.py), never
by rereading a date.

The state is one JSON document replaced atomically, `<out>/state.json`:

    {"cursor": {event_date: the last version applied}, "totals": {user_id: [sessions, duration_us]}}

`apply(lake, event_date, out)` reads the date's changeset rows of every version after its cursor
(a filter on event_date and _commit_version: whichever version's asset event started it), applies
them in version order (+1 session and +duration for an insert or an update_postimage, -1 and
-duration for a delete or an update_preimage) and writes totals and cursor together. So:

- exactly once: a version at or before the cursor is never applied again (an event delivered twice,
  a retried task); a run killed before the write applied nothing, and its rerun applies it all;
- in any order: an event of an older version finds nothing after the cursor; one of a newer version
  applies every version up to the newest (the changes table holds them: a version's changeset is
  appended before its notice is recorded).

Durations are summed in integer microseconds, so the totals do not depend on the order of the
additions, and equal a recomputation from the dates' current sessions (`recompute`).
A date whose changesets do not reach back to its first version (versions written before changesets
existed; or empty changesets whose snapshots gc expired before the consumer first saw the date)
cannot be followed from changesets alone: `apply` refuses it (NeedsBootstrap).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, TypedDict, cast

from pyiceberg.expressions import And, BooleanExpression, GreaterThan

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.iceberg import changes, reader, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Root

log = get_logger("user_totals")

_ADD = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
_COLUMNS = (changes.CHANGE_TYPE, changes.COMMIT_VERSION, changes.PREVIOUS_VERSION, "user_id")


class NeedsBootstrap(RuntimeError):
    """A date's changesets start after its first version: they cannot rebuild it alone."""


class State(TypedDict):
    """`<out>/state.json`: the last version applied per date, and the totals per user."""

    cursor: dict[str, str]  # event date (YYYY-MM-DD, a JSON key) -> the last version applied
    totals: dict[str, list[int]]  # user_id -> [sessions, duration in microseconds]


def default_root(lake: Lake) -> str:
    """Where the example DAG writes when no root is configured."""
    return lake.product_dir("user_totals")


def state_uri(out: str) -> File:
    """The state document under the output root `out`."""
    return Root(out).file("state.json")


def load_state(out: str) -> State:
    """The state under `out`, empty when none was written yet."""
    # the document `apply` writes (File.read_json types any JSON object as a plain dict)
    state = cast("State | None", state_uri(out).read_json())
    return state or {"cursor": {}, "totals": {}}


def _micros(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def pending(lake: Lake, event_date: date, after: str | None) -> list[dict[str, Any]]:
    """The date's changeset rows of the versions after `after` (None: all), oldest version first."""
    tbl = changes.load(lake)
    if tbl is None:
        return []
    where: BooleanExpression = iceberg.date_filter(event_date)
    if after is not None:
        # pyiceberg's positional form (its typed signature is keyword-only), as table.date_filter
        where = And(where, GreaterThan(changes.COMMIT_VERSION, after))  # type: ignore[call-arg, arg-type]
    rows = (
        tbl.scan(row_filter=where, selected_fields=(*_COLUMNS, "session_start", "session_end")).to_arrow().to_pylist()
    )
    return sorted(rows, key=lambda r: r[changes.COMMIT_VERSION])


def apply(lake: Lake, event_date: date, out: str) -> dict[str, Any]:
    """Apply the date's changesets after its cursor; {event_date (YYYY-MM-DD), from, to, versions, rows}."""
    key = layout.event_date_text(event_date)  # the state's JSON key, and the result's text
    state = load_state(out)
    cursor = state["cursor"].get(key)
    rows = pending(lake, event_date, cursor)
    if not rows:
        return {"event_date": key, "from": cursor, "to": cursor, "versions": 0, "rows": 0}
    if cursor is None and not _from_first(lake, event_date, rows[0][changes.PREVIOUS_VERSION]):
        raise NeedsBootstrap(
            f"{event_date}: its first changeset is of version {rows[0][changes.COMMIT_VERSION]}, over "
            f"{rows[0][changes.PREVIOUS_VERSION]} (written without a changeset): start this date from its "
            f"current version instead"
        )
    totals = state["totals"]
    for row in rows:
        sign = _ADD[row[changes.CHANGE_TYPE]]
        entry = totals.setdefault(row["user_id"], [0, 0])
        entry[0] += sign
        entry[1] += sign * (_micros(row["session_end"]) - _micros(row["session_start"]))
        if entry == [0, 0]:
            del totals[row["user_id"]]
    newest = rows[-1][changes.COMMIT_VERSION]
    state["cursor"][key] = newest
    state_uri(out).write_json_atomic(dict(state))  # totals and cursor in one atomic write
    done = {
        "event_date": key,
        "from": cursor,
        "to": newest,
        "versions": len({r[changes.COMMIT_VERSION] for r in rows}),
        "rows": len(rows),
    }
    log.info("changesets applied", **done)
    return done


def _from_first(lake: Lake, event_date: date, previous: str | None) -> bool:
    """Do the changesets before `previous` (included) reach back to the date's first version?

    Only empty ones have no rows: their appends, in the changes table's history, chain the versions.
    """
    wanted = layout.event_date_text(event_date)  # summary properties are text
    appends = {
        props.get(changes.SUMMARY_VERSION): props.get("tidemark.previous-version") or None
        for _, props in changes.history(changes.load(lake))
        if props.get(changes.SUMMARY_DATE) == wanted
    }
    while previous is not None:
        if previous not in appends:
            return False
        previous = appends[previous]
    return True


def totals(out: str) -> dict[str, tuple[int, float]]:
    """{user_id: (sessions, minutes)} as the state holds them."""
    return {user: (n, us / 60_000_000) for user, (n, us) in load_state(out)["totals"].items()}


def recompute(lake: Lake) -> dict[str, list[int]]:
    """The same totals from every date's current sessions (what `apply` must equal)."""
    out: dict[str, list[int]] = {}
    for event_date in table_versions.dates_with_version(lake):
        for row in reader.read_sessions(lake, event_date).to_pylist():
            entry = out.setdefault(row["user_id"], [0, 0])
            entry[0] += 1
            entry[1] += _micros(row["session_end"]) - _micros(row["session_start"])
    return out
