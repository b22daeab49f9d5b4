"""Memory over a long run: peak RSS of the stream's process tree (driver JVM + Python) and the size
of its open-session state, batch after batch, over many days of event time.

One `tidemark stream --available-now` process reads a landing of many files spanning ~100 days of
event time, a few files per micro-batch. While it runs, this benchmark samples the RSS of its
process tree every 0.5 s and watches `<checkpoint>/state/batch_id=N/`: as soon as a version's
marker (`_tidemark_state.json`) appears it records the folder's bytes and the session count (older
versions are deleted by the stream, so it is read while it exists). After the run the structured
logs (`batch committed`) give each batch's seconds, input lines and watermark.

The claim checked: state and memory are bounded by the sessions open at a time (users active
within gap + watermark delay + allowed lateness), not by how much history went through, so the
series is flat: the last quarter of the batches is no bigger than the first quarter (after warm-up).

    .venv/bin/python -m bench.memory --scale small     # ~40k events over 100 days, 40 batches
    .venv/bin/python -m bench.memory --scale full      # 400k events over 100 days, 40 batches
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import date

import bench
from bench.proctree import is_jvm, tree_pids, tree_rss
from bench.stream_throughput import BIN, ROOT, json_lines, load, mb, parse_iso, print_wide
from tidemark.demo import generate

NAME = "memory"
STATE_MARKER = "_tidemark_state.json"

SCALES = {
    "tiny": dict(events=4_000, users=40, days=20, files=8, fpt=1),
    "small": dict(events=40_000, users=400, days=100, files=40, fpt=1),
    # Scaled down from the 10M events / 100 days of the brief to fit a 2-core machine in minutes.
    "full": dict(events=400_000, users=4_000, days=100, files=40, fpt=1),
}


def dir_bytes(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, name))
    return total


def jvm_heap(root_pid: int) -> dict:
    """Heap used and committed of the driver JVM under root_pid (`jstat -gc`), in bytes; {} if
    jstat is missing. RSS alone cannot tell a leak from a JVM that grows its heap towards -Xmx
    lazily and never gives it back; used vs committed can."""
    for pid in tree_pids(root_pid):
        if not is_jvm(pid):
            continue
        try:
            out = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
        lines = out.split("\n")
        if len(lines) < 2 or not lines[1].strip():
            return {}
        row = dict(zip(lines[0].split(), lines[1].split(), strict=False))
        try:
            kb = lambda *keys: sum(float(row[k]) for k in keys)  # noqa: E731, B023 (a local shorthand, used at once)
            return {
                "heap_used": int(kb("S0U", "S1U", "EU", "OU") * 1024),
                "heap_committed": int(kb("S0C", "S1C", "EC", "OC") * 1024),
                "old_used": int(kb("OU") * 1024),
            }
        except (KeyError, ValueError):
            return {}
    return {}


class Watcher(threading.Thread):
    """Samples RSS (with wall time) and records each state version when its marker appears."""

    def __init__(self, pid: int, checkpoint: str, interval: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.state_root = os.path.join(checkpoint, "state")
        self.samples: list[tuple[float, dict]] = []
        self.versions: dict[int, dict] = {}
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            sample = tree_rss(self.pid)
            if sample["total"]:
                self.samples.append((time.time(), sample))
            self._scan()
            self._halt.wait(self.interval)
        self._scan()

    def _scan(self):
        try:
            names = os.listdir(self.state_root)
        except OSError:
            return
        for name in names:
            if not name.startswith("batch_id="):
                continue
            batch_id = int(name.split("=", 1)[1])
            if batch_id in self.versions:
                continue
            folder = os.path.join(self.state_root, name)
            try:
                with open(os.path.join(folder, STATE_MARKER)) as handle:
                    meta = json.load(handle)
            except (OSError, ValueError):
                continue  # not complete yet
            self.versions[batch_id] = {
                "bytes": dir_bytes(folder),
                "sessions": int(meta["sessions"]),
                "seen_at": time.time(),
                **jvm_heap(self.pid),
            }

    def stop(self):
        self._halt.set()
        self.join(timeout=10)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", choices=sorted(SCALES), default="small")
    p.add_argument("--events", type=int)
    p.add_argument("--files", type=int)
    p.add_argument("--users", type=int)
    p.add_argument("--days", type=int)
    p.add_argument("--files-per-trigger", type=int)
    p.add_argument("--master", default="local[2]")
    p.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark conf for the stream (via PYSPARK_SUBMIT_ARGS), e.g. spark.ui.retainedJobs=50",
    )
    p.add_argument("--timeout", type=float, default=5400)
    p.add_argument("--workdir", default="/tmp/tidemark-bench/memory")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def quarter_median(values: list[float], which: str) -> float:
    n = max(1, len(values) // 4)
    part = values[:n] if which == "first" else values[-n:]
    return statistics.median(part) if part else 0


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    scale = dict(SCALES[args.scale])
    for key in ("events", "files", "users", "days"):
        if getattr(args, key):
            scale[key] = getattr(args, key)
    fpt = args.files_per_trigger or scale["fpt"]
    env = bench.machine()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    landing, lake, checkpoint = (os.path.join(work, x) for x in ("landing", "lake", "checkpoint"))
    workload = generate.Workload(
        events=scale["events"],
        users=scale["users"],
        days=scale["days"],
        files=scale["files"],
        start=date(2026, 1, 1),
        seed=23,
    )
    with bench.stopwatch() as t:
        summary = generate.generate(landing, workload, progress=False)
    print(
        f"generated {summary['deliveries']} lines in {summary['files']} files over {scale['days']} days "
        f"({t['seconds']}s)",
        flush=True,
    )

    log_path = os.path.join(work, "stream.log")
    argv = [
        os.path.join(BIN, "tidemark"),
        "stream",
        "--landing",
        landing,
        "--lake",
        lake,
        "--checkpoint",
        checkpoint,
        "--available-now",
        "--master",
        args.master,
        "--max-files-per-trigger",
        str(fpt),
    ]
    load_before = load()
    started = time.time()
    with open(log_path, "w") as log:
        env = dict(os.environ)
        if args.spark_conf:
            env["PYSPARK_SUBMIT_ARGS"] = " ".join(f"--conf {c}" for c in args.spark_conf) + " pyspark-shell"
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True, env=env)
        watcher = Watcher(proc.pid, checkpoint)
        watcher.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            rc = proc.wait(timeout=120) or -9
        watcher.stop()
    wall = time.time() - started
    load_after = load()
    if rc != 0:
        print(f"stream exited {rc}; see {log_path} (the series below is what it did before)", flush=True)

    batches = [l for l in json_lines(log_path) if l.get("event") == "batch committed" and not l.get("warmup")]
    series = []
    previous_end = started
    for b in batches:
        end = parse_iso(b["timestamp"])
        window = [s for ts, s in watcher.samples if previous_end <= ts <= end + 0.5]
        version = watcher.versions.get(b["batch_id"], {})
        series.append(
            {
                "batch_id": b["batch_id"],
                "lines": b["input_lines"],
                "seconds": b["seconds"],
                "watermark": b["watermark"][:16],
                "open_sessions": b["open_sessions"],
                "state_bytes": version.get("bytes"),
                "heap_used": version.get("heap_used"),
                "heap_committed": version.get("heap_committed"),
                "old_used": version.get("old_used"),
                "rss_total": max((s["total"] for s in window), default=0),
                "rss_jvm": max((s["jvm"] for s in window), default=0),
                "rss_py": max((s["python"] for s in window), default=0),
            }
        )
        previous_end = end
    if not series:
        raise SystemExit(f"no batch committed; see {log_path}")

    # The series, thinned to ~20 rows (always the first and last batches).
    step = max(1, len(series) // 20)
    shown = [s for i, s in enumerate(series) if i % step == 0 or i == len(series) - 1]
    columns = [
        "batch",
        "event time (watermark)",
        "input lines",
        "batch s",
        "open sessions",
        "state KB",
        "peak PSS MB (JVM+Py)",
        "JVM heap used / committed MB",
    ]
    rows = [
        [
            s["batch_id"],
            s["watermark"],
            s["lines"],
            s["seconds"],
            s["open_sessions"],
            "-" if s["state_bytes"] is None else round(s["state_bytes"] / 1024),
            f"{mb(s['rss_total'])} ({mb(s['rss_jvm'])}+{mb(s['rss_py'])})",
            "-" if s["heap_used"] is None else f"{mb(s['heap_used'])} / {mb(s['heap_committed'])}",
        ]
        for s in shown
    ]
    print_wide(f"Stream memory and state over {scale['days']} days of event time ({args.scale})", columns, rows)

    # Flatness: medians of the first and last quarters (skipping the first 3 warm-up batches).
    steady = series[3:] if len(series) > 8 else series

    def first_last(key):
        values = [s[key] for s in steady if s[key] is not None]
        return quarter_median(values, "first"), quarter_median(values, "last")

    state_first, state_last = first_last("state_bytes")
    sess_first, sess_last = first_last("open_sessions")
    rss_first, rss_last = first_last("rss_total")
    sec_first, sec_last = first_last("seconds")
    old_first, old_last = first_last("old_used")
    committed_first, committed_last = first_last("heap_committed")
    peak = max(s["rss_total"] for s in series)
    peak_state = max((s["state_bytes"] or 0) for s in series)
    max_sessions = max(s["open_sessions"] for s in series)
    state_flat = state_last <= 1.25 * max(state_first, 1)
    heap_flat = old_last <= 1.25 * max(old_first, 1)
    rss_flat = rss_last <= 1.25 * max(rss_first, 1)
    summary_lines = [
        f"- batches: {len(series)} ({fpt} file(s) per trigger), input lines: {sum(s['lines'] for s in series)}, "
        f"wall {wall:.0f} s, stream exit code {rc}; load average before -> after: {load_before} -> {load_after}",
        f"- open sessions: median first quarter {sess_first:.0f}, last quarter {sess_last:.0f}, max {max_sessions}",
        f"- state bytes: median first quarter {state_first / 1024:.0f} KB, last quarter {state_last / 1024:.0f} KB, "
        f"max {peak_state / 1024:.0f} KB (~{(peak_state / max(1, max_sessions)):.0f} bytes per open session at the max)",
        f"- peak memory (PSS) of the process tree per batch: median first quarter {mb(rss_first)} MB, last quarter "
        f"{mb(rss_last)} MB, overall peak {mb(peak)} MB (JVM heap capped by spark.driver.memory 2g)",
        f"- batch seconds: median first quarter {sec_first:.2f}, last quarter {sec_last:.2f}",
        f"- JVM heap (jstat, when each state version appeared): old generation used, median first quarter "
        f"{mb(old_first)} MB, last quarter {mb(old_last)} MB; heap committed {mb(committed_first)} -> {mb(committed_last)} MB",
        f"- flat (last quarter <= 1.25x first quarter): state bytes {'YES' if state_flat else 'NO'}, JVM old generation "
        f"used {'YES' if heap_flat else 'NO'}, process PSS {'YES' if rss_flat else 'NO'}",
    ]
    print("\n".join(summary_lines))
    full_table = bench.markdown_table(
        [
            "batch",
            "watermark",
            "lines",
            "seconds",
            "open sessions",
            "state bytes",
            "PSS total",
            "PSS JVM",
            "PSS Python",
            "heap used",
            "heap committed",
            "old gen used",
        ],
        [
            [
                s[key]
                for key in (
                    "batch_id",
                    "watermark",
                    "lines",
                    "seconds",
                    "open_sessions",
                    "state_bytes",
                    "rss_total",
                    "rss_jvm",
                    "rss_py",
                    "heap_used",
                    "heap_committed",
                    "old_used",
                )
            ]
            for s in series
        ],
    )
    notes = "\n".join(
        [
            "One `tidemark stream --available-now` process over a landing spanning many days of event time, "
            "a few files per micro-batch. Resident memory is sampled every 0.25 s over the whole process tree (the "
            "driver JVM, the Python driver and PySpark's Python workers) as PSS (RSS with shared pages "
            "split between the processes sharing them, so forked Python workers are not counted twice); "
            "each row shows the peak seen during that batch. State is "
            "`<checkpoint>/state/batch_id=N` (bytes on disk, Parquet) and its marker's session count. The "
            f"table shows every ~{step}th batch; the full series is at the end.",
            "",
            *summary_lines,
            "",
            "<details><summary>Every batch</summary>",
            "",
            *full_table,
            "",
            "</details>",
            "",
        ]
    )
    if not args.no_write:
        path = bench.write_results(
            NAME,
            f"Stream memory and state over {scale['days']} days ({args.scale})",
            columns,
            rows,
            notes,
            {
                "scale": args.scale,
                **{k: scale[k] for k in ("events", "users", "days", "files")},
                "files per trigger": fpt,
                "input lines": summary["deliveries"],
                "master": args.master,
                "extra Spark conf": ", ".join(args.spark_conf) or "none",
                "session rules": "gap 30m, allowed lateness 1h, watermark delay 10m (defaults)",
                "workload": "tidemark.demo.generate.Workload(seed=23)",
            },
            env,
        )
        print(f"wrote {path}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
