"""The emulator launcher other parts reuse (the Cloud Function e2e, `tidemark up`): it starts,
its admin helpers are idempotent, push and dead-letter settings are stored, and stop() leaves no
process behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemark.devstack import process
from tidemark.devstack.pubsub_emulator import (
    PubSubEmulator,
    ensure_subscription,
    ensure_topic,
    get_subscription,
    publisher_admin,
    pull_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PROJECT = "tidemark-local"


def test_emulator_lifecycle_and_admin_helpers(tmp_path):
    emulator = PubSubEmulator(str(tmp_path / "pubsub"))
    try:
        emulator.start()
        pid = emulator.managed.pid
        assert process.read_pidfile(emulator.pidfile).pid == pid
        assert (
            Path(os.path.join(emulator.data_dir, "env.yaml")).read_text().strip()
            == f"PUBSUB_EMULATOR_HOST: {emulator.host}"
        )
        host = emulator.host
        topic = ensure_topic(PROJECT, "availability", host=host)
        assert ensure_topic(PROJECT, "availability", host=host) == topic  # idempotent
        ensure_topic(PROJECT, "dead-letter", host=host)
        ensure_subscription(
            PROJECT,
            "to-function",
            "availability",
            host=host,
            push_endpoint="http://127.0.0.1:9/notice",
            dead_letter_topic="dead-letter",
            max_delivery_attempts=7,
        )
        ensure_subscription(PROJECT, "pull-all", "availability", host=host)
        ensure_subscription(PROJECT, "pull-all", "availability", host=host)  # idempotent
        stored = get_subscription(PROJECT, "to-function", host=host)
        assert stored.push_config.push_endpoint == "http://127.0.0.1:9/notice"
        assert stored.dead_letter_policy.dead_letter_topic == f"projects/{PROJECT}/topics/dead-letter"
        assert stored.dead_letter_policy.max_delivery_attempts == 7

        publisher_admin(host).publish(topic, b"hello", kind="partition").result(timeout=30)
        [message] = pull_until(PROJECT, "pull-all", lambda got: len(got) >= 1, host=host)
        assert (message.message.data, dict(message.message.attributes)) == (b"hello", {"kind": "partition"})

        # A restart keeps the address and forgets every topic (the emulator is in memory).
        emulator.stop()
        assert not process.pid_alive(pid)
        assert not os.path.exists(emulator.pidfile)
        emulator.start()
        assert emulator.host == host
        from google.api_core import exceptions

        with pytest.raises(exceptions.NotFound):
            get_subscription(PROJECT, "pull-all", host=host)
    finally:
        emulator.stop()
    assert not process.port_open(int(host.rsplit(":", 1)[1]))


def test_admin_helpers_refuse_to_guess_a_host(monkeypatch):
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    with pytest.raises(ValueError, match="no emulator host"):
        ensure_topic(PROJECT, "availability")
