"""The Beam comparison for bench.stream_throughput: the same session windows with Apache Beam's
Python DirectRunner, run in its own venv (apache-beam's pins clash with Airflow's):

    python3.11 -m venv .venv-beam && .venv-beam/bin/pip install apache-beam
    .venv-beam/bin/python bench/beam_sessions.py --input '/tmp/landing/*.jsonl' --output /tmp/beam-out

What it does, as close as Beam allows to tidemark's stream: parse each JSON line (malformed lines
and lines without the required fields are dropped, not quarantined), timestamp each event by its
event_ts, deduplicate (user_id, event_id), Sessions(30 min) per user with the default trigger,
and write one JSON line per session (with its event_date) to text files. Batch (bounded) mode:
the DirectRunner has no file-watching streaming source, so this is its best case.

Prints one JSON line {"beam": {"job_seconds", "sessions", ...}} for the runner.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REQUIRED = ("event_id", "user_id", "event_type", "event_ts")


def parse(line: str):
    try:
        obj = json.loads(line)
    except ValueError:
        return
    if not isinstance(obj, dict) or any(not obj.get(k) for k in REQUIRED):
        return
    try:
        ts = datetime.fromisoformat(str(obj["event_ts"]).replace("Z", "+00:00"))
    except ValueError:
        return
    if ts.tzinfo is None:
        return
    yield obj["user_id"], obj["event_id"], ts.timestamp(), obj


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--gap-seconds", type=int, default=1800)
    args = p.parse_args(argv)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms import window

    def session_row(kv, win=beam.DoFn.WindowParam):
        user_id, events = kv
        events = sorted(events, key=lambda e: (e[0], e[1]))
        start = datetime.fromtimestamp(float(win.start), timezone.utc)
        return json.dumps(
            {
                "user_id": user_id,
                "session_start": start.isoformat(),
                "session_end": datetime.fromtimestamp(float(win.end), timezone.utc).isoformat(),
                "event_count": len(events),
                "event_ids": [e[1] for e in events],
                "event_date": start.date().isoformat(),
            }
        )

    options = PipelineOptions(["--runner=DirectRunner", "--direct_num_workers=1"])
    started = time.perf_counter()
    with beam.Pipeline(options=options) as pipeline:
        sessions = (
            pipeline
            | "read" >> beam.io.ReadFromText(args.input)
            | "parse" >> beam.FlatMap(parse)
            | "dedup key" >> beam.Map(lambda r: ((r[0], r[1]), r))
            | "dedup"
            >> beam.CombinePerKey(lambda rows: min(rows, key=lambda r: (r[2], json.dumps(r[3], sort_keys=True))))
            | "event time" >> beam.Map(lambda kv: window.TimestampedValue((kv[1][0], (kv[1][2], kv[1][1])), kv[1][2]))
            | "sessions" >> beam.WindowInto(window.Sessions(args.gap_seconds))
            | "group" >> beam.GroupByKey()
            | "row" >> beam.Map(session_row)
        )
        _ = sessions | "write" >> beam.io.WriteToText(args.output + "/sessions", file_name_suffix=".jsonl")
    seconds = time.perf_counter() - started
    import glob

    count = sum(1 for path in glob.glob(args.output + "/sessions*") for _ in Path(path).read_text().splitlines())
    print(
        json.dumps(
            {
                "beam": {
                    "job_seconds": round(seconds, 2),
                    "sessions": count,
                    "batches": "-",
                    "beam_version": beam.__version__,
                }
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
