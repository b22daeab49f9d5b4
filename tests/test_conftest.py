"""tests/conftest.py's environment guard, shown on small pytest sessions (pytester) that use the real
conftest: a variable a test or a module leaves behind is undone before the next test or module, and
what a module-scoped fixture sets on purpose stays for that module's tests."""

from __future__ import annotations

import os

from tests.conftest import FILE_SECONDS, restore_environ

CONFTEST = "from tests.conftest import *  # noqa: F401,F403 - the guard under test\n"

LEAKS = """
import os
import pytest

@pytest.fixture(scope="module")
def server_env():
    os.environ["TIDEMARK_GUARD_MODULE"] = "set by a module fixture"
    yield

def test_a_leaks_and_removes(server_env):
    os.environ["TIDEMARK_GUARD_LEAK"] = "leaked"
    os.environ["TIDEMARK_GUARD_LOG_LEVEL"] = "warning"
    del os.environ["TIDEMARK_GUARD_PRESENT"]

def test_b_sees_neither_the_leak_nor_the_removal_but_keeps_the_module_fixture(server_env):
    assert "TIDEMARK_GUARD_LEAK" not in os.environ
    assert os.environ["TIDEMARK_GUARD_LOG_LEVEL"] == "info"
    assert os.environ["TIDEMARK_GUARD_PRESENT"] == "yes"
    assert os.environ["TIDEMARK_GUARD_MODULE"] == "set by a module fixture"
"""

AFTER = """
import os

def test_c_the_next_module_starts_clean():
    assert "TIDEMARK_GUARD_MODULE" not in os.environ
"""


def test_leaks_from_a_test_or_a_module_are_undone(pytester, monkeypatch):
    monkeypatch.setenv("TIDEMARK_GUARD_LOG_LEVEL", "info")
    monkeypatch.setenv("TIDEMARK_GUARD_PRESENT", "yes")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_1_leaks=LEAKS, test_2_after=AFTER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3)
    assert "TIDEMARK_GUARD_MODULE" not in os.environ
    assert "TIDEMARK_GUARD_LEAK" not in os.environ


def test_restore_environ_says_what_it_undid(monkeypatch):
    monkeypatch.setenv("TIDEMARK_GUARD_KEPT", "1")
    monkeypatch.setenv("TIDEMARK_GUARD_CHANGED", "before")
    snapshot = dict(os.environ)
    os.environ["TIDEMARK_GUARD_NEW"] = "x"
    os.environ["TIDEMARK_GUARD_CHANGED"] = "after"
    del os.environ["TIDEMARK_GUARD_KEPT"]
    assert restore_environ(snapshot) == {
        "TIDEMARK_GUARD_NEW": "x",
        "TIDEMARK_GUARD_CHANGED": "after",
        "TIDEMARK_GUARD_KEPT": None,
    }
    assert dict(os.environ) == snapshot


def test_the_longest_files_are_collected_first_each_in_its_own_order(pytester):
    """FILE_SECONDS orders the files (`make test` passes --no-loadscope-reorder, so xdist hands them
    out in this order); a file it does not list comes after, and a file's tests keep their order."""
    pytester.makeconftest(CONFTEST)
    # two listed files whose collection (name) order is the shorter one first
    shorter, longer = next(
        (a, b)
        for a in sorted(FILE_SECONDS)
        for b in sorted(FILE_SECONDS)
        if a < b and FILE_SECONDS[a] < FILE_SECONDS[b]
    )
    pytester.makepyfile(
        test_aaa_unlisted="def test_1(): pass\ndef test_2(): pass\n",
        **{shorter: "def test_3(): pass\ndef test_4(): pass\n", longer: "def test_5(): pass\n"},
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    assert [line for line in result.outlines if "::" in line] == [
        f"{longer}.py::test_5",
        f"{shorter}.py::test_3",
        f"{shorter}.py::test_4",
        "test_aaa_unlisted.py::test_1",
        "test_aaa_unlisted.py::test_2",
    ]
