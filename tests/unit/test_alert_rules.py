"""Every alert rule links a runbook section that exists, is listed in docs/operations.md, and
fires in the rules' unit test (promtool runs that test: tests/e2e/ops/test_dashboards.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.docs_blocks import heading_anchors

ROOT = Path(__file__).resolve().parents[2]
RULES = yaml.safe_load((ROOT / "docker/prometheus/alerts.yml").read_text())
RULE_TESTS = yaml.safe_load((ROOT / "docker/prometheus/alerts.test.yml").read_text())
OPERATIONS = ROOT / "docs/operations.md"


def _alerts() -> list[dict[str, Any]]:
    return [rule for group in RULES["groups"] for rule in group["rules"] if "alert" in rule]


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    anchors = heading_anchors(OPERATIONS)
    assert "a-leaked-key" in anchors and "worker-processes---workers" in anchors
    for rule in _alerts():
        link = rule["annotations"].get("runbook_url", "")
        page, _, anchor = link.partition("#")
        assert page == "docs/operations.md" and anchor in anchors, (rule["alert"], link)


def test_every_alert_is_listed_in_the_operations_page() -> None:
    listed = set(re.findall(r"^\| (Xnode\w+) \|", OPERATIONS.read_text(), re.M))
    assert listed == {rule["alert"] for rule in _alerts()}


def test_every_alert_fires_in_the_rules_unit_test() -> None:
    fired = {
        case["alertname"]
        for test in RULE_TESTS["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in _alerts()}
