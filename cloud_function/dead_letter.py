"""Keep a copy of every rejected notice: publish it, untouched, to a dead-letter topic.

An invalid notice is acknowledged (retrying cannot make it valid), so Pub/Sub's own dead-letter
policy never sees it; with DEAD_LETTER_TOPIC=projects/P/topics/T set, the function forwards the
original bytes and attributes there, plus `tidemark_rejected_reason` and the original message id,
before acknowledging. Without it, the ERROR log line (with the reason) is the only record.

If forwarding fails the function raises: the message is redelivered rather than lost.
Honours PUBSUB_EMULATOR_HOST like every google-cloud-pubsub client.
"""

from __future__ import annotations

import os
import re
from typing import Any

_TOPIC = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/[A-Za-z][A-Za-z0-9._~%+-]{2,254}$")
_publisher: Any = None  # a pubsub_v1.PublisherClient once needed (google-cloud-pubsub ships no types)


def topic() -> str | None:
    """The dead-letter topic DEAD_LETTER_TOPIC names, None when unset.

    Raises:
        ValueError: the value is not a topic's full name.
    """
    value = os.environ.get("DEAD_LETTER_TOPIC", "").strip()
    if not value:
        return None
    if not _TOPIC.match(value):
        raise ValueError("DEAD_LETTER_TOPIC must look like projects/<project>/topics/<topic>")
    return value


def forward(data: bytes, attributes: dict[str, Any], reason: str, message_id: str | None) -> str | None:
    """Publish the rejected message to the dead-letter topic; return its new message id.

    None when no topic is configured.
    """
    global _publisher
    target = topic()
    if target is None:
        return None
    if _publisher is None:
        from google.cloud import pubsub_v1  # only deployments with a dead-letter topic need it

        _publisher = pubsub_v1.PublisherClient()
    attrs = {str(k): str(v) for k, v in (attributes or {}).items()}
    attrs["tidemark_rejected_reason"] = reason[:1024]
    if message_id:
        attrs["tidemark_original_message_id"] = str(message_id)
    # google-cloud-pubsub ships no types here: the future's result is the new message id
    return str(_publisher.publish(target, data, **attrs).result(timeout=30))
