"""ops/prometheus/rules.yml: valid for promtool, its unit tests pass, and every metric it names is
one tidemark exports (tidemark.ops.metrics.METRICS)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tidemark.ops import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "ops", "prometheus", "rules.yml")
TESTS = os.path.join(ROOT, "ops", "prometheus", "rules_test.yml")

promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)


@promtool
def test_promtool_checks_the_rules():
    run = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 6 rules found" in run.stdout


@promtool
def test_promtool_unit_tests_pass():
    run = subprocess.run(
        ["promtool", "test", "rules", TESTS], capture_output=True, text=True, timeout=60, cwd=os.path.dirname(TESTS)
    )
    assert run.returncode == 0, run.stdout + run.stderr


@promtool
def test_promtool_catches_a_broken_rule(tmp_path):
    """The check is not vacuous: a rule that does not parse fails it."""
    with open(RULES) as handle:
        text = handle.read()
    broken = tmp_path / "rules.yml"
    broken.write_text(text.replace("tidemark_reconcile_given_up > 0", "tidemark_reconcile_given_up >"))
    run = subprocess.run(["promtool", "check", "rules", str(broken)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0


def test_rules_name_only_exported_metrics():
    with open(RULES) as handle:
        text = handle.read()
    named = set(re.findall(r"\b(tidemark_[a-z_]+?)(?:_bucket)?\b", text))
    exported = set(metrics.PROMETHEUS_NAMES.values())
    labels = {a.replace(".", "_") for m in metrics.METRICS for a in m.attributes}
    assert named - labels, named - labels - exported
    assert named - labels <= exported, named - labels - exported
    alerts = re.findall(r"alert: (\w+)", text)
    with open(os.path.join(ROOT, "docs", "metrics.md")) as handle:
        doc = handle.read()
    for alert in alerts:  # each alert's runbook section exists
        assert f"### {alert}\n" in doc
