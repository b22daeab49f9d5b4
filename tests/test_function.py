"""The Cloud Function without Airflow: run ids, what is refused (and acknowledged), logs, the bundle.

Servers are not needed here; where the function must reach Airflow, it is pointed at a closed port
on loopback, the real "Airflow is down" case.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from datetime import date

import pytest

from cloud_function import main
from tidemark.devstack.process import free_port
from tidemark.notices import availability_notice
from tidemark.orchestration import runs
from tidemark.orchestration.airflow_api import AirflowClient, ConfigError, TransientAirflowError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRFLOW_RUN_ID = re.compile(r"^[A-Za-z0-9_.~:+-]+$")


def partition(event_date="2026-03-07", receipt_ts="20260307T201500123Z", **extra):
    return {
        "event_date": event_date,
        "receipt_ts": receipt_ts,
        "batch_id": 3,
        "uri": f"file:///lake/sessions/event_date={event_date}/receipt_ts={receipt_ts}",
        "rows": 4,
        "events": 9,
        "pane_kinds": ["early"],
        "watermark": "2026-03-07T20:05:00Z",
        "late": False,
        **extra,
    }


def make_notice(**kw) -> dict:
    return availability_notice.build("sessions", [partition(**kw)])


def message(body) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return {"data": base64.b64encode(data).decode(), "messageId": "m-1", "attributes": {}}


def never_called():
    raise AssertionError("an invalid notice must not reach Airflow")


# -- run ids ----------------------------------------------------------------------------------


def test_run_id_is_derived_from_the_notice_and_allowed_by_airflow():
    a = make_notice()
    again = make_notice()
    later = make_notice(receipt_ts="20260307T201510456Z")
    other_date = make_notice(event_date="2026-03-08")
    assert runs.run_id_for_notice(a) == runs.run_id_for_notice(again)
    assert len({runs.run_id_for_notice(n) for n in (a, later, other_date)}) == 3
    for n in (a, later, other_date):
        rid = runs.run_id_for_notice(n)
        assert AIRFLOW_RUN_ID.match(rid)
        assert n["event_date"] in rid
        assert n["receipt_ts"] in rid


def test_coalesced_notice_maps_to_its_newest_partition():
    coalesced = availability_notice.build(
        "sessions",
        [partition(receipt_ts="20260307T201500123Z"), partition(receipt_ts="20260307T201600000Z")],
        kind="coalesced",
    )
    assert runs.run_id_for_notice(coalesced) == runs.notice_run_id("sessions", date(2026, 3, 7), "20260307T201600000Z")


@pytest.mark.parametrize(
    ("dataset", "event_date", "receipt_ts"),
    [
        ("sessions", "2026-02-31", "20260307T201500123Z"),
        ("sessions", "2026-03-07/../../etc", "20260307T201500123Z"),
        ("sessions", "2026-03-07", "20260307T201500123Z'; DROP TABLE x;--"),
        ("Sessions; drop", "2026-03-07", "20260307T201500123Z"),
        ("../sessions", "2026-03-07", "20260307T201500123Z"),
    ],
)
def test_run_id_refuses_values_that_are_not_partition_values(dataset, event_date, receipt_ts):
    """A notice's values as they come in (its event date as text, parsed there)."""
    with pytest.raises(runs.InvalidRunKey):
        runs.run_id_for_notice({"dataset": dataset, "event_date": event_date, "receipt_ts": receipt_ts})


def test_affected_run_id_is_deterministic_per_source_version():
    d8, d7 = date(2026, 3, 8), date(2026, 3, 7)
    rid = runs.affected_run_id(d8, d7, "20260308T000100000Z")
    assert rid == runs.affected_run_id(d8, d7, "20260308T000100000Z")
    assert rid != runs.affected_run_id(d8, d7, "20260308T000200000Z")
    assert AIRFLOW_RUN_ID.match(rid)
    with pytest.raises(runs.InvalidRunKey):
        runs.affected_run_id(d8, d7, "20260308T000100000Z; rm -rf /")
    with pytest.raises(TypeError):  # text is parsed where it enters, never here
        runs.affected_run_id("2026-03-08; rm -rf /", d7, "20260308T000100000Z")  # type: ignore[arg-type]  # the refusal is tested


