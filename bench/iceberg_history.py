"""One Iceberg commit of a date against the table's age (issue 27, item 5).

    .venv/bin/python -m bench.iceberg_history [--days 7,365] [--latency-ms 30]

Builds the deduplicated table as a lake running for N days leaves it: each day the new date gets its
first version and the two dates before it a correction (three commits a day, so every date ends
with three versions), and `tidemark gc` expires the snapshots that stopped being current more than
its retention ago (7 days: the default of dags/tidemark_maintenance.py; run here every 7 simulated
days with a clock set so that 7 days of commits stay). A young table (7 days) and an old one (365,
1095) then hold the same number of snapshots; what differs is the number of dates. Then it times
`tidemark.iceberg.commits.commit` of a new version of yesterday's date (files and marker prepared before:
what a dedup run hands the commit), and counts at the filesystem layer what it reads and writes:
pyiceberg's own I/O through a counting FileIO (`CountingFileIO`, the catalog's `py-io-impl`), the
lake's through a counting filesystem under the Lake handle. With --latency-ms every operation sleeps
that long first (a bucket's round trip). The catalog itself (SQLite here, a REST service in
production) is not counted: one load and one compare-and-swap per attempt whatever the age. The
shape table also counts what `table_versions.current_version` of the newest date reads (the table load,
and since issue 27 item 5 the date's manifest and the run's marker), and the `tidemark.current.*`
properties left (0 since issue 27 item 5; 1 per date before).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.fs as pafs
from pyiceberg.io.pyarrow import PyArrowFileIO

import bench
from bench import counting_fs
from tidemark.base.layout import as_event_date
from tidemark.store.lake import Lake

NAME = "iceberg_history"
RETENTION = timedelta(days=7)
COMMITS_PER_DAY = 3  # the new date's first version, corrections of the two dates before it


class Counter(counting_fs.CountingHandler):
    """Counts every operation (and the bytes of the objects opened), split into the table's
    metadata (under .../metadata/) and everything else, optionally sleeping first."""

    def __init__(self):
        super().__init__()
        self.reset()

    def reset(self) -> None:
        self.counts = {
            "metadata read": 0,
            "metadata bytes read": 0,
            "metadata written": 0,
            "other read": 0,
            "other written": 0,
            "stat": 0,
            "list": 0,
        }

    def count(self, op: str, path: str, n: int = 1) -> None:
        if op == "change":
            return
        kind = (
            ("metadata " if "/metadata/" in path else "other ") + ("written" if op == "write" else op)
            if op in ("read", "write")
            else op
        )
        size = self.inner.get_file_info(path).size if kind == "metadata read" else 0
        with self.lock:
            self.counts[kind] += n
            if size:
                self.counts["metadata bytes read"] += size

    def open_output_stream(self, path, metadata):
        self.inner.create_dir(os.path.dirname(path), recursive=True)  # as pyiceberg's local filesystem does
        return super().open_output_stream(path, metadata)


COUNTER = Counter()
_FS = pafs.PyFileSystem(COUNTER)


class CountingFileIO(PyArrowFileIO):
    """pyiceberg's FileIO on the counting filesystem for local files (the catalog's py-io-impl)."""

    def _initialize_fs(self, scheme: str, netloc: str | None = None):
        if scheme == "file":
            return _FS
        return super()._initialize_fs(scheme, netloc)


def counted_lake(root: str) -> Lake:
    """The lake at root, every file operation of it counted; its table's catalog reads and writes
    the metadata through CountingFileIO (the lake's _catalog/catalog.json)."""
    os.makedirs(os.path.join(root, "_catalog"), exist_ok=True)
    with open(os.path.join(root, "_catalog", "catalog.json"), "w") as out:
        json.dump(
            {
                "type": "sql",
                "uri": f"sqlite:///{root}/_catalog/iceberg.db",
                "warehouse": f"file://{root}",
                "py-io-impl": "bench.iceberg_history.CountingFileIO",
            },
            out,
        )
    return Lake(root, filesystem=_FS, root=root)


def _day(i: int) -> str:
    from bench.iceberg_commit import DAY0

    return (DAY0 + timedelta(days=i)).isoformat()


def expire(lake: Lake, keep: int) -> int:
    """`tidemark gc` with the 7-day retention on a clock set `retention` after the keep-th newest
    snapshot stopped being current: the keep newest stay, as after 7 days of daily gc."""
    from tidemark.iceberg import table as iceberg
    from tidemark.iceberg import table_versions
    from tidemark.ops import gc

    lineage = [s for s, _ in table_versions.snapshot_versions(iceberg.load(lake))]
    if len(lineage) <= keep:
        return 0
    now = datetime.fromtimestamp(lineage[-keep].timestamp_ms / 1000, timezone.utc) + RETENTION
    return len(gc.gc(lake, RETENTION, now=now))


def build(lake: Lake, days: int, sessions: int) -> dict:
    """A table after `days` days of three commits a day and gc; returns what the build took."""
    from bench.iceberg_commit import prepared, receipts_for
    from tidemark.iceberg import commits

    began = time.perf_counter()
    keep = 7 * COMMITS_PER_DAY
    for i in range(days):
        for back in range(COMMITS_PER_DAY):
            if i - back >= 0:
                assert commits.commit(lake, prepared(lake, _day(i - back), receipts_for(back), sessions)).committed
        if (i + 1) % 7 == 0:
            expire(lake, keep)
    expire(lake, keep)
    return {"build s": round(time.perf_counter() - began, 1)}


def shape(lake: Lake) -> dict:
    """What the current metadata holds: sizes of the metadata file, its properties and snapshots,
    and of the current manifest list."""
    from tidemark.iceberg import table as iceberg
    from tidemark.iceberg import table_versions

    tbl = iceberg.load(lake)
    raw = json.loads(Path(tbl.metadata_location[len("file://") :]).read_text())
    manifests = tbl.current_snapshot().manifests(tbl.io)
    newest = table_versions.dates_with_version(lake, tbl)[-1]
    table_versions._LIVE_CACHE.clear()  # as a fresh process: nothing of this table known yet
    COUNTER.reset()
    t0 = time.perf_counter()
    table_versions.current_version(lake, newest)  # what every dedup run and reader asks first
    current_s = time.perf_counter() - t0
    current_reads = COUNTER.counts["metadata read"] + COUNTER.counts["other read"]
    current_bytes = COUNTER.counts["metadata bytes read"]
    return {
        "current_version objects read": current_reads,
        "current_version metadata bytes read": current_bytes,
        "current_version s": round(current_s, 3),
        "per-date properties": sum(1 for k in tbl.properties if k.startswith(table_versions.CURRENT_PREFIX)),
        "dates": len(table_versions.dates_with_version(lake, tbl)),
        "snapshots": len(tbl.snapshots()),
        "metadata file bytes": os.path.getsize(tbl.metadata_location[len("file://") :]),
        "properties bytes": len(json.dumps(raw.get("properties", {}))),
        "snapshots bytes": len(json.dumps(raw.get("snapshots", []))),
        "manifests in the current snapshot": len(manifests),
        "manifest list bytes": os.path.getsize(tbl.current_snapshot().manifest_list[len("file://") :]),
    }


def parse_cost(lake: Lake) -> dict:
    """Seconds pyiceberg takes to parse the current metadata file, and the same file without the
    per-date properties (what a load and a commit pay for them, before any I/O)."""
    from pyiceberg.serializers import FromByteStream  # noqa: F401 - the loader the catalog uses
    from pyiceberg.table.metadata import TableMetadataUtil

    from tidemark.iceberg import table as iceberg
    from tidemark.iceberg import table_versions

    text = Path(iceberg.load(lake).metadata_location[len("file://") :]).read_text()
    raw = json.loads(text)
    raw["properties"] = {k: v for k, v in raw["properties"].items() if not k.startswith(table_versions.CURRENT_PREFIX)}
    stripped = json.dumps(raw)

    def cost(body: str) -> float:
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            TableMetadataUtil.parse_raw(body).model_dump_json()  # parse, then serialize as a commit does
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    return {
        "parse+write s": round(cost(text), 4),
        "without per-date properties": round(cost(stripped), 4),
        "bytes without per-date properties": len(stripped),
    }


def _metadata_files(root: str) -> dict[str, int]:
    folder = os.path.join(root, "sessions_dedup", "metadata")
    return {name: os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)}


