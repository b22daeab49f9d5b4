"""The corrected notice's change counts (tidemark.notices.corrected_delivery.session_changes) against a plain
Python count over random pairs of versions."""

import datetime as dt
import random

import pyarrow as pa
import pytest

from tidemark.notices.corrected_delivery import session_changes

_SCHEMA = pa.schema(
    [("session_id", pa.string()), ("session_end", pa.timestamp("us", tz="UTC")), ("event_count", pa.int64())]
)
_BASE = dt.datetime(2026, 3, 7, tzinfo=dt.timezone.utc)


def _table(rows: dict) -> pa.Table:
    ids = list(rows)
    return pa.table(
        {"session_id": ids, "session_end": [rows[i][0] for i in ids], "event_count": [rows[i][1] for i in ids]},
        schema=_SCHEMA,
    )


def _expected(old: dict, new: dict) -> dict:
    common = old.keys() & new.keys()
    changed = sum(1 for k in common if old[k] != new[k])
    return {
        "sessions_added": len(new.keys() - old.keys()),
        "sessions_removed": len(old.keys() - new.keys()),
        "sessions_changed": changed,
        "sessions_unchanged": len(common) - changed,
    }


@pytest.mark.parametrize("seed", range(8))
def test_counts_equal_a_plain_count_over_random_versions(seed):
    rnd = random.Random(seed)
    old = {
        f"s{i}": (_BASE + dt.timedelta(minutes=rnd.randrange(1440)), rnd.randrange(1, 9))
        for i in rnd.sample(range(400), rnd.randrange(0, 300))
    }
    new = {}
    for sid, (end, count) in old.items():
        fate = rnd.random()
        if fate < 0.2:
            continue  # removed (merged into another session, or re-split)
        if fate < 0.35:
            new[sid] = (end + dt.timedelta(minutes=5), count)  # same start, later end
        elif fate < 0.5:
            new[sid] = (end, count + 1)  # one more event inside the session
        else:
            new[sid] = (end, count)
    for i in rnd.sample(range(400, 600), rnd.randrange(0, 50)):
        new[f"s{i}"] = (_BASE, 1)
    counts = session_changes(_table(old), _table(new))
    assert counts == _expected(old, new)
    assert sum(counts[k] for k in ("sessions_added", "sessions_changed", "sessions_unchanged")) == len(new)


def test_first_version_counts_every_session_as_added():
    new = _table({"a": (_BASE, 2), "b": (_BASE, 3)})
    assert session_changes(_SCHEMA.empty_table(), new) == {
        "sessions_added": 2,
        "sessions_removed": 0,
        "sessions_changed": 0,
        "sessions_unchanged": 0,
    }


def test_extra_columns_are_ignored():
    old = _table({"a": (_BASE, 2)}).append_column("user_id", pa.array(["u1"]))
    new = _table({"a": (_BASE, 2)}).append_column("user_id", pa.array(["u2"]))
    assert session_changes(old, new)["sessions_unchanged"] == 1
