"""The demo's pictures (matplotlib, Agg backend: no display needed) and an HTML page around them.

lateness.png      how late events arrived (arrival - event time), log scale, with the stream's
                  watermark delay and allowed lateness marked
corrections.png   per event date: the sessions of each published version over time, the
                  receipt partitions that fed it (late ones in red) and when each wave landed
steps.png         median and max seconds of each pipeline step
"""

from __future__ import annotations

import html
import json
import math
import os
from datetime import datetime
from types import ModuleType
from typing import Any

from tidemark.base.session_rules import SessionRules
from tidemark.demo.waves import Wave
from tidemark.ops import inspect


def pyplot() -> ModuleType:
    """The pyplot module of matplotlib, on the Agg backend (files, no display).

    Imported here (lazy), not at the top: the backend must be chosen before pyplot is imported, and the
    report's other modules (and tests of them) need no matplotlib.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def lateness_chart(path: str, lateness_s: list[float], rules: SessionRules) -> str:
    """A histogram of how late events arrived, with the rules' bounds marked; the chart's path."""
    plt = pyplot()
    values = [max(v, 0.1) for v in lateness_s if v is not None]
    fig, ax = plt.subplots(figsize=(9, 4))
    bins = [10 ** (x / 4) for x in range(-4, 25)]  # 0.1 s .. 10^6 s (11 days)
    ax.hist(values, bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for seconds, label, color in (
        (rules.watermark_delay.total_seconds(), "watermark delay", "#dd8452"),
        ((rules.watermark_delay + rules.allowed_lateness).total_seconds(), "+ allowed lateness", "#c44e52"),
        (86400, "1 day", "#555555"),
    ):
        ax.axvline(seconds, color=color, linestyle="--", linewidth=1)
        ax.text(seconds * 1.1, ax.get_ylim()[1] * 0.5, label, color=color, rotation=90, va="top", fontsize=8)
    ax.set_xlabel("lateness: arrival time - event time (seconds, log scale)")
    ax.set_ylabel("events (log scale)")
    ax.set_title(f"How late {len(values)} events arrived")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def corrections_chart(path: str, data: dict[str, Any], waves: list[Wave]) -> str:
    """Per event date, its versions' session counts over the demo's time (waves marked); the path."""
    plt = pyplot()
    dates = list(data["versions"])
    fig, axes = plt.subplots(len(dates) or 1, 1, figsize=(9, 2.8 * max(1, len(dates))), squeeze=False)
    t0 = min((w.landed_at for w in waves if w.landed_at), default=None)

    def x(moment: datetime | None) -> float | None:
        return None if moment is None or t0 is None else (moment - t0).total_seconds()

    for ax, event_date in zip(axes[:, 0], dates, strict=False):
        versions = data["versions"][event_date]
        points = [(x(inspect.parse_time(v["created_at"])), v["sessions"]) for v in versions]
        xs = [at for at, _ in points if at is not None]
        ys = [sessions for at, sessions in points if at is not None]
        if xs:
            ax.step(
                xs + [max(xs[-1], _end(data, t0))],
                ys + ys[-1:],
                where="post",
                color="#55a868",
                linewidth=2,
                label="sessions in the current version",
            )
            ax.scatter(xs, ys, color="#55a868", zorder=3)
            for n, (xv, v) in enumerate(zip(xs, versions, strict=False)):
                note = f"v{n + 1}: {v['sessions']}"
                if n:
                    note += f" (+{v['added']} new, {v.get('changed', 0)} grew, -{v['removed']})"
                last = n == len(versions) - 1 and n > 0  # keep the newest label inside the axes
                ax.annotate(
                    note,
                    (xv, v["sessions"]),
                    fontsize=7,
                    xytext=(-4 if last else 4, 6 if last else -12),
                    textcoords="offset points",
                    ha="right" if last else "left",
                )
            ax.set_ylim(0, max(ys) * 1.3)
        ax2 = ax.twinx()
        rows = [r for r in data["receipts"] if r["event_date"] == event_date]
        span = max([_end(data, t0), *(xv for xv in xs if xv is not None)], default=60.0)
        for late in (False, True):
            pts = [(x(inspect.parse_time(r["receipt_ts"])), r["events"]) for r in rows if r["late"] == late]
            if pts:
                ax2.bar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    width=max(2.5, span / 70),
                    alpha=0.5,
                    color="#c44e52" if late else "#8172b2",
                    label="late receipt partition (events)" if late else "receipt partition (events)",
                )
        for wave in waves:
            if wave.landed_at is not None:
                ax.axvline(x(wave.landed_at), color="#999999", linestyle=":", linewidth=1)
                ax.text(x(wave.landed_at), 0, f" wave {wave.index + 1}", fontsize=7, color="#777777", va="bottom")
        ax.set_title(f"event_date={event_date}: corrections over receipt time", fontsize=10)
        ax.set_ylabel("sessions")
        ax2.set_ylabel("events received")
        handles = ax.get_legend_handles_labels()
        handles2 = ax2.get_legend_handles_labels()
        ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds since the first wave landed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _end(data: dict[str, Any], t0: datetime | None) -> float:
    if t0 is None:
        return 0.0
    parsed = [inspect.parse_time(r["times"]["version_created_at"]) for r in data["receipts"]]
    return max(((m - t0).total_seconds() for m in parsed if m is not None), default=0.0)


def steps_chart(path: str, steps: list[dict[str, Any]]) -> str:
    """The median and slowest time of each pipeline step, as bars; the chart's path."""
    plt = pyplot()
    shown = [s for s in steps if s["median_s"] is not None]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(shown) + 1.2))
    names = [s["step"] for s in shown][::-1]
    ax.barh(names, [s["max_s"] for s in shown][::-1], color="#dddddd", label="max")
    ax.barh(names, [s["median_s"] for s in shown][::-1], color="#4c72b0", label="median")
    ax.set_xlabel("seconds")
    ax.set_title("How long each step took, per receipt partition")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_html(folder: str, data: dict[str, Any], charts: list[str]) -> str:
    """report.html: the charts and the report's tables (data also in report.json)."""

    def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
        )
        return f"<table><tr>{head}</tr>{body}</table>"

    verdict = "equal to the batch recomputation" if data["ok"] else "DIFFERENT from the batch recomputation"
    versions = [{"event_date": d, **v} for d, vs in data["versions"].items() for v in vs]
    parts = [
        "<!doctype html><meta charset='utf-8'><title>tidemark demo</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse;"
        "font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}</style>",
        f"<h1>tidemark demo</h1><p>Final partitions: <b>{verdict}</b>.</p>",
        *(f"<img src='{os.path.basename(c)}' style='max-width:100%'>" for c in charts),
        "<h2>Waves landed</h2>",
        table(data["waves"], list(data["waves"][0]) if data["waves"] else []),
        "<h2>Versions and corrections</h2>",
        table(
            versions,
            [
                "event_date",
                "version",
                "created_at",
                "sessions",
                "receipts",
                "new_receipts",
                "added",
                "changed",
                "removed",
            ],
        ),
        "<h2>Step timings</h2>",
        table(data["steps"], ["step", "count", "median_s", "max_s"]),
        "<h2>Check against the batch recomputation</h2>",
        table(data["checks"], ["event_date", "version", "expected", "published", "missing", "unexpected", "ok"]),
    ]
    path = os.path.join(folder, "report.html")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(parts))
    return path


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)
