from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.modules import deploy_lock, maintenance_lock


def test_hold_query_and_release_and_the_deploy_lock_refuses_meanwhile(run_module, tmp_path):
    path = str(tmp_path / ".maintenance.lock")
    args = {"path": path, "owner": "alice@ci-7", "reason": "Postgres upgrade"}
    result, dummy = run_module(maintenance_lock, args | {"_ansible_check_mode": True})
    assert result["changed"] and not (tmp_path / ".maintenance.lock").exists()
    result, dummy = run_module(maintenance_lock, args)
    assert result["changed"] and result["holder"] == {}
    result, dummy = run_module(maintenance_lock, {"path": path, "state": "query"})
    assert not result["changed"] and result["holder"]["message"] == "Postgres upgrade"
    assert result["text"].startswith("locked for maintenance by alice@ci-7 since ")
    seen, dummy = run_module(deploy_lock, {"path": str(tmp_path / ".deploy.lock"), "run_id": "r", "state": "query"})
    assert seen["maintenance"]["owner"] == "alice@ci-7"
    refused, dummy = run_module(deploy_lock, {"path": str(tmp_path / ".deploy.lock"), "run_id": "r", "kind": "restart"})
    assert refused["failed"] and refused["msg"].startswith("Restart refused: locked for maintenance by alice@ci-7")
    assert not (tmp_path / ".deploy.lock").exists()
    result, dummy = run_module(maintenance_lock, {"path": path, "state": "absent"})
    assert result["changed"] and result["holder"]["owner"] == "alice@ci-7"
    assert not (tmp_path / ".maintenance.lock").exists()


def test_an_empty_or_multiline_message_is_refused_and_nothing_is_written(run_module, tmp_path):
    path = str(tmp_path / ".maintenance.lock")
    for message in ("", "  ", "two\nlines"):
        result, dummy = run_module(maintenance_lock, {"path": path, "owner": "a", "reason": message})
        assert result["failed"] and not (tmp_path / ".maintenance.lock").exists(), result


def test_one_time_for_every_host_and_a_host_without_the_app_is_refused(run_module, tmp_path):
    path = tmp_path / "shop" / ".maintenance.lock"
    args = {"path": str(path), "owner": "a", "reason": "r", "started": 1_800_000_000.0}
    result, dummy = run_module(maintenance_lock, args)
    assert result["failed"] and "does not exist: the app was never deployed on this host" in result["msg"]
    seen, dummy = run_module(maintenance_lock, {"path": str(path), "state": "query"})
    assert seen["directory"] is False and seen["holder"] == {}
    path.parent.mkdir()
    result, dummy = run_module(maintenance_lock, args)
    assert result["changed"] and __import__("json").loads(path.read_text())["started"] == "2027-01-15T08:00:00+00:00"
