from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan
from ansible_collections.sturdy.workers.plugins.module_utils.metrics import metrics_text, read_counts, samples

PLAN = plan("shop", processes=[{"name": "worker", "command": ["bin/shop-worker"], "instances": 2,
                                "adapter": "celery", "celery_app": "shop.celery", "queues": ["default"]},
                               {"name": "web", "command": ["bin/shop-web"]}])
NOW = 1_800_000_000.0


def instance(unit, state="active", pid=100, build="b2", old=False, restarts=0, last_hour=0):
    return {"unit": unit, "state": state, "pid": pid if state == "active" else None, "build": build,
            "old_release": old, "restarts": restarts, "restarts_last_hour": last_hour}


STATUS = {
    "current": "b2",
    "processes": [
        {"name": "worker", "instances": [instance("shop-worker@1.service", restarts=4, last_hour=3),
                                         instance("shop-worker@2.service", build="b1", old=True)]},
        {"name": "web", "instances": [instance("shop-web@1.service", state="failed")]},
    ],
    "queues": [{"queue": "default", "depth": 3, "oldest_age": 42.5, "consumers": [], "dead_letter_depth": 2},
               {"queue": "mail", "depth": 0, "oldest_age": None, "consumers": ["w1@h", "w2@h"], "failed_jobs": 4},
               {"queue": "gone", "error": "the agent could not read it (rc 1): ConnectionRefusedError"}],
}
COUNTS = {"shop-worker@1.service": {"b2": {"succeeded": 5, "failed": 1}, "b1": {"succeeded": 2, "retried": 1}},
          "shop-worker@2.service": {"b2": {"succeeded": 3}}}
DEPLOY = {"build": "b2", "result": "rolled_back", "finished": NOW - 60}


def by_name(metrics):
    found = {}
    for name, labels, value in metrics:
        found.setdefault(name, []).append((labels, value))
    return found


def test_every_instance_queue_and_count_becomes_a_sample():
    got = by_name(samples(STATUS, PLAN, COUNTS, DEPLOY, 600, NOW))
    up = {labels["unit"]: value for labels, value in got["sturdy_up"]}
    assert up == {"shop-worker@1.service": True, "shop-worker@2.service": True, "shop-web@1.service": False}
    # A stopped instance runs no build.
    assert [(labels["unit"], labels["build"]) for labels, dummy in got["sturdy_build_info"]] == [
        ("shop-worker@1.service", "b2"), ("shop-worker@2.service", "b1")]
    assert [labels["unit"] for labels, value in got["sturdy_old_release"] if value] == ["shop-worker@2.service"]
    assert (({"app": "shop", "process": "worker", "unit": "shop-worker@1.service"}, 4) in got["sturdy_restarts_total"])
    last_hour = {labels["unit"]: value for labels, value in got["sturdy_restarts_last_hour"]}
    assert last_hour["shop-worker@1.service"] == 3
    # Crashes before a deliberate restart (NRestarts back at 0) are not a crash loop now, as status says.
    calm = {**STATUS, "processes": [{"name": "worker", "instances": [instance("shop-worker@1.service", last_hour=5)]}]}
    assert by_name(samples(calm, PLAN, {}, {}, 600, NOW))["sturdy_restarts_last_hour"][0][1] == 0
    assert got["sturdy_current_build_info"] == [({"app": "shop", "build": "b2"}, 1)]
    # No release config recorded (a host deployed before them): the release is named after its build.
    assert got["sturdy_current_release_info"] == [({"app": "shop", "release": "b2", "build": "b2"}, 1)]
    assert by_name(samples({**STATUS, "release": "b2~3"}, PLAN, {}, {}, 600, NOW))["sturdy_current_release_info"] == [
        ({"app": "shop", "release": "b2~3", "build": "b2"}, 1)]
    assert {labels["queue"]: value for labels, value in got["sturdy_queue_depth"]} == {"default": 3, "mail": 0}
    # An empty queue's oldest message is 0 s old; a queue that cannot be read has no depth, only read_ok 0.
    assert {labels["queue"]: value for labels, value in got["sturdy_queue_oldest_age_seconds"]} == {
        "default": 42.5, "mail": 0.0}
    assert {labels["queue"]: value for labels, value in got["sturdy_queue_read_ok"]} == {
        "default": True, "mail": True, "gone": False}
    assert {labels["queue"]: value for labels, value in got["sturdy_queue_consumers"]} == {"default": 0, "mail": 2}
    # The dead-letter slot: only where the agent reports one.
    assert got["sturdy_queue_dead_letter_depth"] == [({"app": "shop", "queue": "default"}, 2)]
    # RQ's failed job registry: only where the agent reads one (an RQ queue).
    assert got["sturdy_queue_failed_jobs"] == [({"app": "shop", "queue": "mail"}, 4)]
    tasks = {(labels["unit"], labels["build"], labels["outcome"]): value for labels, value in got["sturdy_tasks_total"]}
    w1, w2 = "shop-worker@1.service", "shop-worker@2.service"
    assert tasks[(w1, "b2", "succeeded")] == 5 and tasks[(w2, "b2", "succeeded")] == 3
    assert tasks[(w1, "b2", "failed")] == 1 and tasks[(w1, "b1", "retried")] == 1
    assert all(labels["process"] == "worker" for labels, dummy in got["sturdy_tasks_total"])
    assert got["sturdy_last_deploy_success"] == [({"app": "shop"}, False)]
    assert got["sturdy_last_deploy_info"] == [({"app": "shop", "build": "b2", "result": "rolled_back"}, 1)]
    assert got["sturdy_queue_age_limit_seconds"] == [({"app": "shop"}, 600.0)]


