from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import UNIT_PROCESS_EXIT
from ansible_collections.sturdy.workers.plugins.modules import app_status

PLAN = plan("shop", root="/nonexistent/shop", processes=[{"name": "worker", "command": ["bin/shop-worker"]}])
SHOW = ("Id=shop-worker@1.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\nResult=signal\n"
        "NRestarts=0\nMainPID=0\nExecMainStartTimestampMonotonic=0\nUnitFileState=enabled\nEnvironment=\n")
EXIT = json.dumps({"UNIT": "shop-worker@1.service", "MESSAGE_ID": UNIT_PROCESS_EXIT, "EXIT_CODE": "killed",
                   "EXIT_STATUS": "9", "__REALTIME_TIMESTAMP": "1000000"})


def test_reads_units_and_journal_and_changes_nothing(run_module):
    result, calls = run_module(app_status, {"plan": PLAN, "_ansible_check_mode": True}, [
        (["/usr/bin/systemctl", "--version"], (0, "systemd 257 (257.13)\n", "")),
        (["/usr/bin/systemctl", "list-units"], (0, "shop-worker@1.service loaded failed failed shop worker\n", "")),
        (["/usr/bin/systemctl", "show"], (0, SHOW, "")),
        # journalctl's exit status is not an error: no match may exit 1.
        (["/usr/bin/systemctl", "--no-pager", "-o", "json"], (1, EXIT + "\n", "")),
    ], bin_path="/usr/bin/systemctl")
    # get_bin_path answers one path for every tool in this harness; the calls name the tool by argv[1:].
    assert result["changed"] is False and result["systemd_version"] == 257
    inst = result["processes"][0]["instances"][0]
    assert inst["state"] == "failed" and inst["last_exit"]["words"].startswith("killed by SIGKILL")
    assert "/nonexistent/shop/current does not point at a release" in result["problems"][0]
    assert "shop-worker@1.service is declared but failed (signal: it was killed by a signal; last exit: killed by "\
           "SIGKILL" in result["problems"][1]
    assert all(c[1] in ("--version", "list-units", "show", "--no-pager") for c in calls)


def test_a_plan_from_elsewhere_is_refused(run_module):
    result, dummy = run_module(app_status, {"plan": {"app": "shop"}})
    assert result["failed"] and "pass the output of the sturdy.workers.app_plan filter" in result["msg"]


# systemd on a host with one instance and nothing in its journal.
QUIET = [(["/usr/bin/systemctl", "--version"], (0, "systemd 257 (257.13)\n", "")),
         (["/usr/bin/systemctl", "list-units"], (0, "", "")),
         (["/usr/bin/systemctl", "show"], (0, SHOW, "")),
         (["/usr/bin/systemctl", "--no-pager", "-o", "json"], (1, "", ""))]


def read_host(run_module, root) -> dict:
    planned = plan("shop", root=str(root), processes=[{"name": "worker", "command": ["bin/shop-worker"]}])
    return run_module(app_status, {"plan": planned}, QUIET, bin_path="/usr/bin/systemctl")[0]


def test_the_maintenance_lock_is_read_and_null_without_one(run_module, tmp_path):
    assert read_host(run_module, tmp_path)["maintenance"] is None
    (tmp_path / ".maintenance.lock").write_text(json.dumps({"owner": "alice@ci-7", "message": "Postgres upgrade"}))
    assert read_host(run_module, tmp_path)["maintenance"] == {"owner": "alice@ci-7", "message": "Postgres upgrade"}


def test_the_last_run_recorded_on_the_host_and_the_pause_are_returned(run_module, tmp_path):
    got = read_host(run_module, tmp_path)
    assert got["last_run"] is None and got["paused"] is None
    (tmp_path / "history.jsonl").write_text("".join(json.dumps({"run": r, "kind": "deploy"}) + "\n"
                                                    for r in ("deploy-1", "deploy-2")))
    (tmp_path / ".paused").write_text(json.dumps({"owner": "bob", "processes": []}))
    got = read_host(run_module, tmp_path)
    assert got["last_run"] == {"run": "deploy-2", "kind": "deploy"} and got["paused"]["owner"] == "bob"


def test_the_queue_read_tells_the_agent_how_many_consumers_to_wait_for(run_module, tmp_path):
    (tmp_path / "releases" / "b2").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "b2")
    planned = plan("shop", root=str(tmp_path), processes=[
        {"name": "worker", "command": ["bin/shop-worker"], "adapter": "celery", "celery_app": "shop.celery",
         "queues": ["default"]}])
    answer = json.dumps([{"queue": "default", "depth": 0, "consumers": ["w1", "w2", "w3"]}])

    def read(consumers: int) -> tuple[list[str], dict]:
        got, calls = run_module(app_status, {"plan": planned, "consumers": consumers},
                                [*QUIET, (["/usr/bin/systemctl", "--property=RuntimeMaxSec=60"], (0, answer + "\n", ""))],
                                bin_path="/usr/bin/systemctl")
        agent = [c for c in calls if "sturdy_agent" in c]
        assert len(agent) == 1 and agent[0][-3:] == ["--celery-app", "shop.celery", "default"], agent
        return [a for a in agent[0] if a.startswith("--setenv=")], got

    # The deploy knows how many Celery workers its run has: the agent stops waiting once they answered.
    setenv, got = read(3)
    assert "--setenv=STURDY_CONSUMERS_EXPECTED=3" in setenv and got["queues"][0]["consumers"] == ["w1", "w2", "w3"]
    # Without a count (the status, the metrics) it waits out the timeout, as an agent of an older release does.
    setenv, got = read(0)
    assert not [s for s in setenv if "CONSUMERS" in s]