# -- what the function refuses (and acknowledges) ---------------------------------------------


def _bad_bodies():
    good = make_notice()
    yield "not base64", {"data": "%%%not-base64%%%", "messageId": "m"}
    yield "no data", {"messageId": "m"}
    yield "not JSON", message(b"{not json")
    yield "JSON array", message([good])
    yield "unknown schema_version", message({**good, "schema_version": 2})
    yield "not a date", message({**good, "event_date": "2026-02-31"})
    yield "path in date", message({**good, "event_date": "../../etc/passwd"})
    yield "SQL in receipt_ts", message({**good, "receipt_ts": "1' OR '1'='1"})
    yield "other dataset", message({**good, "dataset": "clicks"})
    yield "missing field", message({k: v for k, v in good.items() if k != "event_date"})


@pytest.mark.parametrize(("case", "msg"), list(_bad_bodies()), ids=[c for c, _ in _bad_bodies()])
def test_invalid_notice_is_logged_and_acknowledged_without_a_run(case, msg):
    out = io.StringIO()
    with redirect_stdout(out):
        result = main.handle(msg, client_factory=never_called)
    assert result["outcome"] == "rejected"
    assert result["reason"]
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    assert any(
        line["severity"] == "ERROR" and line["reason"] == result["reason"] and line.get("message") for line in lines
    ), out.getvalue()


def test_decode_accepts_a_valid_notice():
    body = make_notice()
    assert main.decode_message(message(body)) == body


def test_airflow_down_raises_so_pubsub_redelivers_and_the_password_never_leaks(monkeypatch):
    secret = "s3cr3t-Pa55word-never-logged"
    env = {
        "AIRFLOW_BASE_URL": f"http://127.0.0.1:{free_port()}",
        "AIRFLOW_USERNAME": "admin",
        "AIRFLOW_PASSWORD": secret,
    }
    client = AirflowClient.from_env(env)
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(TransientAirflowError) as caught:
        main.handle(message(make_notice()), client_factory=lambda: client)
    text = out.getvalue() + str(caught.value) + repr(client) + repr(client._auth)
    assert secret not in text
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert line["severity"] == "WARNING"
    assert line["outcome"] == "retry"
    assert line["run_id"] == runs.run_id_for_notice(make_notice())


def test_config_errors_name_the_variable_not_the_value(tmp_path):
    with pytest.raises(ConfigError, match="AIRFLOW_BASE_URL"):
        AirflowClient.from_env({})
    with pytest.raises(ConfigError, match="AIRFLOW_PASSWORD"):
        AirflowClient.from_env({"AIRFLOW_BASE_URL": "http://127.0.0.1:9", "AIRFLOW_USERNAME": "a"})
    with pytest.raises(ConfigError, match="AIRFLOW_AUTH_MODE"):
        AirflowClient.from_env({"AIRFLOW_BASE_URL": "http://127.0.0.1:9", "AIRFLOW_AUTH_MODE": "basic"})
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-secret-manager\n")
    client = AirflowClient.from_env(
        {"AIRFLOW_BASE_URL": "http://127.0.0.1:9", "AIRFLOW_USERNAME": "a", "AIRFLOW_PASSWORD_FILE": str(secret_file)}
    )
    assert client._auth._password == "from-secret-manager"
    assert "from-secret-manager" not in repr(client._auth)


# -- the deployable bundle ---------------------------------------------------------------------


def test_function_bundle_is_self_contained(tmp_path):
    out = tmp_path / "cloud_function"
    (tmp_path / "cloud_function").mkdir()
    (out / "stale.py").write_text("# from an older build: must go\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "function-bundle", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(report["files"])  # nothing else: no stale file, no __pycache__
    assert {
        "main",
        "tidemark.notices.availability_notice",
        "tidemark.orchestration.runs",
        "tidemark.orchestration.airflow_api",
    } <= set(report["checked_modules"])
    assert "functions-framework" in (out / "requirements.txt").read_text()