def one_commit(lake: Lake, root: str, sessions: int, latency_ms: float) -> dict:
    """Commit a new version of yesterday's date (prepared first, not timed), counted."""
    from bench.iceberg_commit import prepared, receipts_for
    from tidemark.iceberg import commits, table_versions
    from tidemark.iceberg import table as iceberg

    tbl = iceberg.load(lake)
    newest = table_versions.dates_with_version(lake, tbl)[-1]
    day = (as_event_date(newest) - timedelta(days=1)).isoformat()
    # One receipt partition more than the current version: a correction that must replace it.
    version = len(table_versions.current_version(lake, as_event_date(day), tbl).receipts)
    marker = prepared(lake, day, receipts_for(version), sessions)
    before = _metadata_files(root)
    COUNTER.reset()
    COUNTER.latency_s = latency_ms / 1000
    try:
        t0 = time.perf_counter()
        outcome = commits.commit(lake, marker)
        seconds = time.perf_counter() - t0
    finally:
        COUNTER.latency_s = 0.0
    assert outcome.committed
    assert outcome.attempts == 1
    after = _metadata_files(root)
    written = {k: v for k, v in after.items() if k not in before}
    return {
        "s": seconds,
        **COUNTER.counts,
        "metadata bytes written": sum(written.values()),
        "written files": len(written),
    }


