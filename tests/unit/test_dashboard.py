"""The Grafana dashboard shipped in roles/observe/files: every query Prometheus can parse (promtool, each loaded as a
recording rule), names only metrics the collector writes, keeps environments (jobs) apart, and the layout Grafana
draws has no overlapping panels. The faults scenario draws every panel from the metrics its Prometheus scraped."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.sturdy.workers.plugins.module_utils.metrics import HELP
from ansible_collections.sturdy.workers.tests.unit.test_alert_rules import find_promtool

DASHBOARD = Path(__file__).resolve().parents[2] / "roles" / "observe" / "files" / "sturdy_workers.dashboard.json"
DASH = json.loads(DASHBOARD.read_text())
PANELS = [panel for panel in DASH["panels"] if panel["type"] != "row"]
# (where, expression): every panel's queries and the deploy annotation.
QUERIES = [(f"{panel['title']} {target['refId']}", target["expr"]) for panel in PANELS for target in panel["targets"]]
QUERIES += [(f"annotation {note['name']}", note["expr"]) for note in DASH["annotations"]["list"] if "expr" in note]


def as_prometheus_gets_it(expr: str) -> str:
    """The query as Grafana sends it for one environment and every app."""
    return expr.replace("$job", "shop").replace("$app", ".+").replace("$__rate_interval", "2m")


def test_promtool_parses_every_query(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"sturdy_dashboard:query_{n}", "expr": as_prometheus_gets_it(expr)}
        for n, (dummy, expr) in enumerate(QUERIES)]}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([find_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("where,expr", QUERIES, ids=[where for where, dummy in QUERIES])
def test_every_query_reads_the_collector_metrics_of_one_environment(where, expr):
    names = set(re.findall(r"\b(sturdy_[a-z_]+)\{", expr))
    assert names and names <= set(HELP), f"{where}: {sorted(names - set(HELP))} are not metrics the collector writes"
    # Every selector is of the chosen environment and apps; every aggregation and match keeps job.
    selectors = re.findall(r"\bsturdy_[a-z_]+\{([^}]*)\}", expr)
    assert all('job="$job"' in sel and 'app=~"$app"' in sel for sel in selectors), f"{where}: {expr}"
    for keyword, labels in re.findall(r"\b(by|on)\s*\(([^)]*)\)", expr):
        assert "job" in {name.strip() for name in labels.split(",")}, f"{where}: {keyword} ({labels}) drops the job"


def test_the_panels_show_what_an_operator_needs():
    """Builds and skew, queue depth, oldest age against its limit, consumers, dead letters, restarts (total and last
    hour), tasks by outcome and build, deploys as annotations."""
    shown = {name for dummy, expr in QUERIES for name in re.findall(r"\b(sturdy_[a-z_]+)\{", expr)}
    assert shown >= {
        "sturdy_build_info", "sturdy_current_release_info", "sturdy_queue_depth", "sturdy_queue_oldest_age_seconds",
        "sturdy_queue_age_limit_seconds", "sturdy_queue_consumers", "sturdy_queue_dead_letter_depth",
        "sturdy_restarts_total", "sturdy_restarts_last_hour", "sturdy_tasks_total", "sturdy_queue_paused",
        "sturdy_last_deploy_timestamp_seconds", "sturdy_last_deploy_info", "sturdy_up"}
    assert [note["name"] for note in DASH["annotations"]["list"] if "expr" in note] == ["Deploys"]


def test_the_layout_grafana_draws():
    ids = [panel["id"] for panel in DASH["panels"]]
    assert len(ids) == len(set(ids)), ids
    cells = {}
    for panel in DASH["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
    for panel in PANELS:
        assert panel["description"].strip() and panel["datasource"]["uid"] == "${datasource}", panel["title"]
    variables = {var["name"]: var for var in DASH["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    # One environment at a time (their series must never mix); one app or several.
    assert not variables["job"]["multi"] and not variables["job"]["includeAll"]
    assert DASH["uid"] == "sturdy-workers"
