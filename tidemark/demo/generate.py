"""A realistic, seeded sample landing of mobile viewing events.

Events arrive the way phones deliver them: most seconds after they happen, some minutes late (a
flaky network), a few sessions hours or days late (offline on a flight, delivered on landing),
a few percent delivered twice, and a few malformed lines. Files are written in arrival order, the
way a Pub/Sub Cloud Storage subscription batches messages into objects, each atomically (hidden
temp name, then rename) with strictly increasing modification times, so a file source that
orders by modification time (Spark's does) sees them in arrival order.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from rich.progress import Progress

from tidemark.base.layout import event_date_text
from tidemark.store.locations import Root

EVENT_FLOW = ["app_open", "browse", "play", "pause", "play", "seek", "ad_impression", "play", "stop"]
OFFSETS = [
    timezone.utc,
    timezone(timedelta(hours=2)),
    timezone(timedelta(hours=-5)),
    timezone(timedelta(hours=5, minutes=30)),
]
MANIFEST = "_tidemark_generate.json"


@dataclass(frozen=True)
class Workload:
    """What `generate` writes: how many events, users, days and files, and how messy they are."""

    events: int = 20_000
    users: int = 200
    start: date = date(2026, 3, 6)  # the first event date
    days: int = 2
    files: int = 40
    seed: int = 7
    duplicate_rate: float = 0.03
    malformed_rate: float = 0.002
    minutes_late_rate: float = 0.10
    offline_session_rate: float = 0.02
    gap_minutes: float = 30.0


@dataclass
class Delivery:
    """One line of a landed file and the time it arrives."""

    arrival: datetime
    line: str


def _rfc3339(moment: datetime, rng: random.Random) -> str:
    local = moment.astimezone(rng.choice(OFFSETS))
    text = local.isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z") if rng.random() < 0.5 else text


def _malformed(rng: random.Random, n: int) -> str:
    kind = n % 5
    if kind == 0:
        return '{"event_id": "broken-%d", "user_id": "u' % n  # noqa: UP031 (truncated JSON; braces in an f-string would need doubling)
    if kind == 1:
        return json.dumps({"event_id": f"noid-{n}", "event_type": "play", "event_ts": "2026-03-06T10:00:00Z"})
    if kind == 2:
        return json.dumps(
            {"event_id": f"badts-{n}", "user_id": "u1", "event_type": "play", "event_ts": "yesterday at noon"}
        )
    if kind == 3:
        return "<html>502 Bad Gateway</html>"
    return json.dumps(["not", "an", "object", n])


def build(workload: Workload) -> tuple[list[Delivery], dict[str, Any]]:
    """All deliveries in arrival order, and counts describing them."""
    rng = random.Random(workload.seed)
    day0 = datetime.combine(workload.start, datetime.min.time(), tzinfo=timezone.utc)
    span_s = workload.days * 86400
    gap_s = workload.gap_minutes * 60
    deliveries: list[Delivery] = []
    per_user = max(1, workload.events // max(1, workload.users))
    counts = {
        "events": 0,
        "duplicates": 0,
        "malformed": 0,
        "minutes_late": 0,
        "offline_sessions": 0,
        "sessions_generated": 0,
    }
    for u in range(workload.users):
        user_id = f"user-{u:05d}"
        remaining = per_user
        seq = 0
        starts = sorted(rng.uniform(0, span_s) for _ in range(max(1, per_user // 12)))
        for s_index, start_s in enumerate(starts):
            if remaining <= 0:
                break
            n = min(remaining, rng.randint(3, 24) if s_index < len(starts) - 1 else remaining)
            remaining -= n
            counts["sessions_generated"] += 1
            offline = rng.random() < workload.offline_session_rate
            offline_delay = timedelta(seconds=rng.uniform(2 * 3600, 3 * 86400)) if offline else None
            counts["offline_sessions"] += int(offline)
            t = day0 + timedelta(seconds=start_s)
            for i in range(n):
                if i:
                    # Within a session, events come seconds to minutes apart, always under the gap.
                    t += timedelta(seconds=min(rng.expovariate(1 / 45), gap_s * 0.6))
                seq += 1
                event = {
                    "event_id": f"{user_id}-{seq:06d}",
                    "user_id": user_id,
                    "event_type": EVENT_FLOW[min(i, len(EVENT_FLOW) - 1)] if i < n - 1 else "app_close",
                    "event_ts": _rfc3339(t, rng),
                    "device": rng.choice(["ios", "android"]),
                    "content_id": f"c{rng.randint(1, 500)}",
                }
                if offline_delay is not None:
                    delay = offline_delay + timedelta(seconds=rng.uniform(0, 60))
                elif rng.random() < workload.minutes_late_rate:
                    delay = timedelta(minutes=rng.uniform(1, 20))
                    counts["minutes_late"] += 1
                else:
                    delay = timedelta(seconds=rng.expovariate(1 / 3))
                line = json.dumps(event, separators=(",", ":"))
                deliveries.append(Delivery(t + delay, line))
                counts["events"] += 1
                if rng.random() < workload.duplicate_rate:
                    deliveries.append(Delivery(t + delay + timedelta(seconds=rng.expovariate(1 / 90)), line))
                    counts["duplicates"] += 1
    n_bad = int(round(counts["events"] * workload.malformed_rate))
    if workload.malformed_rate > 0:
        n_bad = max(1, n_bad)
    for b in range(n_bad):
        deliveries.append(Delivery(day0 + timedelta(seconds=rng.uniform(0, span_s)), _malformed(rng, b)))
    counts["malformed"] = n_bad
    deliveries.sort(key=lambda d: (d.arrival, d.line))
    counts["deliveries"] = len(deliveries)
    return deliveries, counts


def split_files(deliveries: list[Delivery], files: int) -> list[list[Delivery]]:
    """Equal-count chunks in arrival order: one landed object each."""
    files = max(1, min(files, len(deliveries)))
    size, extra = divmod(len(deliveries), files)
    chunks, at = [], 0
    for i in range(files):
        take = size + (1 if i < extra else 0)
        chunks.append(deliveries[at : at + take])
        at += take
    return chunks


def file_name(index: int, arrival: datetime) -> str:
    """A landed file's name: its last line's arrival and its index (names sort in arrival order)."""
    return f"events-{arrival.strftime('%Y%m%dT%H%M%S')}-{index:06d}.jsonl"


def write_file(landing: str, index: int, chunk: list[Delivery], mtime: float | None = None) -> str:
    """Land one object atomically; `mtime` orders it among the others for the file source."""
    os.makedirs(landing, exist_ok=True)
    name = file_name(index, chunk[-1].arrival)
    final = os.path.join(landing, name)
    tmp = os.path.join(landing, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("\n".join(d.line for d in chunk) + "\n")
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, final)
    return final


def generate(landing: str, workload: Workload, progress: bool = True) -> dict[str, Any]:
    """Land the workload's files in `landing`, in arrival order; counts describing them."""
    deliveries, counts = build(workload)
    chunks = split_files(deliveries, workload.files)
    base = time.time()
    if progress and len(chunks) > 1:
        with Progress(transient=True) as bar:
            task = bar.add_task("landing files", total=len(chunks))
            for i, chunk in enumerate(chunks):
                write_file(landing, i, chunk, base + i / 1000)
                bar.advance(task)
    else:
        for i, chunk in enumerate(chunks):
            write_file(landing, i, chunk, base + i / 1000)
    described = {**asdict(workload), "start": event_date_text(workload.start)}  # JSON: the date as YYYY-MM-DD
    summary = {"workload": described, "files": len(chunks), **counts}
    Root(landing).file(MANIFEST).write_json_atomic(summary)
    return summary


def land_late_events(landing: str, day: date) -> None:
    """Land a late correction's file: five users' events on `day`, delivered days late, one of them twice.

    The late receipt the benchmarks (bench.correction_cost, bench.dedup_task) and the Connect server's
    warm-up (tidemark/demo/correction_warmup.py) correct: the same small shape as a real late file.
    """
    lines = []
    noon = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=12)
    for u in range(5):
        for k in range(3):
            ts = (noon + timedelta(minutes=7 * u + 3 * k)).isoformat().replace("+00:00", "Z")
            lines.append(
                json.dumps(
                    {"event_id": f"late-{u}-{k}", "user_id": f"user-{u:05d}", "event_type": "play", "event_ts": ts}
                )
            )
    lines.append(lines[0])
    write_file(landing, 10_000, [Delivery(noon, line) for line in lines])
