"""The `tidemark` command line itself: exit statuses, where errors go, what --help shows.

Run as the real command (`python -m tidemark.cli` in a subprocess) where the process boundary
matters (exit status, stderr), in process otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from tidemark.base.layout import as_event_date
from tidemark.base.logs import read_log_lines
from tidemark.cli import build_parser, main
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = "2026-03-06"
RECEIPT = "20260307T101500000Z"


def tidemark(*argv: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def corrupt_receipt_marker(lake: Lake) -> str:
    folder = lake.receipt_dir(as_event_date(DAY), RECEIPT).uri  # a local lake: the uri is its path
    os.makedirs(folder)
    path = os.path.join(folder, lake_layout.RECEIPT_MARKER)
    with open(path, "w") as handle:
        handle.write('{"event_date": "2026-03-06", "receipt_ts": ')  # cut short by a crash or a bad copy
    return path


def test_a_corrupt_marker_is_a_failure_with_its_cause_logged_not_a_usage_error(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    corrupt_receipt_marker(lake)
    done = tidemark("history", "--lake", str(lake), "--event-date", DAY, "--home", str(tmp_path / "no-stack"))
    assert done.returncode == 1, done.stderr
    assert "usage:" not in done.stderr
    logged = read_log_lines(done.stderr)
    [failure] = [entry for entry in logged if entry.get("event") == "command failed"]
    assert failure["level"] == "error"
    assert failure["command"] == "history"
    assert failure["error"].startswith("JSONDecodeError")
    assert "Traceback" in failure["exception"]  # where it came from, for whoever debugs it
    assert "tidemark history: failed: JSONDecodeError" in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["read", "--lake", "x", "--event-date", "2026-02-30"], "argument --event-date"),
        (["gc", "--lake", "x", "--retention", "a week"], "invalid duration"),
        (["gc", "--lake", "x", "--retention", "5m"], "refusing a retention of 5m"),
        (["generate", "--landing", "x", "--events", "0"], "argument --events: 0 is out of range"),
        (["notices", "--lake", "x", "--close-waiting"], "--close-waiting needs --send"),
        (["stream", "--landing", "l", "--lake", "k", "--checkpoint", "c", "--gap", "0s"], "gap"),
        (["rules", "migrate", "--lake", "x", "--gap", "soon"], "invalid duration"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_usage_errors_are_argparses_exit_2_with_the_usage_line_on_stderr(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: tidemark"), err
    assert message in err
    assert not os.listdir(tmp_path)  # refused before anything was written


def test_a_usage_error_from_the_real_command(tmp_path):
    done = tidemark("gc", "--lake", str(tmp_path), "--retention", "5m")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: tidemark gc")
    assert "refusing a retention of 5m" in done.stderr


def test_a_usage_error_names_the_innermost_command(tmp_path, capsys):
    assert main(["rules", "migrate", "--lake", str(tmp_path), "--gap", "0s"]) == 2
    assert "usage: tidemark rules migrate" in capsys.readouterr().err


def test_help_shows_defaults_and_keeps_the_description_layout(capsys):
    assert main(["generate", "--help"]) == 0
    text = capsys.readouterr().out
    assert "(default: 20000)" in text
    assert "(default: 2026-03-06)" in text
    assert "(default: None)" not in text
    assert main(["rules", "--help"]) == 0
    text = capsys.readouterr().out
    # The description's two-column layout is kept as written, not refilled.
    assert "\n  tidemark rules show --lake DIR      the lake's rules" in text


def _parsers(parser: argparse.ArgumentParser, name: str = "tidemark"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_option_has_help_text():
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not (action.help or "").strip()
    ]
    assert not missing, missing


def test_every_command_has_help():
    for name, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert text.startswith("usage: "), name


def test_status_without_a_stack_says_so_on_stderr(tmp_path):
    done = tidemark("status", "--home", str(tmp_path / "none"))
    assert done.returncode == 3
    assert done.stdout == ""
    assert "no stack in" in done.stderr
    assert "tidemark up" in done.stderr


def test_version_and_help_exit_0():
    done = tidemark("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("tidemark ")
    assert main(["--help"]) == 0
