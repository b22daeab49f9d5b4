"""Corrected notices on the real Pub/Sub emulator: one message per published version, and an
outage during a publish (tests/netcut.py cuts the link; the emulator keeps its topic and
subscription) delays the notice, which goes out once when the link is back."""

from __future__ import annotations

import threading
import time
from datetime import date

import pytest

from tests.icebergkit import publish_recorded_run as publish_run
from tests.icebergkit import receipt
from tests.netcut import NetCut
from tidemark.base import names
from tidemark.devstack.pubsub_emulator import PubSubEmulator, ensure_subscription, ensure_topic, pull_all, pull_until
from tidemark.notices import corrected_delivery, corrected_notice
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROJECT = names.get("PROJECT")
D = "2026-03-10"  # as notices and their JSON spell it
DAY = date(2026, 3, 10)  # as the library takes it
# The example filtered subscription's filter (terraform/pubsub.tf): versions that changed sessions.
CHANGED_FILTER = corrected_notice.EXAMPLE_FILTER.format(dataset=names.get("DATASET"))


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))).start()
    yield emu
    emu.stop()


def make_topic(host: str, name: str) -> str:
    ensure_topic(PROJECT, name, host=host)
    ensure_subscription(PROJECT, f"{name}-all", name, host=host)
    ensure_subscription(PROJECT, f"{name}-changed", name, filter=CHANGED_FILTER, host=host)
    return names.topic_path(PROJECT, name)


def received(host: str, name: str, expect: set[str]) -> list[tuple[dict, dict]]:
    """Pull until every expected notice id arrived, then until quiet (a duplicate would show)."""
    got = pull_until(
        PROJECT,
        f"{name}-all",
        host=host,
        done=lambda ms: expect <= {corrected_notice.decode(m.message.data)["notice_id"] for m in ms},
    )
    got += pull_all(PROJECT, f"{name}-all", host=host)
    return [(corrected_notice.decode(m.message.data), dict(m.message.attributes)) for m in got]


def sent_ids(lake: Lake) -> set[str]:
    return {e["notice"]["notice_id"] for e in corrected_delivery.outbox(lake).sent()}


def test_one_message_per_published_version_however_often_it_is_sent(emulator, tmp_path, monkeypatch):
    lake, host = Lake.open(tmp_path / "lake"), emulator.host
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", host)
    topic = make_topic(host, "corrected-once")
    versions = [publish_run(lake, D, [receipt(h) for h in range(1, n + 1)], sessions=n).current.version for n in (1, 2)]
    assert corrected_delivery.send_owed(lake, topic, timeout=60) == 0
    # Everything that may record or send again: the DAG's notify task of a rerun, another drain.
    monkeypatch.setenv("TIDEMARK_CORRECTED_TOPIC_PATH", topic)
    assert corrected_delivery.notify(lake, DAY, timeout=60) == {"recorded": False, "owed": 0, "topic": topic}
    assert corrected_delivery.send_owed(lake, topic, timeout=60) == 0
    got = received(host, "corrected-once", sent_ids(lake))
    assert sorted(b["version"] for b, _ in got) == versions  # one each
    for body, attrs in got:
        assert attrs == corrected_notice.attributes(body)
        assert "published_at" in body
    assert [b["change"]["kind"] for b, _ in sorted(got, key=lambda x: x[0]["version"])] == ["first", "changed"]
    stored = emulator_subscription(host, "corrected-once-changed")
    assert stored.filter == CHANGED_FILTER


def emulator_subscription(host: str, name: str):
    from tidemark.devstack.pubsub_emulator import get_subscription

    return get_subscription(PROJECT, name, host=host)


def test_pubsub_down_during_a_publish_the_notice_goes_out_once_when_it_is_back(emulator, tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    topic = make_topic(emulator.host, "corrected-outage")
    link = NetCut(emulator.port).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", link.host)
    try:
        link.cut()
        v1 = publish_run(lake, D, [receipt(1)]).current.version
        # A bounded publish while Pub/Sub is unreachable: nothing acknowledged, the notice stays owed.
        assert corrected_delivery.send_owed(lake, topic, timeout=3, backoff_max=1) == 1
        assert [e["notice"]["version"] for e in corrected_delivery.outbox(lake).owed()] == [v1]

        # A publish that is retrying when Pub/Sub comes back sends it, and a second version too.
        v2 = publish_run(lake, D, [receipt(1), receipt(2)]).current.version
        result: list[int] = []
        sender = threading.Thread(
            target=lambda: result.append(corrected_delivery.send_owed(lake, topic, timeout=120, backoff_max=2))
        )
        sender.start()
        time.sleep(4)  # let it fail and back off at least once (not an assertion on time)
        assert sender.is_alive()
        link.restore()
        sender.join(180)
        assert result == [0]
    finally:
        link.stop()
    assert corrected_delivery.outbox(lake).owed() == []
    got = received(emulator.host, "corrected-outage", sent_ids(lake))
    assert sorted(b["version"] for b, _ in got) == [v1, v2]  # each once
