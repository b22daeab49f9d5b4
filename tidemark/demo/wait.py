"""Waiting for each step of the pipeline, with a progress display.

A wait fails with the name of the component that did not do its part and where its log is.

    stream    every landed file is in a committed micro-batch (the checkpoint's file-source log)
    notices   every complete receipt partition is advertised (nothing owed in the lake's outbox)
    runs      every advertised notice's DAG run exists in Airflow and has finished
    versions  every date's current version includes all its receipt partitions (none pending)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from rich.progress import Progress

from tidemark.base import names
from tidemark.base.polling import wait_for
from tidemark.devstack.stack import Stack, StackError
from tidemark.iceberg import table_versions
from tidemark.ingest import landing_archive
from tidemark.notices import corrected_delivery
from tidemark.ops import inspect
from tidemark.orchestration import runs as run_ids
from tidemark.orchestration.airflow_api import RUN_ENDED, AirflowClient
from tidemark.panes import receipts
from tidemark.products import session_metrics
from tidemark.store.lake import Lake


def processed_files(checkpoint: str) -> set[str]:
    """Base names of the files the stream's committed micro-batches read.

    From its file-source log (`N.compact` files hold all entries up to N), in the checkpoint's current generation: a stream
    run with --archive starts a new one on rotation, after moving the files the old one read.
    """
    query = landing_archive.current(checkpoint).query_dir(checkpoint)
    committed = {int(n) for n in query.folder("commits").names() if n.isdigit()}
    seen = set()
    source_log = query.folder("sources", "0")
    for name in source_log.names():
        if name.startswith("."):
            continue
        text = source_log.file(name).read_text() or ""
        for line in text.splitlines()[1:]:  # the first line is the log format version
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("batchId") in committed:
                seen.add(entry["path"].rsplit("/", 1)[-1])
    return seen


def until(
    check: Callable[[], tuple[bool, str]],
    timeout: float,
    what: str,
    progress: Progress,
    on_timeout: Callable[[str], Exception],
    stack: Stack | None = None,
    interval: float = 2.0,
) -> float:
    """Poll check() -> (done, status text) with a spinner line; the seconds it took.

    Polls with tidemark.base.polling.wait_for. Between polls, a stack process that died fails the wait at once, naming it
    and its log; after `timeout`, on_timeout(the last status) is raised.
    """
    began = time.monotonic()
    task = progress.add_task(what, total=None)
    status = [""]

    def poll() -> bool:
        try:
            done, status[0] = check()
        except Exception as exc:  # noqa: BLE001 - a component that cannot answer right now
            done, status[0] = False, f"{type(exc).__name__}: {str(exc)[:120]}"
        progress.update(task, description=f"{what}: {status[0]} ({time.monotonic() - began:.0f}s)")
        return done

    def died() -> None:
        for name, record in stack.exited().items() if stack is not None else ():
            raise StackError(name, f"exited while waiting for {what}", record.log_path)

    try:
        wait_for(poll, timeout, what, interval=interval, abort=died)
    except TimeoutError:
        raise on_timeout(status[0]) from None
    finally:
        progress.remove_task(task)
    return round(time.monotonic() - began, 1)


def stream_caught_up(checkpoint: str, landed: set[str]) -> tuple[bool, str]:
    """Whether every landed file is in a committed micro-batch; the status text."""
    done = processed_files(checkpoint) & landed
    return len(done) == len(landed), f"{len(done)}/{len(landed)} files in committed micro-batches"


def notices_sent(lake: Lake, after: str | None = None) -> tuple[bool, str, list[dict[str, Any]]]:
    """(all advertised, status, the sent notices).

    after: a receipt_ts; partitions received up to it
    are not expected to be advertised (history a benchmark wrote before the stack started).
    """
    sent: list[dict[str, Any]] = []
    owed, unadvertised = 0, 0
    for event_date in receipts.list_event_dates(lake):
        entries = inspect.notices_of(lake, event_date)
        covered = {
            ts
            for e in entries
            if e["state"] == "sent"
            for ts in e["notice"].get("receipt_ts_list", [e["notice"]["receipt_ts"]])
        }
        owed += sum(1 for e in entries if e["state"] == "owed")
        unadvertised += sum(
            1 for ts in receipts.list_receipts(lake, event_date) if ts not in covered and (after is None or ts > after)
        )
        sent.extend(e for e in entries if e["state"] == "sent")
    return (
        owed == 0 and unadvertised == 0,
        f"{len(sent)} published, {owed} owed, {unadvertised} partition(s) not advertised yet",
        sent,
    )


def runs_finished(client: AirflowClient, sent: list[dict[str, Any]]) -> tuple[bool, str, list[dict[str, Any]]]:
    """Whether every sent notice's DAG run exists and none is running; the status, the dedup DAG's runs."""
    all_runs = client.list_dag_runs(names.get("DAG_ID"))
    ids = {r["dag_run_id"]: r for r in all_runs}
    expected = {run_ids.run_id_for_notice(e["notice"]) for e in sent}
    missing = expected - set(ids)
    active = [r for r in all_runs if r["state"] not in RUN_ENDED]
    failed = [r for r in all_runs if r["state"] == "failed"]
    text = (
        f"{len(expected) - len(missing)}/{len(expected)} notice runs created, {len(active)} running, "
        f"{len(all_runs) - len(active) - len(failed)} succeeded, {len(failed)} failed"
    )
    return not missing and not active, text, all_runs


def versions_current(lake: Lake) -> tuple[bool, str]:
    """Whether every date has a version that includes all its receipts; the status text."""
    rows = inspect.partitions(lake)
    pending = sum(r["pending"] for r in rows)
    return pending == 0 and all(
        r["version"] for r in rows
    ), f"{sum(1 for r in rows if r['version'])}/{len(rows)} dates published, {pending} receipt(s) pending"


def run_log_hint(stack: Stack, run: dict[str, Any]) -> str:
    """Where Airflow keeps a run's task logs."""
    folder = os.path.join(stack.home, "airflow", "logs", f"dag_id={names.get('DAG_ID')}", f"run_id={run['dag_run_id']}")
    return folder if os.path.isdir(folder) else os.path.join(stack.home, "airflow", "logs")


def component_log(stack: Stack, name: str) -> str:
    """The log file of one of the stack's components (its logs folder when it has no record)."""
    record = stack.record(name)
    return record.log_path if record else os.path.join(stack.home, "logs")


def consumer_caught_up(lake: Lake, out_root: str) -> tuple[bool, str]:
    """Whether every date's consumer metrics were rebuilt from its current version, none owed.

    None owed: no corrected notice is owed.
    """
    dates = table_versions.dates_with_version(lake)
    done = 0
    for event_date in dates:
        row = session_metrics.read(out_root, event_date)
        current = table_versions.current_version(lake, event_date)
        done += bool(row and current and row["version"] == current.version)
    owed = len(corrected_delivery.outbox(lake).owed())
    return (
        done == len(dates) and owed == 0,
        f"{done}/{len(dates)} dates' metrics rebuilt from their current version, {owed} corrected notice(s) owed",
    )
