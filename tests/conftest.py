"""Shared fixtures. One local SparkSession for the whole run: Spark start-ups are the slowest
part of the suite, so every Spark test shares this one."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def spark():
    from tidemark.spark import build_session

    session = build_session("tidemark-tests", "local[2]", shuffle_partitions=4)
    yield session
    session.stop()
