"""Shared fixtures. One local SparkSession for the whole run: Spark start-ups are the slowest
part of the suite, so every Spark test shares this one.

Environment guard: every test, and every test module, leaves `os.environ` as it found it. A
variable left behind changes the tests that follow in the same pytest worker, and the processes
they start (pyspark's SPARK_CONNECT_MODE_ENABLED made later `tidemark stream`s fail;
TIDEMARK_LOG_LEVEL=warning hid the line the demo waited for). pytest sets up higher-scoped fixtures
first, so the per-test snapshot is taken after the session and module fixtures: what they set on
purpose stays for the tests that use them, and the per-module guard undoes it when the module ends.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The stream's warm-up (streaming_job/warmup.py) costs seconds at every stream start, and the suite
# starts many streams: off for the whole run (the processes tests start inherit it), on in the
# tests of the warm-up itself.
os.environ.setdefault("TIDEMARK_STREAM_WARMUP", "0")

# pytester: tests/test_conftest.py runs small pytest sessions to show the guard at work.
pytest_plugins = ["pytester"]

# pytest's own per-phase variable: set and removed by pytest around every phase.
_NOT_GUARDED = frozenset({"PYTEST_CURRENT_TEST"})


def restore_environ(snapshot: dict[str, str]) -> dict[str, str | None]:
    """Put os.environ back to `snapshot` (only the variables that differ); returns what was undone:
    {name: the leaked value, or None for a variable that was removed}."""
    undone = {}
    for name in (set(os.environ) | set(snapshot)) - _NOT_GUARDED:
        if os.environ.get(name) == snapshot.get(name):
            continue
        undone[name] = os.environ.get(name)
        if name in snapshot:
            os.environ[name] = snapshot[name]
        else:
            del os.environ[name]
    return undone


@pytest.fixture(scope="module", autouse=True)
def environ_guard_per_module():
    """Undo at the end of a module what its module-scoped fixtures (or its tests) set."""
    snapshot = dict(os.environ)
    yield
    restore_environ(snapshot)


@pytest.fixture(autouse=True)
def environ_guard_per_test():
    """Undo after each test what the test (or its function-scoped fixtures) set or removed."""
    snapshot = dict(os.environ)
    yield
    restore_environ(snapshot)


@pytest.fixture(scope="session")
def spark():
    from tidemark.base.spark import build_session

    session = build_session("tidemark-tests", "local[2]", shuffle_partitions=4)
    yield session
    session.stop()
