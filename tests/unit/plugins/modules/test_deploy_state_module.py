from __future__ import annotations

import json
import os

from ansible_collections.sturdy.workers.plugins.modules import deploy_state

BUILD = "2026.11.29-2"


def systemd(active="active"):
    return [
        (["/usr/bin/systemctl", "--version"], (0, "systemd 257 (257.9)\n", "")),
        (["/usr/bin/systemctl", "show", "--property=Wants,ConsistsOf"], (0, "shop-worker@1.service\n\n", "")),
        (["/usr/bin/systemctl", "show"],
         (0, f"Id=shop-worker@1.service\nActiveState={active}\nMainPID=0\nNeedDaemonReload=no\n", "")),
    ]


def installed(root, build=BUILD):
    release = root / "releases" / build
    release.mkdir(parents=True)
    (release / "RELEASE.json").write_text(json.dumps({"checksum": "c"}))
    os.symlink(f"releases/{build}", root / "current")


def test_records_a_success_then_finds_nothing_different_and_names_what_changed(run_module, tmp_path):
    root, unit = tmp_path / "srv", tmp_path / "shop-worker@.service"
    root.mkdir()
    installed(root)
    unit.write_text("[Service]\n")
    common = {"root": str(root), "build_id": BUILD, "fingerprint": "f" * 64, "files": [str(tmp_path / "shop-*")]}
    result, calls = run_module(deploy_state, {**common, "state": "present", "result": "success", "run_id": "r",
                                              "finished": 1.5})
    assert result["changed"] is True and calls == []
    assert json.loads((root / ".last-deploy.json").read_text()) == {"build": BUILD, "result": "success",
                                                                    "finished": 1.5, "run": "r"}
    assert (os.stat(root / ".deployed.json").st_mode & 0o777) == 0o600
    query = {**common, "target": "shop.target", "units": ["shop-worker@1.service"], "_ansible_check_mode": True}
    result, dummy = run_module(deploy_state, query, systemd())
    assert (result["same"], result["why"], result["recorded_build"], result["current"]) == (True, "", BUILD, BUILD)
    assert result["units"]["shop-worker@1.service"]["Cwd"] is None and result["members"] == ["shop-worker@1.service"]
    unit.write_text("[Service]\nKillMode=process\n")
    result, dummy = run_module(deploy_state, query, systemd())
    assert (result["same"], result["why"]) == (False, f"{unit} changed since the last deploy")
    unit.write_text("[Service]\n")
    result, dummy = run_module(deploy_state, query, systemd("inactive"))
    assert (result["same"], result["why"]) == (False, "shop-worker@1.service is inactive")
    # A failed deploy records its result for the metrics, and leaves the last success's record alone.
    result, dummy = run_module(deploy_state, {**common, "fingerprint": "g" * 64, "state": "present",
                                              "result": "failed"})
    assert json.loads((root / ".last-deploy.json").read_text())["result"] == "failed"
    assert json.loads((root / ".deployed.json").read_text())["fingerprint"] == "f" * 64


def test_without_a_record_or_a_complete_release_it_differs(run_module, tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    query = {"root": str(root), "build_id": BUILD, "target": "shop.target", "units": ["shop-worker@1.service"]}
    result, dummy = run_module(deploy_state, query, systemd())
    assert (result["same"], result["why"], result["recorded_build"]) == (False, "no successful deploy is recorded here", "")
    assert result["current"] is None
    os.symlink("/etc", root / "current")
    result, dummy = run_module(deploy_state, query, systemd())
    assert result["same"] is False and "is not a release under" in result["why"]


def test_check_mode_writes_nothing(run_module, tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    result, dummy = run_module(deploy_state, {"root": str(root), "build_id": BUILD, "state": "present",
                                              "_ansible_check_mode": True})
    assert result["changed"] is False and list(root.iterdir()) == []


def test_the_record_starts_the_collector_without_waiting_and_a_refused_start_fails_nothing(run_module, tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    args = {"root": str(root), "build_id": BUILD, "state": "present", "result": "failed",
            "collect": "shop-metrics.service"}
    start = ["/usr/bin/systemctl", "start", "--no-block", "--", "shop-metrics.service"]
    result, calls = run_module(deploy_state, args, [(start, (0, "", ""))])
    assert calls == [start] and result["collect_error"] == "" and not result.get("failed")
    assert json.loads((root / ".last-deploy.json").read_text())["result"] == "failed"
    result, dummy = run_module(deploy_state, args, [(start, (5, "", "Unit shop-metrics.service not found.\n"))])
    assert result["collect_error"] == "Unit shop-metrics.service not found." and not result.get("failed")
    result, calls = run_module(deploy_state, {**args, "_ansible_check_mode": True})
    assert calls == [] and "collect_error" not in result


def test_the_query_returns_the_lock_holder_and_the_end_of_a_deploy_reads_the_instances_and_releases_only_its_lock(
        run_module, tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    query = {"root": str(root), "build_id": BUILD, "target": "shop.target", "units": ["shop-worker@1.service"]}
    result, dummy = run_module(deploy_state, query, systemd())
    assert result["lock_holder"] == {}
    holder = {"run_id": "deploy-1", "owner": "ops@ci", "build_id": BUILD, "renewed": 1.0}
    (root / ".deploy.lock").write_text(json.dumps(holder))
    result, dummy = run_module(deploy_state, query, systemd())
    assert result["lock_holder"]["run_id"] == "deploy-1"
    end = {"root": str(root), "build_id": BUILD, "state": "present", "result": "success", "target": "shop.target"}
    # Another run's lock is left alone; the instances are read after the record is written.
    result, dummy = run_module(deploy_state, {**end, "unlock": "deploy-2"}, systemd())
    assert result["unlocked"] is False and (root / ".deploy.lock").exists()
    assert result["members"] == ["shop-worker@1.service"] and result["units"]["shop-worker@1.service"]["ActiveState"] == "active"
    assert json.loads((root / ".last-deploy.json").read_text())["result"] == "success"
    # Check mode keeps the lock.
    result, dummy = run_module(deploy_state, {**end, "unlock": "deploy-1", "_ansible_check_mode": True}, systemd())
    assert result["unlocked"] is False and (root / ".deploy.lock").exists()
    result, dummy = run_module(deploy_state, {**end, "unlock": "deploy-1"}, systemd())
    assert result["unlocked"] is True and not (root / ".deploy.lock").exists()


def test_the_end_of_a_deploy_appends_its_history_entry_once(run_module, tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    entry = {"run": "deploy-1", "kind": "deploy", "host": "w1", "from": "b1", "to": BUILD, "result": "failed",
             "summary": "deploy shop: stopped before the switch"}
    args = {"root": str(root), "build_id": BUILD, "state": "present", "result": "failed", "history": entry}
    run_module(deploy_state, {**args, "_ansible_check_mode": True})
    assert not (root / "history.jsonl").exists()
    run_module(deploy_state, args)
    [line] = (root / "history.jsonl").read_text().splitlines()
    assert json.loads(line)["summary"] == entry["summary"] and json.loads(line)["result"] == "failed"