def measure(
    days: int, root: str, sessions: int, repeats: int, latencies: list[float], reuse: bool = False
) -> tuple[dict, list[dict]]:
    if reuse and os.path.exists(os.path.join(root, "_catalog", "catalog.json")):
        lake, built = counted_lake(root), {"build s": "reused"}  # a table an earlier run built
        expire(lake, 7 * COMMITS_PER_DAY)  # as its build ends (it may have been stopped mid-week)
    else:
        shutil.rmtree(root, ignore_errors=True)
        lake = counted_lake(root)
        built = build(lake, days, sessions)
    built.update(shape(lake))
    built.update(parse_cost(lake))
    samples = []
    for latency in latencies:
        runs = []
        for _ in range(repeats if not latency else 1):
            runs.append(one_commit(lake, root, sessions, latency))
        best = runs[0] | {"s": statistics.median(r["s"] for r in runs), "latency ms": latency, "n": len(runs)}
        samples.append(best)
    return built, samples


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m bench.iceberg_history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workdir", default="/tmp/tidemark-bench/iceberg_history")
    p.add_argument("--scale", choices=["small", "full"], default="small")
    p.add_argument("--days", default=None, help="table ages in days, comma-separated (small 7,60; full 7,365)")
    p.add_argument("--latency-ms", type=float, nargs="*", default=[0, 30])
    p.add_argument("--sessions", type=int, default=10, help="sessions per version (one file)")
    p.add_argument("--repeats", type=int, default=5, help="commits timed without latency (median)")
    p.add_argument("--reuse", action="store_true", help="measure tables an earlier run built (same workdir)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    args.days = [int(d) for d in (args.days or ("7,60" if args.scale == "small" else "7,365")).split(",")]
    return args


def main(argv=None) -> int:
    import logging

    previous = os.environ.get("TIDEMARK_LOG_LEVEL")
    os.environ.setdefault("TIDEMARK_LOG_LEVEL", "warning")
    logging.disable(logging.INFO)
    try:
        return _run(argv)
    finally:
        logging.disable(logging.NOTSET)
        if previous is None:
            os.environ.pop("TIDEMARK_LOG_LEVEL", None)


def _run(argv) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    env = bench.machine()
    shapes, rows = [], []
    for days in args.days:
        load = os.getloadavg()[0]
        built, samples = measure(
            days, os.path.join(args.workdir, f"days{days}"), args.sessions, args.repeats, args.latency_ms, args.reuse
        )
        shapes.append(
            [
                days,
                built["dates"],
                built["snapshots"],
                f"{built['metadata file bytes']:,}",
                f"{built['properties bytes']:,}",
                f"{built['snapshots bytes']:,}",
                built["manifests in the current snapshot"],
                f"{built['manifest list bytes']:,}",
                built["parse+write s"],
                f"{built['bytes without per-date properties']:,}",
                built["without per-date properties"],
                built["build s"],
                built["per-date properties"],
                f"{built['current_version objects read']} / {built['current_version metadata bytes read']:,}",
                built["current_version s"],
            ]
        )
        for s in samples:
            rows.append(
                [
                    days,
                    s["latency ms"],
                    round(s["s"], 3),
                    s["metadata read"],
                    f"{s['metadata bytes read']:,}",
                    s["metadata written"],
                    f"{s['metadata bytes written']:,}",
                    s["other read"],
                    s["stat"],
                    s["list"],
                    f"{load:.1f}-{os.getloadavg()[0]:.1f}",
                ]
            )
        print(shapes[-1], rows[-len(samples) :], flush=True)
    columns = [
        "days of history",
        "latency ms/op",
        "commit s (median)",
        "metadata objects read",
        "metadata bytes read",
        "metadata objects written",
        "metadata bytes written",
        "other objects read (footers, markers, rules)",
        "stats",
        "lists",
        "load (1 min) before-after",
    ]
    shape_columns = [
        "days",
        "dates",
        "snapshots kept",
        "metadata file bytes",
        "of which properties",
        "of which snapshots",
        "manifests in the current snapshot",
        "manifest list bytes",
        "metadata parse+write s",
        "metadata bytes without per-date properties",
        "parse+write s without them",
        "build s",
        "per-date properties",
        "current_version: objects / metadata bytes read",
        "current_version s",
    ]
    bench.print_table("One Iceberg commit against the table's age", columns, rows)
    bench.print_table("The table after N days", shape_columns, shapes)
    if not args.no_write:
        after = "## The table after N days (gc every 7 days, 7-day retention)\n\n" + "\n".join(
            bench.markdown_table(shape_columns, shapes)
        )
        path = bench.write_results(
            NAME,
            "One Iceberg commit against the table's age (issue 27, item 5)",
            columns,
            rows,
            __doc__,
            {
                "days": args.days,
                "commits per day": COMMITS_PER_DAY,
                "gc retention": "7d",
                "sessions per version": args.sessions,
                "repeats": args.repeats,
            },
            env,
            command=".venv/bin/python -m bench.iceberg_history " + " ".join(argv if argv is not None else sys.argv[1:]),
            after=after,
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    # pyiceberg imports CountingFileIO as bench.iceberg_history: run that module's main, so that it
    # and this run share one COUNTER.
    from bench.iceberg_history import main as _main

    sys.exit(_main())
