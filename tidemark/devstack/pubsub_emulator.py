"""The official Pub/Sub emulator, run locally for tests, the demo and `tidemark up`.

    emulator = PubSubEmulator("/tmp/x/pubsub").start()      # free port on 127.0.0.1, ready in ~1 s
    os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host      # what google-cloud-pubsub clients read
    ensure_topic(PROJECT, "tidemark-availability", host=emulator.host)
    ensure_subscription(PROJECT, "late", "tidemark-availability", filter='attributes.late = "true"',
                        host=emulator.host)
    emulator.stop()

The Java binary is started directly (not the gcloud wrapper, whose death leaves Java running) in
its own process group, and stopped by group. It keeps everything in memory: a restarted emulator
has no topics or subscriptions, so callers recreate them (ensure_* are idempotent). `data_dir`
holds the log, a pid file and env.yaml (the file `gcloud beta emulators pubsub env-init` reads).

Facts about the emulator that matter to tests: subscription filters are stored but NOT applied;
push subscriptions POST the wrapped JSON format; names need at least 3 characters.

Admin helpers take `host` explicitly (an insecure gRPC channel to it) so that they never reach GCP
by accident when PUBSUB_EMULATOR_HOST is unset.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemark.base.polling import wait_for
from tidemark.devstack import process

if TYPE_CHECKING:
    # google-cloud-pubsub ships no type information (these are Any to mypy); named for the reader.
    import grpc  # type: ignore[import-untyped]  # grpcio ships no type information
    from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
    from google.pubsub_v1.types import ReceivedMessage, Subscription

# The Google client libraries (google-cloud-pubsub, grpc: about 1 s to import) are imported inside
# the functions that make a client, so that `tidemark status` and `down` do not pay for them.

EMULATOR_BIN = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"


def emulator_binary() -> str:
    """The emulator's start script: $TIDEMARK_PUBSUB_EMULATOR, the gcloud SDK's, or from PATH."""
    candidates = [os.environ.get("TIDEMARK_PUBSUB_EMULATOR"), EMULATOR_BIN]
    sdk = shutil.which("gcloud")
    if sdk:
        root = os.path.dirname(os.path.dirname(os.path.realpath(sdk)))
        candidates.append(os.path.join(root, "platform/pubsub-emulator/bin/cloud-pubsub-emulator"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "Pub/Sub emulator not found: install google-cloud-cli-pubsub-emulator "
        "or set TIDEMARK_PUBSUB_EMULATOR to its bin/cloud-pubsub-emulator"
    )


class PubSubEmulator:
    """One emulator process. start() waits until its port accepts connections; stop() ends its group."""

    def __init__(self, data_dir: str, port: int | None = None, start_timeout: float = 60.0):
        """An emulator keeping its log and pid file in `data_dir`, on `port` (a free one by default)."""
        self.data_dir = os.path.abspath(data_dir)
        self.port = port
        self.start_timeout = start_timeout
        self.managed: process.Managed | None = None

    @property
    def host(self) -> str:
        """host:port, the value of PUBSUB_EMULATOR_HOST."""
        if self.port is None:
            raise RuntimeError("emulator not started")
        return f"127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> str:
        """The pid file that lets another process stop this emulator."""
        return os.path.join(self.data_dir, "emulator.pid.json")

    def start(self) -> PubSubEmulator:
        """Start the emulator (unless it runs) and wait until its port accepts connections."""
        if self.managed is not None and self.managed.alive():
            return self
        os.makedirs(self.data_dir, exist_ok=True)
        # Keep a port across restarts (a restarted emulator is reachable at the same address).
        self.port = self.port or process.free_port()
        if process.port_open(self.port):
            raise RuntimeError(f"port {self.port} is already in use; cannot start the Pub/Sub emulator")
        self.managed = process.start(
            "pubsub-emulator",
            [emulator_binary(), "--host=127.0.0.1", f"--port={self.port}"],
            log_path=os.path.join(self.data_dir, "emulator.log"),
            url=self.host,
            # The emulator is a JVM: a small heap is plenty and leaves memory to Spark.
            env={"JAVA_OPTS": os.environ.get("TIDEMARK_PUBSUB_JAVA_OPTS", "-Xmx256m")},
        )
        process.write_pidfile(self.pidfile, self.managed)
        port = self.port
        assert port is not None  # chosen above when none was given
        process.wait_until(
            lambda: process.port_open(port), self.start_timeout, f"Pub/Sub emulator on {self.host}", self.managed
        )
        with open(os.path.join(self.data_dir, "env.yaml"), "w") as handle:
            handle.write(f"PUBSUB_EMULATOR_HOST: {self.host}\n")
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop the emulator's process group and remove its pid file."""
        if self.managed is not None:
            process.stop(self.managed, grace)
            self.managed = None
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.pidfile)

    def alive(self) -> bool:
        """Whether the emulator this object started runs."""
        return self.managed is not None and self.managed.alive()

    def __enter__(self) -> PubSubEmulator:
        """Start the emulator."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the emulator."""
        self.stop()


# ---- clients bound to one emulator -------------------------------------------------------------


def _channel(host: str) -> grpc.Channel:
    import grpc

    return grpc.insecure_channel(host)


