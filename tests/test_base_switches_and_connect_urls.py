"""Two small readings shared by several adapters: an on-unless-off environment switch
(tidemark.base.switches) and a Spark Connect URL's address (tidemark.base.spark.connect_address)."""

from __future__ import annotations

import pytest

from streaming_job import warmup
from tidemark.base import switches
from tidemark.base.spark import CONNECT_DEFAULT_PORT, connect_address
from tidemark.devstack import connect_warmup

NAME = "TIDEMARK_TEST_SWITCH"


@pytest.mark.parametrize("value", ["0", "false", "No", " OFF ", "FALSE"])
def test_a_switch_set_to_an_off_word_is_off(monkeypatch, value):
    monkeypatch.setenv(NAME, value)
    assert not switches.switched_on(NAME)


@pytest.mark.parametrize("value", [None, "1", "yes", "on", "true", "anything"])
def test_a_switch_unset_or_set_to_anything_else_is_on(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert switches.switched_on(NAME)


def test_both_warmups_read_their_switch_the_same_way(monkeypatch, spark):
    monkeypatch.setenv(connect_warmup.WARMUP_ENV, "off")
    monkeypatch.setenv(warmup.WARMUP_ENV, "off")
    assert not connect_warmup.enabled()
    assert not warmup.enabled(spark)
    monkeypatch.setenv(connect_warmup.WARMUP_ENV, "1")
    monkeypatch.setenv(warmup.WARMUP_ENV, "1")
    assert connect_warmup.enabled()
    assert warmup.enabled(spark) == spark.conf.get("spark.master").startswith("local")


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("sc://127.0.0.1:15123", ("127.0.0.1", 15123)),
        ("sc://spark-connect.internal/;user_id=etl", ("spark-connect.internal", CONNECT_DEFAULT_PORT)),
        ("sc://host:16000/;token=x;use_ssl=true", ("host", 16000)),
    ],
)
def test_a_connect_url_gives_its_host_and_port(url, address):
    assert connect_address(url) == address


@pytest.mark.parametrize("url", ["http://127.0.0.1:15002", "127.0.0.1:15002", "spark://master:7077"])
def test_a_url_of_another_scheme_is_refused(url):
    with pytest.raises(ValueError, match="starts with sc://"):
        connect_address(url)
