"""Non-default session rules end to end, with the real stream and the real dedup: a stream run with a
20-minute gap, then the dedup with no rule options (in process, and through the spark-submit
application the DAG runs), publishes 20-minute sessions; a deliberate change (`tidemark rules
migrate`, `tidemark stream --migrate-rules`) re-deduplicates every date under the new rules; a
running stream stops when the lake's rules change under it. Compared with tests/reference.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import date, timedelta

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.helpers import airflow_on_connect, lake_session_set, reference_session_set
from tests.streamkit import event, land
from tidemark import cli
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import rules_migration
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader, table_versions
from tidemark.session import rules_record
from tidemark.store.lake import Lake

# slow (not in make test-fast): the module streams a lake, then migrations re-deduplicate every date
pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBMIT = os.path.join(ROOT, "streaming_job", "submit.py")
D1, D2 = date(2026, 3, 7), date(2026, 3, 8)
GAP20, GAP30, GAP45 = timedelta(minutes=20), timedelta(minutes=30), timedelta(minutes=45)
RULES20 = SessionRules(gap=GAP20)

# Neighbours 25 minutes apart (one session at 30m, two at 20m) and 40 minutes apart (one session
# only at 45m), on two dates; z moves the watermark past all of it.
FIRST_WAVE = [
    [
        event("u", "u1", f"{D1}T10:00:00Z"),
        event("u", "u2", f"{D1}T10:25:00Z"),
        event("u", "u3", f"{D1}T10:40:00Z"),
        event("v", "v1", f"{D1}T12:00:00Z"),
        event("v", "v2", f"{D1}T12:40:00Z"),
    ],
    [
        event("w", "w1", f"{D2}T09:00:00Z"),
        event("w", "w2", f"{D2}T09:40:00Z"),
        event("w", "w2", f"{D2}T09:40:00Z"),
        event("w", "w3", f"{D2}T11:00:00Z"),
        event("w", "w4", f"{D2}T11:25:00Z"),
        event("z", "z1", f"{D2}T18:00:00Z"),
    ],
]


published = lake_session_set
expected = reference_session_set


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    """A lake written by the real stream with a 20-minute gap, not deduplicated yet (copy it)."""
    base = tmp_path_factory.mktemp("rules20")
    landing, lake, ckpt = str(base / "landing"), Lake.open(base / "lake"), str(base / "ckpt")
    land(landing, FIRST_WAVE)
    run_stream(StreamConfig(landing, lake, ckpt, RULES20, available_now=True), spark=spark)
    # The reference tells the rules apart on this data, so the tests below can fail.
    for day in (D1, D2):
        assert expected(landing, day, GAP20) != expected(landing, day, GAP30)
    return landing, lake, ckpt


def copy_of(streamed, tmp_path) -> tuple[str, Lake, str]:
    for name, folder in zip(("landing", "lake", "ckpt"), streamed, strict=False):
        shutil.copytree(folder, tmp_path / name)
    return str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")


def stale(lake: Lake, capsys) -> list[date]:
    assert cli.main(["rules", "show", "--lake", str(lake), "--json"]) == 0
    return [
        as_event_date(line["event_date"])
        for line in map(json.loads, capsys.readouterr().out.splitlines())
        if line["kind"] == "stale_date"
    ]


def test_dedup_without_rule_options_uses_the_streams_gap(spark, streamed, tmp_path, capsys):
    landing, lake, _ = copy_of(streamed, tmp_path)
    for day in (D1, D2):
        result = run_dedup(lake, day, spark=spark)  # what `tidemark dedup --lake --event-date` does
        assert published(lake, day) == expected(landing, day, GAP20), day
        assert reader.current_version(lake, day).rules_id == rules_record.fingerprint(RULES20)
        assert result.sessions == len(expected(landing, day, GAP20))
    assert stale(lake, capsys) == []

    # The rules change (recorded only): every date is stale, and a plain rerun of one date (what a
    # DAG run or reconciliation does) recomputes it under the new rules instead of a no-op.
    rules_record.record_change(lake, SessionRules(gap=GAP45), "test")
    assert stale(lake, capsys) == [D1, D2]
    rerun = run_dedup(lake, D2, spark=spark)
    assert not rerun.noop
    assert published(lake, D2) == expected(landing, D2, GAP45)
    assert stale(lake, capsys) == [D1]


@pytest.mark.slow
def test_the_dags_spark_submit_dedup_uses_the_streams_gap(streamed, tmp_path):
    """`spark-submit streaming_job/submit.py dedup --lake L --event-date D`: the DAG's command line
    (SparkSubmitOperator on spark_default = local), with no rule option."""
    from tidemark.devstack.spark_cluster import spark_home

    landing, lake, _ = copy_of(streamed, tmp_path)
    env = {
        **os.environ,
        "SPARK_HOME": spark_home(),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_CONF_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            SUBMIT,
            "dedup",
            "--lake",
            str(lake),
            "--event-date",
            D1.isoformat(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["sessions"] == len(expected(landing, D1, GAP20))
    assert published(lake, D1) == expected(landing, D1, GAP20)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_dag_publishes_the_streams_gap(streamed, tmp_path, spark_connect_server):
    """`airflow dags test tidemark_dedup` on the 20m lake, its dedup on the worker's Spark Connect
    server (the DAG's spark-submit command line is the test above's)."""
    from tidemark.base import names

    landing, lake, _ = copy_of(streamed, tmp_path)
    server = airflow_on_connect(str(tmp_path / "airflow"), lake, spark_connect_server)
    os.makedirs(server.home, exist_ok=True)
    server.migrate()
    proc = server.cli(
        "dags", "test", names.get("DAG_ID"), "--conf", json.dumps({"event_date": D2.isoformat()}), timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert published(lake, D2) == expected(landing, D2, GAP20)
    assert reader.current_version(lake, D2).rules_id == rules_record.fingerprint(RULES20)


def test_the_stream_refuses_other_rules_and_writes_nothing(spark, streamed, tmp_path):
    landing, lake, ckpt = copy_of(streamed, tmp_path)
    land(landing_copy := str(tmp_path / "landing2"), [[event("u", "u9", f"{D2}T20:00:00Z")]])
    before = sorted(os.listdir(os.path.join(lake, "sessions", f"event_date={D2}")))
    with pytest.raises(rules_record.RulesMismatch, match="--gap 30m given, the lake records 20m"):
        run_stream(StreamConfig(landing_copy, lake, ckpt, SessionRules(), available_now=True), spark=spark)
    assert sorted(os.listdir(os.path.join(lake, "sessions", f"event_date={D2}"))) == before
    assert rules_record.current(lake).rules == RULES20


def test_migrate_records_the_new_rules_and_rededuplicates_every_date(spark, streamed, tmp_path, capsys):
    landing, lake, ckpt = copy_of(streamed, tmp_path)
    for day in (D1, D2):
        run_dedup(lake, day, spark=spark)
    old = {day: reader.current_version(lake, day).version for day in (D1, D2)}

    assert cli.main(["rules", "migrate", "--lake", str(lake), "--gap", "45m"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [as_event_date(line["event_date"]) for line in lines if line["kind"] == "date"] == [D1, D2]
    assert lines[-1]["kind"] == "migration"
    assert lines[-1]["recomputed"] == 2
    assert lines[-1]["gap"] == "45m"
    history = rules_record.history(lake)
    assert [(r.sequence, r.rules.gap) for r in history] == [(1, GAP20), (2, GAP45)]
    assert history[1].previous_rules_id == history[0].rules_id
    for day in (D1, D2):
        pointer = reader.current_version(lake, day)
        assert pointer.version > old[day]
        assert pointer.rules_id == history[1].rules_id
        assert published(lake, day) == expected(landing, day, GAP45), day
    assert expected(landing, D2, GAP45) != expected(landing, D2, GAP20)  # the change was visible
    assert [v.gap for v in table_versions.list_versions(lake, D1)] == [GAP20, GAP45]  # history kept

    # Again: nothing to record, nothing to recompute (restartable, idempotent).
    assert cli.main(["rules", "migrate", "--lake", str(lake), "--gap", "45m"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["recomputed"] == 0
    assert len(rules_record.history(lake)) == 2

    # The stream restarts without rule options and follows the lake's new rules.
    land(landing, [[event("v", "v3", f"{D1}T13:20:00Z"), event("z", "z2", f"{D2}T23:00:00Z")]], start_index=2)
    run_stream(StreamConfig(landing, lake, ckpt, available_now=True), spark=spark)
    run_dedup(lake, D1, spark=spark)
    assert published(lake, D1) == expected(landing, D1, GAP45)


def test_stream_migrate_rules_option_rededuplicates_before_starting(spark, streamed, tmp_path):
    landing, lake, ckpt = copy_of(streamed, tmp_path)
    run_dedup(lake, D1, spark=spark)  # D2 never deduplicated: the migration does it too
    run_stream(StreamConfig(landing, lake, ckpt, {"gap": GAP30}, migrate_rules=True, available_now=True), spark=spark)
    assert rules_record.current(lake).rules == SessionRules(gap=GAP30)
    assert rules_record.current(lake).recorded_by == "tidemark stream --migrate-rules"
    for day in (D1, D2):
        assert reader.current_version(lake, day).rules_id == rules_record.fingerprint(SessionRules(gap=GAP30))
        assert published(lake, day) == expected(landing, day, GAP30), day


def test_a_running_stream_stops_when_the_lakes_rules_change(spark, streamed, tmp_path):
    landing, lake, ckpt = copy_of(streamed, tmp_path)
    outcome = {}

    def run() -> None:
        try:
            run_stream(StreamConfig(landing, lake, ckpt, trigger_interval="1s", rules_check_interval=0.5), spark=spark)
            outcome["error"] = None
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(3)
    assert thread.is_alive(), outcome
    rules_record.record_change(lake, SessionRules(gap=GAP45), "test")
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome["error"], rules_record.RulesMismatch)
    assert "now records gap 45m" in str(outcome["error"])


# Issue 33 item 2: a 30m lake whose first date ends with events 40 and 28 minutes before midnight,
# each landed alone (one file per micro-batch), so that they sit in receipt partitions of D1 whose
# newest event is 23:20 (read by D2's plan at 45m only: lo = 23:15) and 23:32 (read at 30m and 45m,
# not at 25m: lo = 23:35). u's two events 27 minutes apart are one session at 30m, two at 25m;
# v's 40 minutes apart one at 45m only, and a's 23:20 and 00:00 one session starting on D1 at 45m.
EDGE_WAVES = [
    [event("a", "a1", f"{D1}T09:00:00Z"), event("a", "a2", f"{D1}T09:20:00Z"), event("a", "a3", f"{D1}T23:20:00Z")],
    [event("b", "b1", f"{D1}T23:32:00Z")],
    [
        event("a", "a4", f"{D2}T00:00:00Z"),
        event("u", "u1", f"{D2}T10:00:00Z"),
        event("u", "u2", f"{D2}T10:27:00Z"),
        event("v", "v1", f"{D2}T12:00:00Z"),
        event("v", "v2", f"{D2}T12:40:00Z"),
    ],
    [event("z", "z1", f"{D2}T18:00:00Z")],
]


def test_migrating_to_a_smaller_gap_and_back_leaves_every_date_equal_to_the_reference(spark, tmp_path, capsys):
    """`rules migrate --gap 25m` on a 30m lake where D2's 30m plan read a partition of D1 (newest
    event 28 minutes before midnight) that the 25m plan does not need: the migration used to exit 1
    (Superseded on every replan: the old version 'includes a receipt partition the run did not
    read'), leaving D2 on the old rules for good. Then 45m, and back to 30m (D2's 45m plan read a
    partition of D1 the 30m plan does not). After each, every date equals the batch reference under
    the lake's new rules, and a second run of the same migration recomputes nothing."""
    landing, lake, ckpt = str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    land(landing, EDGE_WAVES)
    run_stream(
        StreamConfig(landing, lake, ckpt, SessionRules(gap=GAP30), available_now=True, max_files_per_trigger=1),
        spark=spark,
    )
    gap25 = timedelta(minutes=25)
    # The reference tells every step's rules apart on this data, so each step below can fail.
    assert expected(landing, D2, gap25) != expected(landing, D2, GAP30) != expected(landing, D2, GAP45)
    assert expected(landing, D1, GAP45) != expected(landing, D1, GAP30)
    dates = rules_migration.event_dates(lake)
    assert dates == [D1, D2]
    for day in (D1, D2):
        run_dedup(lake, day, spark=spark)
        assert published(lake, day) == expected(landing, day, GAP30), day

    def d1_receipts(day: date) -> set[str]:
        return {k for k in reader.current_version(lake, day).receipts if k.startswith(f"{D1}/")}

    for gap, text in ((gap25, "25m"), (GAP45, "45m"), (GAP30, "30m")):
        before = d1_receipts(D2)
        code = cli.main(["rules", "migrate", "--lake", str(lake), "--gap", text])
        assert code == 0, capsys.readouterr().err[-3000:]
        summary = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert (summary["gap"], summary["recomputed"]) == (text, 2)
        for day in dates:
            pointer = reader.current_version(lake, day)
            assert pointer.rules_id == rules_record.fingerprint(SessionRules(gap=gap)), (text, day)
            assert published(lake, day) == expected(landing, day, gap), (text, day)
        if text != "45m":  # the smaller lo: D2's new version no longer holds a partition of D1 the old one did
            assert before - d1_receipts(D2), text
        assert cli.main(["rules", "migrate", "--lake", str(lake), "--gap", text]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["recomputed"] == 0