def publisher_admin(host: str) -> PublisherClient:
    """A PublisherClient (topic admin and publishing) talking to the emulator at `host` only."""
    from google.cloud import pubsub_v1
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    return pubsub_v1.PublisherClient(transport=PublisherGrpcTransport(channel=_channel(host)))


def subscriber_admin(host: str) -> SubscriberClient:
    """A SubscriberClient (subscription admin and pull) talking to the emulator at `host` only."""
    from google.cloud import pubsub_v1
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    return pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=_channel(host)))


def _host(host: str | None) -> str:
    host = host or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        raise ValueError("no emulator host: pass host= or set PUBSUB_EMULATOR_HOST")
    return host


def ensure_topic(project: str, topic: str, host: str | None = None) -> str:
    """Create the topic unless it exists; return its path."""
    from google.api_core import exceptions

    client = publisher_admin(_host(host))
    path: str = client.topic_path(project, topic)
    with contextlib.suppress(exceptions.AlreadyExists):
        client.create_topic(request={"name": path})
    return path


def ensure_subscription(
    project: str,
    subscription: str,
    topic: str,
    filter: str | None = None,
    push_endpoint: str | None = None,
    dead_letter_topic: str | None = None,
    max_delivery_attempts: int = 5,
    ack_deadline_seconds: int = 30,
    host: str | None = None,
) -> str:
    """Create a pull (or, with push_endpoint, push) subscription unless it exists; return its path.

    `filter` uses Pub/Sub's filter syntax on attributes, e.g. 'attributes.late = "true"'; the
    emulator stores it without applying it. `dead_letter_topic` is a topic name in `project`.
    """
    from google.api_core import exceptions

    client = subscriber_admin(_host(host))
    path: str = client.subscription_path(project, subscription)
    request = {
        "name": path,
        "topic": f"projects/{project}/topics/{topic}",
        "ack_deadline_seconds": ack_deadline_seconds,
    }
    if filter:
        request["filter"] = filter
    if push_endpoint:
        request["push_config"] = {"push_endpoint": push_endpoint}
    if dead_letter_topic:
        request["dead_letter_policy"] = {
            "dead_letter_topic": f"projects/{project}/topics/{dead_letter_topic}",
            "max_delivery_attempts": max_delivery_attempts,
        }
    with contextlib.suppress(exceptions.AlreadyExists):
        client.create_subscription(request=request)
    return path


def get_subscription(project: str, subscription: str, host: str | None = None) -> Subscription:
    """The stored Subscription (filter, push config, dead-letter policy) as the emulator keeps it."""
    client = subscriber_admin(_host(host))
    found: Subscription = client.get_subscription(
        request={"subscription": client.subscription_path(project, subscription)}
    )
    return found


def pull(
    project: str,
    subscription: str,
    host: str | None = None,
    max_messages: int = 100,
    timeout: float = 10.0,
    ack: bool = True,
    client: SubscriberClient | None = None,
) -> list[ReceivedMessage]:
    """One synchronous pull (ReceivedMessage list), acknowledged unless ack=False.

    An empty subscription holds the pull open for a few seconds (the emulator long-polls). A pull
    cut off by its deadline returns [] here, but the emulator may already have leased messages to
    it: those come back only after the subscription's ack deadline. So one empty pull proves
    nothing; callers that expect messages use pull_until.
    """
    from google.api_core import exceptions

    client = client or subscriber_admin(_host(host))
    path = client.subscription_path(project, subscription)
    try:
        response = client.pull(request={"subscription": path, "max_messages": max_messages}, timeout=timeout)
    except exceptions.DeadlineExceeded:
        return []
    received = list(response.received_messages)
    if ack and received:
        client.acknowledge(request={"subscription": path, "ack_ids": [m.ack_id for m in received]})
    return received


def pull_until(
    project: str,
    subscription: str,
    done: Callable[[list[ReceivedMessage]], bool],
    host: str | None = None,
    timeout: float = 120.0,
) -> list[ReceivedMessage]:
    """Pull (and ack) until `done(received so far)` is true; TimeoutError after `timeout` seconds.

    What a test that expects messages must use: a pull may return fewer messages than are
    waiting, or none, so "pull until a pull comes back empty" can stop before everything published
    has arrived. The default timeout outlasts an ack deadline (30 s), so messages leased to a pull
    that timed out are redelivered in time.
    """
    client = subscriber_admin(_host(host))
    out: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout

    def received_enough() -> bool:
        if not done(out):  # each pull waits at most 10 s, never past the deadline
            out.extend(
                pull(project, subscription, client=client, timeout=max(1.0, min(10.0, deadline - time.monotonic())))
            )
        return done(out)

    wait_for(
        received_enough,
        timeout,
        f"{subscription}: the expected messages",
        interval=0,
        detail=lambda: f" ({len(out)} received)",
    )
    return out


def pull_all(
    project: str, subscription: str, host: str | None = None, idle_rounds: int = 2, timeout: float = 2.0
) -> list[ReceivedMessage]:
    """Pull (and ack) until `idle_rounds` pulls in a row return nothing.

    Only for draining, or for checking that nothing (more) arrives; to receive messages that were
    published, use pull_until.
    """
    client = subscriber_admin(_host(host))
    out: list[ReceivedMessage] = []
    idle = 0
    while idle < idle_rounds:
        batch = pull(project, subscription, timeout=timeout, client=client)
        out.extend(batch)
        idle = 0 if batch else idle + 1
    return out
