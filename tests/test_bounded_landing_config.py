"""The production stream (Terraform's Dataproc job) runs with a bounded landing: `--archive` and
`--checkpoint-rotation` (docs/input-contract.md, "A bounded landing"), spelled as `tidemark stream`
spells them, with an archive the stream may write and will never read as landing, kept as long as
the landing's retention says. The HCL is parsed (python-hcl2) as in tests/test_terraform.py."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

import pytest

from tests import terraformkit
from tests.terraformkit import one, resource
from tidemark.base.durations import parse_duration


@pytest.fixture(scope="module")
def tf() -> dict:
    return terraformkit.load()


def stream_job_args(tf) -> list[str]:
    return one(resource(tf, "google_dataproc_job", "stream")["pyspark_config"])["args"]


def resolved(value: str, tf) -> str:
    """A string with its locals and variables replaced by their values (variables: their defaults,
    "x" without one) and a topic's id by a topic's full name, until none is left; other references
    stay as they are."""
    variables, locals_ = tf["variable"], tf["locals"]

    def value_of(match: re.Match) -> str:
        expr = match.group(1)
        inner = re.fullmatch(r"tostring\((.*)\)", expr)
        expr = inner.group(1) if inner else expr
        if expr.startswith("var."):
            default = variables[expr[len("var.") :]].get("default")
            return "x" if default is None else str(default)
        if expr.startswith("local."):
            return str(locals_[expr[len("local.") :]])
        if re.fullmatch(r"google_pubsub_topic\.\w+\.id", expr):  # a topic's id: its full name
            return "projects/project/topics/" + expr.split(".")[1]
        return match.group(0)

    for _ in range(10):
        value, before = re.sub(r"\$\{([^}]*)\}", value_of, value), value
        if value == before:
            break
    return value


def stream_parser() -> argparse.ArgumentParser:
    from tidemark.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["stream"]


def test_the_stream_job_runs_with_the_archive_and_checkpoint_rotation(tf):
    from tidemark.commands.stream import config_from_args

    args = stream_job_args(tf)
    raw = dict(zip(args[1::2], args[2::2], strict=False))
    assert raw["--archive"] == "${local.landing_archive_uri}"
    assert raw["--checkpoint-rotation"] == "${tostring(var.stream_checkpoint_rotation)}"

    # Every option is one `tidemark stream --help` shows, and the whole line is a valid command.
    help_text = stream_parser().format_help()
    options = {word for word in args if word.startswith("--")}
    assert {"--archive", "--checkpoint-rotation"} <= options
    assert all(re.search(rf"(^|\s){re.escape(option)}\b", help_text) for option in options), options
    parsed = stream_parser().parse_args([resolved(a, tf) for a in args[1:]])
    config = config_from_args(parsed)  # --checkpoint-rotation without --archive would be refused here
    assert config.archive == resolved("${local.landing_archive_uri}", tf)
    assert config.rotate_after == tf["variable"]["stream_checkpoint_rotation"]["default"]


def test_the_archive_is_beside_the_landing_never_under_it(tf):
    landing = resolved("${local.landing_uri}", tf)
    archive = resolved("${local.landing_archive_uri}", tf)
    # Same bucket (a move is a copy and a delete within it), another prefix: the stream reads the
    # landing prefix recursively, and an archive under it would be read again.
    assert landing.split("/")[2] == archive.split("/")[2]
    assert not archive.startswith(landing)
    assert not landing.startswith(archive)
    prefix = tf["variable"]["landing_archive_prefix"]["default"]
    assert prefix.endswith("/")
    assert not prefix.startswith(("_", "."))


def test_a_checkpoint_generation_is_a_day_of_the_default_trigger(tf):
    trigger = parse_duration(tf["variable"]["stream_trigger_interval"]["default"])
    assert tf["variable"]["stream_checkpoint_rotation"]["default"] * trigger == timedelta(days=1)


def test_the_stream_may_move_landed_files_and_the_archive_follows_the_landing_retention(tf):
    roles = set(
        resource(tf, "google_storage_bucket_iam_member", "spark_landing")["for_each"].strip("${}").split('"')[1::2]
    )
    # deleting a landed object after copying it to the archive: objectUser or objectAdmin
    assert roles & {"roles/storage.objectUser", "roles/storage.objectAdmin"}, roles
    bucket = resource(tf, "google_storage_bucket", "landing")
    prefixes = [
        one(rule["condition"]).get("matches_prefix")
        for rule in bucket["lifecycle_rule"] + one(bucket["dynamic"])["lifecycle_rule"]["content"]
        if one(rule["condition"]).get("matches_prefix")
    ]
    assert len(prefixes) == 2, prefixes
    assert all(  # NEARLINE, then the retention's delete
        p == ["${var.landing_prefix}", "${var.landing_archive_prefix}"] for p in prefixes
    ), prefixes
