"""What the demo measured, from the lake and Airflow only (what any operator could see).

- per event_date and receipt_ts: what the stream wrote, and the way each receipt partition went
  landing -> receipt partition -> notice -> DAG run -> first version that includes it;
- per event_date: every version, and what late data corrected (sessions added / removed / changed
  against the previous version);
- the check of every date's current version against tidemark.demo.batch_reference.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from datetime import date, datetime, timedelta, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.base.times import iso_z
from tidemark.demo import batch_reference
from tidemark.demo.batch_reference import KEY_COLUMNS, DateCheck, SessionKey, lake_keys
from tidemark.demo.waves import Wave
from tidemark.iceberg import reader, table_versions
from tidemark.notices.report import corrected_status, notices_status
from tidemark.ops import inspect
from tidemark.products import session_metrics
from tidemark.store.lake import Lake

STEPS = (
    ("landing -> receipt partition", "landed_at", "received_at"),
    ("receipt -> notice published", "received_at", "notice_published_at"),
    ("notice -> DAG run started", "notice_published_at", "run_start"),
    ("DAG run (dedup + publish)", "run_start", "run_end"),
    ("receipt -> corrected partition", "received_at", "version_created_at"),
    ("landing -> corrected partition", "landed_at", "version_created_at"),
)


def _wave_of(received: datetime, waves: list[Wave]) -> int | None:
    """The last wave landed at or before a receipt (its files are in that micro-batch or before)."""
    found = None
    for wave in waves:
        if wave.landed_at is not None and wave.landed_at <= received:
            found = wave
    return None if found is None else found.index


def receipts_report(
    lake: Lake, dates: list[date], waves: list[Wave], all_runs: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Per receipt partition of `dates`: its wave, what it held, and the time of each step to a version.

    Rows for report.json: the event date as YYYY-MM-DD.
    """
    rows = []
    landed = {w.index: w.landed_at.astimezone(timezone.utc) for w in waves if w.landed_at}
    for event_date in dates:
        for item in inspect.lineage(lake, event_date, all_runs):
            wave = _wave_of(item.received_at, waves)
            times = {
                "landed_at": None if wave is None else landed.get(wave),
                "received_at": item.received_at,
                "notice_published_at": item.notice_published_at,
                "run_start": item.run_start,
                "run_end": item.run_end,
                "version_created_at": item.version_created_at,
            }
            rows.append(
                {
                    "event_date": layout.event_date_text(event_date),
                    "receipt_ts": item.receipt_ts,
                    "wave": None if wave is None else wave + 1,
                    "events": item.events,
                    "late": item.late,
                    "pane_kinds": item.pane_kinds,
                    "run_id": item.run_id,
                    "run_state": item.run_state,
                    "version": item.version,
                    "times": {k: inspect.iso(v) for k, v in times.items()},
                    "steps_s": {name: inspect.seconds_between(times[a], times[b]) for name, a, b in STEPS},
                }
            )
    return rows


