"""The notice transports' seam and its Pub/Sub transport.

The notice transports' seam (`Sender`, and `sender_for`, the one factory from a destination), and
its Pub/Sub transport: publish notices with google-cloud-pubsub and report which ones Pub/Sub
acknowledged.

A transport is a class with `destination`, `send_many`, `reset` and `close` (the `Sender` protocol);
the outbox drain (tidemark/notices/drain.py) and the stream's notice service
(tidemark/notices/service.py) use nothing else, so a second transport is that class plus one
branch of `sender_for` (docs/architecture.md, "Drill: a second notice transport"). The other one in
the tree, Airflow's asset events (tidemark/notices/asset_events.py), is built from an Airflow
client rather than a destination string.

With PUBSUB_EMULATOR_HOST set the client talks to that emulator (insecure channel, no
credentials); otherwise to GCP with Application Default Credentials. The client's own retry is
bounded (send_timeout) so that an outage surfaces as a failed future; the caller (service.py)
backs off and tries again, forever, with the notices still safe in the outbox.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Protocol, runtime_checkable

from tidemark.base.times import now_iso_z
from tidemark.notices import availability_notice
from tidemark.notices.availability_notice import NoticeCodec

_TOPIC = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/[A-Za-z][A-Za-z0-9._~+%-]{2,254}$")


def check_topic(topic: str) -> str:
    """projects/P/topics/T, with GCP's rules for P and T; refuse anything else."""
    text = str(topic)
    if not _TOPIC.match(text) or text.split("/")[-1].lower().startswith("goog"):
        raise ValueError(
            f"invalid topic {text[:120]!r}: expected projects/PROJECT/topics/TOPIC "
            "(project id 6-30 lowercase letters, digits, '-'; topic 3-255 characters "
            "starting with a letter)"
        )
    return text


@runtime_checkable
class Sender(Protocol):
    """What the outbox drain and the notice service need of a transport."""

    destination: str  # what log lines name: a topic path, an asset

    def send_many(self, entries: list[dict[str, Any]]) -> dict[str, object]:
        """Send outbox entries once; {notice_id: the transport's receipt (acknowledged) or the error}."""
        ...

    def reset(self) -> None:
        """Drop connection state after a failed round (the next round reconnects)."""
        ...

    def close(self) -> None:
        """Release the transport's connections."""


def check_destination(destination: str) -> str:
    """A destination some transport serves (what the CLI's TOPIC options accept), else ValueError."""
    return sender_for(destination).destination


def sender_for(destination: str, codec: NoticeCodec = availability_notice) -> Sender:
    """The transport for a destination an operator configured.

    `projects/P/topics/T` is a Pub/Sub topic. `codec`: the notice module that makes the message
    (availability or corrected).
    """
    if str(destination).startswith("projects/"):
        return PubSubSender(destination, codec=codec)
    raise ValueError(
        f"invalid topic {str(destination)[:120]!r}: no notice transport serves it (expected projects/PROJECT/topics/TOPIC)"
    )


class PubSubSender:
    """One PublisherClient for one topic. send_many() -> {notice_id: message_id or exception}.

    `codec`: the notice module whose encode(body) and attributes(body) make the message
    (tidemark.notices.availability_notice for the availability topic, tidemark.notices.corrected_notice for the corrected one).
    """

    def __init__(
        self,
        topic: str,
        send_timeout: float = 10.0,
        max_messages: int = 100,
        max_latency: float = 0.05,
        codec: NoticeCodec = availability_notice,
    ) -> None:
        """A publisher to `topic` (projects/P/topics/T) with its batching and timeout settings."""
        self.topic = check_topic(topic)
        self.destination = self.topic
        self.codec = codec
        self.send_timeout = send_timeout
        self.max_messages = max_messages
        self.max_latency = max_latency
        # google-cloud-pubsub ships no type information (mypy overrides): its client is Any here.
        self._client: Any = None

    def _make_client(self) -> Any:
        # google-cloud-pubsub (grpc): imported only when a notice is sent, not at the CLI's start
        from google.api_core.retry import Retry
        from google.cloud import pubsub_v1

        # Batch settings: notices are small; a short latency lets a burst (a batch writing many
        # event dates, or a drain after an outage) go out in a few requests. No ordering keys:
        # consumers order by receipt_ts, and ordering would stall a key on one failed publish.
        return pubsub_v1.PublisherClient(
            batch_settings=pubsub_v1.types.BatchSettings(
                max_messages=self.max_messages, max_bytes=1_000_000, max_latency=self.max_latency
            ),
            publisher_options=pubsub_v1.types.PublisherOptions(
                enable_message_ordering=False,
                retry=Retry(initial=0.25, maximum=2.0, multiplier=2.0, timeout=self.send_timeout),
                timeout=self.send_timeout,
            ),
        )

    @property
    def client(self) -> Any:
        """The Pub/Sub publisher client, made on first use and after a reset."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def send_many(self, entries: list[dict[str, Any]]) -> dict[str, object]:
        """Publish outbox entries; wait for every future. Values: message_id (acked) or the error."""
        futures = {}
        for entry in entries:
            body = dict(entry["notice"])
            body["published_at"] = now_iso_z()
            try:
                futures[body["notice_id"]] = (
                    body["published_at"],
                    self.client.publish(self.topic, self.codec.encode(body), **self.codec.attributes(body)),
                )
            except Exception as exc:  # noqa: BLE001 - reported per notice, retried by the caller
                futures[body["notice_id"]] = (None, exc)
        results: dict[str, object] = {}
        for notice_id, (published_at, future) in futures.items():
            if isinstance(future, Exception):
                results[notice_id] = future
                continue
            try:
                results[notice_id] = (future.result(timeout=self.send_timeout + 10), published_at)
            except Exception as exc:  # noqa: BLE001
                results[notice_id] = exc
        return results

    def reset(self) -> None:
        """Drop the client after a failure.

        A fresh channel reconnects at once when Pub/Sub is back, instead of waiting out
        gRPC's reconnect backoff.
        """
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # a broken client is being discarded
                client.stop()

    def close(self) -> None:
        """Stop the client, flushing what it still holds."""
        self.reset()
