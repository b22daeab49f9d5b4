"""The stream's warm-up: two micro-batches of the stream's own code on scratch folders, nothing left behind."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime

import pytest

from streaming_job import warmup
from streaming_job.job import StreamConfig, source
from tidemark.base.session_rules import SessionRules
from tidemark.ingest import contract
from tidemark.ingest.contract import InputRules


def _lines(captured: str) -> list[dict]:
    found = []
    for line in captured.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def test_warmup_lines_are_events_the_contract_takes_but_one_refused_line_per_file():
    files = warmup.warmup_lines(datetime.now(UTC), SessionRules())
    assert len(files) == 2
    now_us = int(datetime.now(UTC).timestamp() * 1_000_000)
    for lines in files:
        reasons = [contract.check_line(line.encode(), now_us)[1] for line in lines]
        assert len([r for r in reasons if r is not None]) == 1, reasons


def test_warmup_is_on_for_a_local_master_unless_turned_off(spark, monkeypatch):
    monkeypatch.setenv(warmup.WARMUP_ENV, "1")
    assert warmup.enabled(spark)
    monkeypatch.setenv(warmup.WARMUP_ENV, "0")
    assert not warmup.enabled(spark)


@pytest.mark.spark
def test_warmup_runs_two_batches_of_the_stream_and_leaves_nothing(spark, capsys, monkeypatch):
    scratch_root = tempfile.mkdtemp(prefix="warmup-test-")
    monkeypatch.setattr(tempfile, "tempdir", scratch_root)  # where the warm-up makes its scratch folders

    def read_landing(folder):
        return source(
            spark, StreamConfig(landing=folder, lake=scratch_root, checkpoint=scratch_root, max_files_per_trigger=1)
        )

    seconds = warmup.warm_up(spark, SessionRules(), InputRules(), read_landing)
    logs = _lines(capsys.readouterr().err)
    assert seconds > 0
    assert not [line for line in logs if "failed" in line["event"] or line.get("level") == "error"], logs
    committed = [line for line in logs if line["event"] == "batch committed"]
    assert [line["warmup"] for line in committed] == [True, True]  # every line of it says so
    assert [(line["input_lines"], line["valid_events"], line["quarantined"]) for line in committed] == [
        (7, 6, 1),
        (8, 7, 1),
    ]
    assert committed[1]["open_sessions"] >= 2  # the second batch merged into the first's state
    assert os.listdir(scratch_root) == []  # its landing, lake and checkpoint are gone
    assert not any(query.name == "tidemark_warmup" for query in spark.streams.active)
