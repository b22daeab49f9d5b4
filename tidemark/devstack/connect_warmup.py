"""What `tidemark up` needs to warm the Connect server it starts: the switch, the folder, the command line.

The warm-up itself (late corrections of a tiny scratch lake, run as the DAG's task runs them; why,
and how it is bounded) is tidemark/demo/correction_warmup.py, run as a process of its own: it
generates traffic and runs the stream's code, which the stack's modules do not import.
"""

from __future__ import annotations

import os
import sys

from tidemark.base import switches
from tidemark.base.logs import read_log_lines
from tidemark.devstack import process

WARMUP_ENV = "TIDEMARK_CONNECT_WARMUP"  # "0": `up` starts the Connect server without a warm-up
NAME = "spark-connect-warmup"  # its process record and log, beside the server's
ENDED_EVENT = "connect warm-up ended"  # its last log line, with what it did (tidemark.demo.correction_warmup.warm_up)


def enabled() -> bool:
    """Whether `up` warms the Connect server it starts: unless TIDEMARK_CONNECT_WARMUP=0."""
    return switches.switched_on(WARMUP_ENV)


def scratch_folder(server_home: str) -> str:
    """The warm-up's folder beside the Connect server's own files (the stack's <home>/spark-connect/warmup)."""
    return os.path.join(server_home, "warmup")


def argv(folder: str, url: str, timeout: float | None = None, corrections: int | None = None) -> list[str]:
    """The warm-up's command line: its scratch `folder`, the server's `url` (its own defaults for the rest)."""
    command = [sys.executable, "-m", "tidemark.demo.correction_warmup", "--folder", os.path.abspath(folder)]
    command += ["--url", url]
    if timeout is not None:
        command += ["--timeout", str(timeout)]
    if corrections is not None:
        command += ["--corrections", str(corrections)]
    return command


def outcome(log_path: str) -> str | None:
    """How the warm-up ended, from its log's last line (`tidemark status`); None before it has ended."""
    for entry in reversed(read_log_lines(process.tail(log_path, 50))):
        if entry.get("event") != ENDED_EVENT:
            continue
        if entry.get("error"):
            return f"failed after {entry.get('seconds', 0):.0f} s ({entry['error']}): the Connect server runs cold"
        corrections = entry.get("corrections_s") or []
        last = f", the last {corrections[-1]} s" if corrections else ""
        return (
            f"the Connect server warmed in {entry.get('seconds', 0):.0f} s: "
            f"{1 + len(corrections)} corrections, the first {entry.get('first_s')} s{last}"
        )
    return None


def start(server_home: str, url: str, log_path: str) -> process.Managed:
    """Start the warm-up of the server at `url` (its files under `server_home`) in the background; its process."""
    return process.start(NAME, argv(scratch_folder(server_home), url), log_path)
