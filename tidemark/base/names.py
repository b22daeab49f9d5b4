"""Names shared by the code and the Terraform configuration.

tests/test_terraform.py fails when they drift. Every one can be overridden from the environment,
TIDEMARK_<NAME>.
"""

from __future__ import annotations

import os

DEFAULTS = {
    "DATASET": "sessions",
    "EVENTS_TOPIC": "tidemark-events",
    "AVAILABILITY_TOPIC": "tidemark-availability",
    "DEAD_LETTER_TOPIC": "tidemark-availability-dead-letter",
    "FUNCTION_SUBSCRIPTION": "tidemark-availability-to-function",
    "LATE_DATA_SUBSCRIPTION": "tidemark-availability-late-data",
    "CORRECTED_TOPIC": "tidemark-corrected",
    "CORRECTED_SUBSCRIPTION": "tidemark-corrected-changed",
    "FUNCTION_NAME": "tidemark-notice-to-dag",
    "DAG_ID": "tidemark_dedup",
    "ASSET_URI_PREFIX": "tidemark://sessions_dedup",
    "PROJECT": "tidemark-local",
}


def get(name: str) -> str:
    """The value of a shared name: TIDEMARK_<name> from the environment, else its default."""
    if name not in DEFAULTS:
        raise KeyError(f"unknown tidemark name {name!r}")
    return os.environ.get(f"TIDEMARK_{name}", DEFAULTS[name])


def topic_path(project: str, topic: str) -> str:
    """A Pub/Sub topic's full resource name."""
    return f"projects/{project}/topics/{topic}"


def subscription_path(project: str, subscription: str) -> str:
    """A Pub/Sub subscription's full resource name."""
    return f"projects/{project}/subscriptions/{subscription}"
