"""The demo report's metric charts, from what the local Prometheus recorded (range queries).

    lag.png          the stream's landing -> committed lag per micro-batch (mean over 1 min windows)
    staleness.png    per event date, how long its current version has been stale

    paths = prometheus_charts(folder, prometheus_url, start, end)   # [] when Prometheus has nothing

Both come from the same series the SLO alerts watch (ops/prometheus/rules.yml), so the pictures
show what on call would have been told.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

import requests

from tidemark.demo.charts import pyplot

LAG = "sum(rate(tidemark_stream_batch_lag_seconds_sum[1m])) / sum(rate(tidemark_stream_batch_lag_seconds_count[1m]))"
STALENESS = "tidemark_event_date_staleness_seconds"


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    """A Prometheus range query's result: one {"metric": labels, "values": [[time, text]]} per series."""
    params: dict[str, str | float] = {"query": expr, "start": start, "end": end, "step": step}
    response = requests.get(f"{url}/api/v1/query_range", timeout=30, params=params)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _series(result: list[dict[str, Any]], label: str | None) -> dict[str, list[tuple[datetime, float]]]:
    out = {}
    for item in result:
        name = item["metric"].get(label, "") if label else "lag"
        points = [
            (datetime.fromtimestamp(float(t), timezone.utc), float(v))
            for t, v in item["values"]
            if v not in ("NaN", "+Inf", "-Inf")
        ]
        if points:
            out[name] = points
    return out


def _chart(path: str, series: dict[str, Any], title: str, ylabel: str, objective_s: float | None) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for name, points in sorted(series.items()):
        ax.plot([p[0] for p in points], [p[1] / 60 for p in points], label=name or None, linewidth=1.5)
    if objective_s:
        ax.axhline(objective_s / 60, color="#c44e52", linestyle="--", linewidth=1, label="objective")
    ax.set_ylabel(ylabel)
    ax.set_xlabel("time (UTC)")
    ax.set_title(title)
    if len(series) <= 12:
        ax.legend(fontsize=7, loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def prometheus_charts(folder: str, url: str, start: float, end: float, step: float | None = None) -> list[str]:
    """Chart lag.png and staleness.png under `folder` from Prometheus at `url` between two Unix times.

    A chart whose series Prometheus does not have is left out.
    """
    step = step or max(1.0, (end - start) / 300)
    objectives = {
        item["metric"].get("tidemark_slo"): float(item["value"][1])
        for item in requests.get(
            f"{url}/api/v1/query", params={"query": "tidemark_slo_objective_seconds"}, timeout=30
        ).json()["data"]["result"]
    }
    out = []
    lag = _series(query_range(url, LAG, start, end, step), None)
    if lag:
        out.append(
            _chart(
                os.path.join(folder, "lag.png"),
                lag,
                "The stream's lag, landing -> batch committed",
                "minutes",
                objectives.get("stream_lag"),
            )
        )
    stale = _series(query_range(url, STALENESS, start, end, step), "tidemark_event_date")
    if stale:
        out.append(
            _chart(
                os.path.join(folder, "staleness.png"),
                stale,
                "Per event date: how long its current version has been stale",
                "minutes",
                objectives.get("correction"),
            )
        )
    return out
