"""tidemark.base.spark.shared_session_id: the Spark Connect session id the dedups of one window share."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from tidemark.base.spark import SHARED_SESSION_MINUTES, shared_session_id

T0 = datetime(2026, 11, 27, 12, 30, tzinfo=timezone.utc)  # a window's first instant


def test_one_id_within_a_window_another_in_the_next():
    last = T0 + timedelta(minutes=SHARED_SESSION_MINUTES) - timedelta(microseconds=1)
    assert shared_session_id("dedup", T0) == shared_session_id("dedup", last)
    assert shared_session_id("dedup", T0) != shared_session_id("dedup", last + timedelta(microseconds=1))
    assert shared_session_id("dedup", T0) != shared_session_id("dedup", T0 - timedelta(microseconds=1))


def test_the_id_is_a_uuid_of_the_purpose_and_the_utc_window():
    berlin = timezone(timedelta(hours=1))
    assert shared_session_id("dedup", T0) == shared_session_id("dedup", T0.astimezone(berlin))
    assert shared_session_id("dedup", T0) != shared_session_id("other", T0)
    assert uuid.UUID(shared_session_id("dedup", T0)).version == 5  # what Spark Connect takes as a session id
