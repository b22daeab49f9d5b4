"""Cloud Function (2nd gen, Pub/Sub trigger): an availability notice -> one deduplication DAG run.

    functions-framework --source main.py --target on_notice --signature-type cloudevent

What happens to a message, and why:
- valid notice: POST /api/v2/dags/<DAG_ID>/dagRuns with a dag_run_id derived from the notice
  (tidemark.orchestration.runs): a redelivered or re-published notice hits HTTP 409 "already exists", which is
  success. One notice, one run, however often Pub/Sub delivers it.
- invalid notice (not base64/JSON, unknown schema_version, an event_date that is not a date,
  anything path- or SQL-like, another dataset): logged at ERROR with the reason and acknowledged
  (the function returns): retrying cannot make it valid. With DEAD_LETTER_TOPIC set, a copy (the
  original bytes, attributes, and the reason) is published there first (cloud_function/dead_letter.py).
- Airflow unreachable, 5xx, timeout, auth or DAG not available: the function raises, the push
  gets a 500, and Pub/Sub redelivers with backoff (then dead-letters after max attempts).

Configuration (environment): AIRFLOW_BASE_URL, AIRFLOW_AUTH_MODE (password|google|none),
AIRFLOW_USERNAME, AIRFLOW_PASSWORD or AIRFLOW_PASSWORD_FILE (from Secret Manager), TIDEMARK_DAG_ID,
TIDEMARK_DATASET, AIRFLOW_TIMEOUT_SECONDS, DEAD_LETTER_TOPIC. See cloud_function/README.md.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

import functions_framework
from cloudevents.http.event import CloudEvent

from cloud_function import dead_letter
from cloud_function.cloud_logging import get_logger
from tidemark.base import names
from tidemark.notices import availability_notice
from tidemark.orchestration import runs
from tidemark.orchestration.airflow_api import AirflowClient, AirflowRejected

log = get_logger("cloud_function")
_client: AirflowClient | None = None


def _airflow() -> AirflowClient:
    # Built on first use and kept for the instance's life: the token is reused across events.
    global _client
    if _client is None:
        _client = AirflowClient.from_env()
    return _client


def decode_message(message: object) -> dict[str, Any]:
    """The Pub/Sub message of a push/CloudEvent -> validated notice, or InvalidNotice."""
    if not isinstance(message, dict) or "data" not in message:
        raise availability_notice.InvalidNotice("the event carries no Pub/Sub message data")
    try:
        data = base64.b64decode(message["data"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise availability_notice.InvalidNotice("message data is not base64") from None
    body = availability_notice.decode(data)
    dataset = names.get("DATASET")
    if body["dataset"] != dataset:
        raise availability_notice.InvalidNotice(
            f"dataset {body['dataset']!r} is not {dataset!r}, the dataset this function deduplicates"
        )
    return body


def _raw_data(message: object) -> bytes:
    """The message's original bytes (as published) for the dead-letter copy."""
    data = message.get("data", "") if isinstance(message, dict) else ""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, TypeError, ValueError):
        return str(data).encode("utf-8", "replace")


def _attributes(message: object) -> dict[str, Any]:
    """The message's attributes, {} when it has none."""
    attributes = message.get("attributes") if isinstance(message, dict) else None
    return attributes if isinstance(attributes, dict) else {}


def handle(message: dict[str, Any], client_factory: Callable[[], AirflowClient] = _airflow) -> dict[str, str]:
    """Process one message; return what happened (also logged). Raises to get a redelivery."""
    message_id = message.get("messageId") or message.get("message_id") if isinstance(message, dict) else None
    try:
        body = decode_message(message)
        run_id = runs.run_id_for_notice(body)
    except (availability_notice.InvalidNotice, runs.InvalidRunKey) as exc:
        reason = str(exc)
        try:
            copy_id = dead_letter.forward(_raw_data(message), _attributes(message), reason, message_id)
        except Exception as forward_error:
            log.error(
                "invalid notice could not be dead-lettered; Pub/Sub will redeliver",
                reason=reason,
                error=type(forward_error).__name__,
                message_id=message_id,
                outcome="retry",
            )
            raise
        log.error(
            "invalid notice acknowledged without a run",
            reason=reason,
            message_id=message_id,
            dead_letter_message_id=copy_id,
            outcome="rejected",
        )
        return {"outcome": "rejected", "reason": reason}

    dag_id = names.get("DAG_ID")
    fields = dict(
        notice_id=body["notice_id"],
        event_date=body["event_date"],
        receipt_ts=body["receipt_ts"],
        dag_id=dag_id,
        run_id=run_id,
        message_id=message_id,
    )
    try:
        result = client_factory().trigger_dag_run(
            dag_id, run_id, runs.run_conf(body), note=f"notice {body['notice_id']}"
        )
    except AirflowRejected as exc:
        # The notice passed our schema but Airflow's Params refused it: the function and the DAG
        # disagree. Raise (not ack): the message waits for a fix, then goes to the dead letter.
        log.error(
            "Airflow rejected the run; the function and the DAG disagree", reason=str(exc), outcome="retry", **fields
        )
        raise
    except Exception as exc:
        log.warning(
            "Airflow not available; Pub/Sub will redeliver",
            reason=str(exc),
            error=type(exc).__name__,
            outcome="retry",
            **fields,
        )
        raise
    outcome = "triggered" if result.created else "already_exists"
    log.info(
        "dag run triggered" if result.created else "dag run already exists (redelivery)", outcome=outcome, **fields
    )
    return {"outcome": outcome, "run_id": run_id}


@functions_framework.cloud_event
def on_notice(cloud_event: CloudEvent) -> None:
    """Entry point for a google.cloud.pubsub.topic.v1.messagePublished CloudEvent."""
    data = cloud_event.data if isinstance(cloud_event.data, dict) else {}
    handle(data.get("message", {}))
