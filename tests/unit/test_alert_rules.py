"""The Prometheus alert rules shipped in roles/observe/files: promtool accepts them, and each alert is proven by
promtool unit tests (tests/unit/alert_rules/*.test.yml) to fire on trouble and to stay silent on the close case."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "roles" / "observe" / "files" / "sturdy_workers.rules.yml"
RULE_TESTS = sorted((HERE / "alert_rules").glob("*.test.yml"))
# Where `make promtool` unpacks it: under the checkout, which `make unit` runs pytest beneath
# (.build/ansible_collections/sturdy/workers is a copy), so every parent directory is tried.
UNPACKED = Path(".build", "promtool", "usr", "bin", "promtool")


def find_promtool() -> str:
    """$PROMTOOL, else promtool on PATH, else the one `make promtool` unpacked; fail (not skip) without one."""
    if os.environ.get("PROMTOOL"):
        path = os.environ["PROMTOOL"]
        if not os.access(path, os.X_OK):
            pytest.fail(f"PROMTOOL={path} is not an executable file: unset PROMTOOL and run `make promtool`")
        return path
    on_path = shutil.which("promtool")
    if on_path:
        return on_path
    for parent in HERE.parents:
        if os.access(parent / UNPACKED, os.X_OK):
            return str(parent / UNPACKED)
    pytest.fail("promtool not found ($PROMTOOL, PATH, .build/promtool): run `make promtool` in the checkout, "
                "which unpacks it from Debian's prometheus package without installing anything")


@pytest.fixture(scope="module")
def promtool() -> str:
    return find_promtool()


def run(promtool: str, *args: str) -> None:
    proc = subprocess.run([promtool, *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"promtool {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]


def rule_cases() -> list[dict]:
    return [case for path in RULE_TESTS for test in yaml.safe_load(path.read_text())["tests"]
            for case in test["alert_rule_test"]]


def test_promtool_accepts_the_rules_file(promtool):
    run(promtool, "check", "rules", str(RULES))


@pytest.mark.parametrize("rule_test", RULE_TESTS, ids=[path.name for path in RULE_TESTS])
def test_alert_fires_on_trouble_and_not_on_the_close_case(promtool, rule_test):
    run(promtool, "test", "rules", str(rule_test))


def test_the_rule_tests_load_the_shipped_rules_file():
    for path in RULE_TESTS:
        files = [(path.parent / name).resolve() for name in yaml.safe_load(path.read_text())["rule_files"]]
        assert files == [RULES], f"{path.name} tests {files}, not {RULES}"


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alerts()])
def test_every_alert_has_a_firing_and_a_silent_case(alert):
    cases = [case for case in rule_cases() if case["alertname"] == alert]
    assert any(case.get("exp_alerts") for case in cases), f"no test in tests/unit/alert_rules shows {alert} firing"
    assert any(not case.get("exp_alerts") for case in cases), f"no test in tests/unit/alert_rules shows {alert} silent"


@pytest.mark.parametrize("rule", alerts(), ids=[rule["alert"] for rule in alerts()])
def test_every_alert_has_a_severity_and_tells_the_next_step(rule):
    assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
    assert rule["annotations"]["summary"].strip(), rule["alert"]
    assert "Next:" in rule["annotations"]["description"], f"{rule['alert']}: the description names no next step"


@pytest.mark.parametrize("rule", alerts(), ids=[rule["alert"] for rule in alerts()])
def test_every_aggregation_keeps_the_job(rule):
    """One Prometheus may scrape two environments under different jobs: no rule may merge their series."""
    for keyword, labels in re.findall(r"\b(by|on|without|ignoring)\s*\(([^)]*)\)", rule["expr"]):
        names = {name.strip() for name in labels.split(",")}
        if keyword in ("by", "on"):
            assert "job" in names, f"{rule['alert']}: {keyword} ({labels}) drops the job label"
        else:
            assert "job" not in names, f"{rule['alert']}: {keyword} ({labels}) drops the job label"


@pytest.mark.parametrize("rule", alerts(), ids=[rule["alert"] for rule in alerts()])
def test_every_playbook_in_a_description_is_run_with_an_inventory(rule):
    text = " ".join(rule["annotations"]["description"].split())
    for match in re.finditer(r"sturdy\.workers\.(\w+)", text):
        before, after = text[:match.start()], text[match.end():]
        assert before.endswith("ansible-playbook ") and after.startswith(" -i <inventory>"), (
            f"{rule['alert']}: write 'ansible-playbook sturdy.workers.{match.group(1)} -i <inventory>'")


def test_the_required_alerts_are_there():
    assert [group["name"] for group in yaml.safe_load(RULES.read_text())["groups"]] == ["sturdy.workers"]
    assert {rule["alert"] for rule in alerts()} >= {
        "SturdyQueueTooOld", "SturdyQueueNoConsumers", "SturdyQueueUnreadable", "SturdyCrashLooping",
        "SturdyInstanceDown", "SturdyOldRelease", "SturdyBuildSkew", "SturdyDeployFailed", "SturdyMetricsStale",
        "SturdyDeadLetters", "SturdyNewBuildFailing"}
