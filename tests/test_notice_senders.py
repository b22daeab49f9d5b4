"""The notice transports' seam: one factory from a destination (tidemark.notices.sender.sender_for)
and one protocol (Sender) that both transports in the tree satisfy, so the drain and the notice
service need nothing else of them."""

from __future__ import annotations

import pytest

from tidemark.notices import availability_notice, corrected_notice
from tidemark.notices.asset_events import AssetEventSender
from tidemark.notices.sender import PubSubSender, Sender, sender_for
from tidemark.orchestration.airflow_api import AirflowClient


def test_a_topic_path_gets_the_pubsub_transport_with_the_codec_asked_for():
    sender = sender_for("projects/my-project/topics/tidemark-corrected", codec=corrected_notice)
    assert isinstance(sender, PubSubSender)
    assert isinstance(sender, Sender)
    assert sender.destination == "projects/my-project/topics/tidemark-corrected"
    assert sender.codec is corrected_notice
    assert sender_for("projects/my-project/topics/tidemark-availability").codec is availability_notice


@pytest.mark.parametrize(
    ("destination", "message"),
    [
        ("file:///tmp/notices.jsonl", "invalid topic 'file:///tmp/notices.jsonl': no notice transport serves it"),
        ("projects/x/topics/t", "invalid topic"),  # a Pub/Sub destination with a bad project id
    ],
)
def test_a_destination_no_transport_serves_is_refused_by_name(destination, message):
    with pytest.raises(ValueError, match=message):
        sender_for(destination)


def test_airflows_asset_events_are_a_transport_too():
    sender = AssetEventSender(AirflowClient("http://127.0.0.1:9", username="admin", password="admin"))
    assert isinstance(sender, Sender)
    assert sender.destination.startswith("airflow asset ")
