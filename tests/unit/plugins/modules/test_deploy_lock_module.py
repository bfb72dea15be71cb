from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.modules import deploy_lock


def test_takes_and_releases_the_lock(run_module, tmp_path):
    path = str(tmp_path / ".deploy.lock")
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r1", "owner": "me@ci", "build_id": "2"})
    assert result["changed"] and json.loads(open(path).read())["owner"] == "me@ci"
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r1", "state": "absent"})
    assert result["changed"] and not (tmp_path / ".deploy.lock").exists()


def test_refuses_another_runs_lock_naming_it(run_module, tmp_path):
    path = str(tmp_path / ".deploy.lock")
    run_module(deploy_lock, {"path": path, "run_id": "r1", "owner": "me@ci", "build_id": "2"})
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r2", "_ansible_check_mode": True})
    assert result["failed"] and "Another deploy is running" in result["msg"] and result["holder"]["run_id"] == "r1"


def test_check_mode_takes_nothing(run_module, tmp_path):
    path = tmp_path / ".deploy.lock"
    result, dummy = run_module(deploy_lock, {"path": str(path), "run_id": "r1", "_ansible_check_mode": True})
    assert result["changed"] and not path.exists()


def test_breaking_a_stale_lock_warns(run_module, tmp_path):
    path = tmp_path / ".deploy.lock"
    path.write_text(json.dumps({"run_id": "old", "owner": "bob", "started_epoch": 1}))
    result, dummy = run_module(deploy_lock, {"path": str(path), "run_id": "r1", "break_stale": True})
    assert result["changed"] and any("Took over the deploy lock" in w for w in result["warnings_given"])


def test_a_live_deploys_lock_is_never_taken_over_and_a_dead_ones_only_with_the_flag(run_module, tmp_path):
    path = str(tmp_path / ".deploy.lock")
    run_module(deploy_lock, {"path": path, "run_id": "r1", "owner": "me@ci", "build_id": "2"})
    alive = {"r1": {"alive": True, "why": "its ansible-playbook process 7 on ctl is running"}}
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r2", "break_stale": True, "verdicts": alive})
    assert result["failed"] and "Another deploy is running" in result["msg"] and "process 7 on ctl is running" in result["msg"]
    dead = {"r1": {"alive": False, "why": "its ansible-playbook process 7 on ctl is gone"}}
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r2", "verdicts": dead})
    assert result["failed"] and "held by a DEAD deploy" in result["msg"] and "sturdy_deploy_break_lock=true" in result["msg"]
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r2", "break_stale": True, "verdicts": dead,
                                             "controller": {"host": "ctl", "pid": 8}})
    assert result["changed"] and json.loads(open(path).read())["controller"] == {"host": "ctl", "pid": 8}
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "x", "state": "query"})
    assert not result["changed"] and result["holder"]["run_id"] == "r2"


def test_releasing_the_lock_appends_the_runs_history_entry_beside_it(run_module, tmp_path):
    path = str(tmp_path / ".deploy.lock")
    run_module(deploy_lock, {"path": path, "run_id": "r1", "owner": "me@ci", "kind": "restart"})
    entry = {"run": "r1", "kind": "restart", "host": "w1", "from": "b2", "to": "b2", "result": "success"}
    run_module(deploy_lock, {"path": path, "run_id": "r1", "state": "absent", "history": entry,
                             "_ansible_check_mode": True})
    assert not (tmp_path / "history.jsonl").exists()
    result, dummy = run_module(deploy_lock, {"path": path, "run_id": "r1", "state": "absent", "history": entry})
    assert result["changed"] and not (tmp_path / ".deploy.lock").exists()
    [line] = (tmp_path / "history.jsonl").read_text().splitlines()
    assert {k: v for k, v in json.loads(line).items() if k != "finished"} == entry