def step_summary(receipt_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pipeline step: how many partitions took it, the median and the slowest time."""
    out = []
    for name, _, _ in STEPS:
        values = [r["steps_s"][name] for r in receipt_rows if r["steps_s"][name] is not None]
        out.append(
            {
                "step": name,
                "count": len(values),
                "median_s": round(statistics.median(values), 1) if values else None,
                "max_s": round(max(values), 1) if values else None,
            }
        )
    return out


def corrections(lake: Lake, event_date: date) -> list[dict[str, Any]]:
    """Every complete version of a date, oldest first, with what changed against the one before."""
    out: list[dict[str, Any]] = []
    previous: set[SessionKey] | None = None
    for marker in table_versions.list_versions(lake, event_date):
        table = reader.read_sessions(
            lake,
            event_date,
            as_of=marker.version,
            columns=list(KEY_COLUMNS),
        )
        keys = lake_keys(reader.to_records(table))
        row: dict[str, Any] = {
            "version": marker.version,
            "created_at": marker.created_at and iso_z(marker.created_at),
            "sessions": len(keys),
            "receipts": len(marker.receipts),
            "new_receipts": marker.new_receipts,
            "added": None,
            "removed": None,
        }
        if previous is not None:
            # A session that grew (a late event joined it) shows as one removed + one added key;
            # count per (user, start) to tell "changed" apart from "new" and "gone".
            before = {(k[0], k[1]): k for k in previous}
            after = {(k[0], k[1]): k for k in keys}
            row["added"] = len(set(after) - set(before))
            row["removed"] = len(set(before) - set(after))
            row["changed"] = sum(1 for k in set(after) & set(before) if after[k] != before[k])
        out.append(row)
        previous = keys
    return out


def collect(
    lake: Lake,
    waves: list[Wave],
    wave_counts: list[dict[str, Any]],
    all_runs: list[dict[str, Any]] | None,
    checks: list[DateCheck],
    timings: dict[str, Any],
    workload: dict[str, Any],
) -> dict[str, Any]:
    """Everything the report shows, as JSON (report.json): the lineage, versions, runs and checks.

    Event dates in it as YYYY-MM-DD text (the versions' keys too).
    """
    dates = [c.event_date for c in checks]
    receipt_rows = receipts_report(lake, dates, waves, all_runs)
    return {
        "lake": str(lake),
        "workload": workload,
        "waves": wave_counts,
        "timings_s": timings,
        "receipts": receipt_rows,
        "steps": step_summary(receipt_rows),
        "versions": {layout.event_date_text(d): corrections(lake, d) for d in dates},
        "dag_runs": [
            {
                "run_id": r["dag_run_id"],
                "state": r.get("state"),
                "event_date": (r.get("conf") or {}).get("event_date"),
                "partition_key": r.get("partition_key"),
                "start": r.get("start_date"),
                "end": r.get("end_date"),
            }
            for r in (all_runs or [])
        ],
        "checks": [{**asdict(c), "event_date": layout.event_date_text(c.event_date), "ok": c.ok} for c in checks],
        "ok": bool(checks) and all(c.ok for c in checks),
    }


def print_report(console: Console, data: dict[str, Any]) -> None:
    """Print the report's first tables: the receipt partitions, the steps, the corrections, the checks."""
    table = Table(
        title="1. what the stream wrote: receipt partitions per event_date, and their way to a corrected version"
    )
    for column in ("event_date", "receipt_ts", "wave", "events", "panes", "late", "DAG run", "first in version"):
        table.add_column(column, overflow="fold")
    for r in data["receipts"]:
        table.add_row(
            r["event_date"],
            r["receipt_ts"],
            str(r["wave"] or ""),
            str(r["events"]),
            ",".join(r["pane_kinds"]),
            "[red]late[/]" if r["late"] else "",
            r["run_state"] or "-",
            r["version"] or "[red]none[/]",
        )
    console.print(table)

    table = Table(title="2. corrections: every version of each date (changes against the previous version)")
    for column in (
        "event_date",
        "version",
        "created (UTC)",
        "sessions",
        "receipts read",
        "new receipts",
        "sessions added",
        "changed",
        "removed",
    ):
        table.add_column(column)
    for event_date, versions in data["versions"].items():
        for v in versions:
            table.add_row(
                event_date,
                v["version"],
                (v["created_at"] or "")[11:23],
                str(v["sessions"]),
                str(v["receipts"]),
                str(v["new_receipts"]),
                _n(v["added"]),
                _n(v.get("changed")),
                _n(v["removed"]),
            )
    console.print(table)

    table = Table(title="3. how long each step took (per receipt partition)")
    for column in ("step", "receipts", "median", "max"):
        table.add_column(column)
    for s in data["steps"]:
        table.add_row(s["step"], str(s["count"]), _s(s["median_s"]), _s(s["max_s"]))
    console.print(table)

    table = Table(
        title="4. final check: each date's current version against a batch recomputation "
        "(tidemark.demo.batch_reference) of every line landed"
    )
    for column in ("event_date", "version", "sessions expected", "published", "missing", "unexpected", ""):
        table.add_column(column)
    for c in data["checks"]:
        table.add_row(
            c["event_date"],
            c["version"] or "-",
            str(c["expected"]),
            str(c["published"]),
            str(c["missing"]),
            str(c["unexpected"]),
            "[green]equal[/]" if c["ok"] else "[red]DIFFERENT[/]",
        )
    console.print(table)


def _n(value: object) -> str:
    return "" if value is None else str(value)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def notices_report(lake: Lake) -> dict[str, Any]:
    """Both topics' notices as the lake records them: availability (counts) and corrected (each)."""
    status = notices_status(lake)
    corrected = corrected_status(lake)
    rows = sorted(corrected["sent"] + corrected["owed"], key=lambda r: (r["event_date"], r["version"]))
    return {
        "availability": {state: len(status[state]) for state in ("sent", "owed", "waiting")},
        "availability_late": sum(1 for r in status["sent"] if r["late"]),
        "corrected": rows,
    }


def consumer_report(
    out_root: str, landing: str, gap: SessionRules | timedelta, dates: list[date], archive: str | None = None
) -> list[dict[str, Any]]:
    """The example consumer DAG's metrics per date, next to the same metrics of the batch reference.

    The reference's of the landing and the stream's archive.
    """
    sessions_on: dict[date, list[tuple[str, datetime, datetime]]] = {}
    for s in batch_reference.sessionize(
        batch_reference.valid_events(batch_reference.landed_lines(landing, archive)), gap
    ):
        sessions_on.setdefault(s.event_date, []).append((s.user_id, s.session_start, s.session_end))
    out = []
    for event_date in dates:
        got = session_metrics.read(out_root, event_date)
        want = session_metrics.from_sessions(event_date, None, sessions_on.get(event_date, []))
        same = got is not None and {k: v for k, v in got.items() if k != "version"} == {
            k: v for k, v in want.items() if k != "version"
        }
        out.append({"event_date": layout.event_date_text(event_date), "metrics": got, "reference": want, "ok": same})
    return out


def print_notices_and_consumer(console: Console, data: dict[str, Any]) -> None:
    """Print both topics' notices and the example consumer's metrics next to the reference's."""
    notices = data["notices"]
    a = notices["availability"]
    console.print(
        f"availability topic: {a['sent']} notices sent ({notices['availability_late']} late), "
        f"{a['owed']} owed, {a['waiting']} waiting"
    )
    table = Table(
        title="5. corrected topic: one notice per published version (sessions added / removed / "
        "changed against the previous version)"
    )
    for column in (
        "event_date",
        "version",
        "previous",
        "change",
        "added",
        "removed",
        "changed",
        "rows",
        "snapshot",
        "state",
    ):
        table.add_column(column, overflow="fold")
    for r in notices["corrected"]:
        c = r["change"]
        table.add_row(
            r["event_date"],
            r["version"],
            r["previous_version"] or "-",
            c["kind"],
            _n(c["sessions_added"]),
            _n(c["sessions_removed"]),
            _n(c["sessions_changed"]),
            str(r["rows"]),
            str(r["snapshot_id"]),
            r["state"] if r["state"] == "sent" else f"[red]{r['state']}[/]",
        )
    console.print(table)
    table = Table(
        title="6. example consumer DAG (example_session_metrics, one run per corrected date): "
        "daily session metrics of the corrected dates, against the batch reference's"
    )
    for column in ("event_date", "version", "sessions", "users", "median s", "p95 s", "crossed midnight", ""):
        table.add_column(column)
    for r in data["consumer"]:
        m = r["metrics"] or {}
        table.add_row(
            r["event_date"],
            m.get("version") or "-",
            _n(m.get("sessions")),
            _n(m.get("users")),
            _f(m.get("median_duration_s")),
            _f(m.get("p95_duration_s")),
            _n(m.get("crossed_midnight")),
            "[green]equal[/]" if r["ok"] else f"[red]DIFFERENT[/] (reference {r['reference']})",
        )
    console.print(table)


def partitions_report(
    dedup_runs: list[dict[str, Any]], consumer_runs: list[dict[str, Any]], asset_events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per Airflow partition key (an event date): its dedup runs, asset events and consumer runs.

    The tidemark_dedup runs, the asset events of tidemark.sessions_dedup and the example consumer's
    runs. A dedup run whose key is not its conf's
    event_date (or has none) makes its row not ok; so does a date with events but no consumer run.
    """
    keys = sorted(
        {r.get("partition_key") or "-" for r in dedup_runs + consumer_runs}
        | {e.get("partition_key") or "-" for e in asset_events}
    )
    out = []
    for key in keys:
        runs = [r for r in dedup_runs if (r.get("partition_key") or "-") == key]
        consumers = [r for r in consumer_runs if (r.get("partition_key") or "-") == key]
        events = [e for e in asset_events if (e.get("partition_key") or "-") == key]
        keyed = key != "-" and all((r.get("conf") or {}).get("event_date") == key for r in runs)
        out.append(
            {
                "partition_key": key,
                "dedup_runs": len(runs),
                "asset_events": len(events),
                "versions": sorted((e.get("extra") or {}).get("version") or "" for e in events),
                "consumer_runs": len(consumers),
                "consumer_states": sorted({r.get("state") or "" for r in consumers}),
                "ok": keyed and (not events or bool(consumers)),
            }
        )
    return out


def print_partitions(console: Console, rows: list[dict[str, Any]]) -> None:
    """Print `partitions_report`'s rows: per partition key, its runs and asset events."""
    table = Table(
        title="7. Airflow partitions: per partition key (event date), the tidemark_dedup runs, "
        "the asset events of tidemark.sessions_dedup (one per version) and the consumer's runs"
    )
    for column in ("partition_key", "dedup runs", "asset events", "versions", "consumer runs", ""):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            r["partition_key"],
            str(r["dedup_runs"]),
            str(r["asset_events"]),
            " ".join(r["versions"]),
            f"{r['consumer_runs']} ({', '.join(r['consumer_states'])})" if r["consumer_runs"] else "0",
            "[green]ok[/]" if r["ok"] else "[red]NOT OK[/]",
        )
    console.print(table)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