def test_no_deploy_record_no_deploy_metrics():
    got = by_name(samples({"current": None, "processes": [], "queues": []}, PLAN, {}, {}, 600, NOW))
    assert "sturdy_last_deploy_success" not in got and "sturdy_current_build_info" not in got
    assert got["sturdy_metrics_timestamp_seconds"] == [({"app": "shop"}, NOW)]


def test_text_has_help_and_type_once_and_escapes_labels():
    text = metrics_text([("sturdy_queue_depth", {"app": "shop", "queue": 'a"b\\c\nd'}, 3),
                         ("sturdy_queue_depth", {"app": "shop", "queue": "x"}, 0),
                         ("sturdy_up", {"app": "shop", "process": "w", "unit": "u"}, True)])
    lines = text.splitlines()
    assert lines.count("# TYPE sturdy_queue_depth gauge") == 1
    assert 'sturdy_queue_depth{app="shop",queue="a\\"b\\\\c\\nd"} 3' in lines
    assert 'sturdy_up{app="shop",process="w",unit="u"} 1' in lines
    assert lines.index("# TYPE sturdy_up gauge") < lines.index('sturdy_up{app="shop",process="w",unit="u"} 1')


def test_counts_are_read_per_unit_and_a_broken_file_is_skipped(tmp_path):
    (tmp_path / "shop-worker@1.service.json").write_text(json.dumps({"b2": {"succeeded": 1}}))
    (tmp_path / "shop-worker@2.service.json").write_text("{half")
    assert read_counts(str(tmp_path)) == {"shop-worker@1.service": {"b2": {"succeeded": 1}}}
    assert read_counts(str(tmp_path / "missing")) == {}


def promtool():
    for candidate in [shutil.which("promtool"), *(str(p / ".build/promtool/usr/bin/promtool")
                                                  for p in Path(__file__).resolve().parents)]:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("promtool not found: run `make promtool` (Debian's prometheus package, unpacked into .build)")
    return None


def test_promtool_check_metrics_finds_nothing_to_fix():
    text = metrics_text(samples(STATUS, PLAN, COUNTS, DEPLOY, 600, NOW))
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


def test_a_paused_queue_says_so():
    paused = {**STATUS, "queues": [{"queue": "default", "depth": 3, "consumers": [], "paused": True}]}
    got = by_name(samples(paused, PLAN, {}, {}, 600, NOW))
    assert got["sturdy_queue_paused"] == [({"app": "shop", "queue": "default"}, True)]
    assert by_name(samples(STATUS, PLAN, {}, {}, 600, NOW))["sturdy_queue_paused"][0][1] is False
