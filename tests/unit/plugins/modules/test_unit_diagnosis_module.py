from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import UNIT_PROCESS_EXIT
from ansible_collections.sturdy.workers.plugins.modules import unit_diagnosis

PLAN = plan("shop", root="/nonexistent/shop", processes=[{"name": "worker", "command": ["bin/shop-worker"]}])
SHOW = "Id=shop-worker@1.service\nLoadState=loaded\nActiveState=failed\nResult=exit-code\nNRestarts=0\n"
DEATH = json.dumps({"MESSAGE_ID": UNIT_PROCESS_EXIT, "EXIT_CODE": "exited", "EXIT_STATUS": "1", "INVOCATION_ID": "i1",
                    "__REALTIME_TIMESTAMP": "1000000000"})
LOG = "\n".join(json.dumps({"MESSAGE": m, "_SYSTEMD_INVOCATION_ID": "i1", "__REALTIME_TIMESTAMP": "999000000"})
                for m in ["Traceback (most recent call last):", '  File "w.py", line 3', "KeyError: 'BROKER_URL'"])


def journal(argv):
    if "_PID=1" in argv:
        return 0, DEATH + "\n", ""
    if "_SYSTEMD_INVOCATION_ID=i1" in argv:
        return 0, LOG + "\n", ""
    return 0, "", ""  # the kernel log


def test_every_unit_in_trouble_is_diagnosed_read_only(run_module):
    result, calls = run_module(unit_diagnosis, {"plan": PLAN, "_ansible_check_mode": True}, [
        (["/usr/bin/systemctl", "list-units"], (0, "", "")),
        (["/usr/bin/systemctl", "show"], (0, SHOW, "")),
        (["/usr/bin/systemctl", "--no-pager"], journal),
        (["/usr/bin/systemctl", "--sync"], (0, "", "")),
    ])
    assert result["changed"] is False
    (d,) = result["diagnoses"]
    assert d["cause"] == "it exited (exited with status 1) after a Python exception: KeyError: 'BROKER_URL'"
    assert any("next: fix the error the traceback shows" in line for line in result["summary"])
    assert all(c[1] in ("list-units", "show", "--no-pager", "--sync") for c in calls)
    # journald writes what it received before the journal is read.
    assert calls.index(["/usr/bin/systemctl", "--sync"]) < next(i for i, c in enumerate(calls) if "_PID=1" in c)


def test_a_unit_of_another_app_is_refused(run_module):
    result, dummy = run_module(unit_diagnosis, {"plan": PLAN, "units": ["sshd.service"]}, [
        (["/usr/bin/systemctl", "show"], (0, "Id=sshd.service\nLoadState=loaded\n", "")),
    ])
    assert result["failed"] and "sshd.service is not an instance unit of shop" in result["msg"]


class FakeModule:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def run_command(self, argv, **kwargs):
        self.calls.append(argv)
        return self.answer


def test_the_agent_is_asked_what_became_of_the_interrupted_tasks():
    worker = {"name": "worker", "command": ["bin/shop-worker"], "adapter": "celery", "celery_app": "shop.celery"}
    celery = plan("shop", root="/nonexistent/shop", processes=[worker])
    module = FakeModule((0, 'celery logs a line\n[{"id": "t1", "state": "PENDING", "unacked": true}]\n', ""))
    tasks = unit_diagnosis.with_task_states(module, {"systemd-run": "/usr/bin/systemd-run"}, celery,
                                            "shop-worker@1.service", [{"id": "t1"}, {"id": "t2"}])
    assert tasks[0] == {"id": "t1", "state": "PENDING", "unacked": True}
    assert tasks[1]["error"].startswith("the agent could not be asked (rc 0)")
    argv = module.calls[0]
    assert argv[0] == "/usr/bin/systemd-run" and "--uid=shop" in argv
    assert argv[-5:] == ["tasks", "--celery-app", "shop.celery", "t1", "t2"]


def test_an_rq_workers_jobs_are_asked_of_rq():
    worker = {"name": "worker", "command": ["venv/bin/rq", "worker", "q"], "adapter": "rq"}
    rq = plan("parcel", root="/nonexistent/parcel", processes=[worker])
    module = FakeModule((0, '[{"id": "j1", "rq_status": "failed", "queue": "q"}]\n', ""))
    tasks = unit_diagnosis.with_task_states(module, {"systemd-run": "/usr/bin/systemd-run"}, rq,
                                            "parcel-worker@1.service", [{"id": "j1"}])
    assert tasks == [{"id": "j1", "rq_status": "failed", "queue": "q"}]
    assert module.calls[0][-2:] == ["rq-jobs", "j1"]


def test_a_record_the_agent_closed_is_not_a_task_the_death_interrupted(run_module, tmp_path):
    # Invocation i1 died; one pool process of it had died earlier running a poison task, and the pool replaced it
    # (the agent closed its record); the other record was open at the death.
    records = tmp_path / "shop" / "sturdy-tasks" / "shop-worker@1.service"
    records.mkdir(parents=True)
    (records / "11.json").write_text(json.dumps({"id": "poison-1", "name": "shop.explode", "invocation": "i1",
                                                 "started": 900.0, "ended": 930.0,
                                                 "end": "its pool process died running it"}))
    (records / "12.json").write_text(json.dumps({"id": "long-1", "name": "shop.sleep", "invocation": "i1",
                                                 "started": 990.0}))
    local = plan("shop", root="/nonexistent/shop", processes=[{"name": "worker", "command": ["bin/shop-worker"]}])
    local["task_records"] = str(tmp_path / "shop" / "sturdy-tasks")
    result, dummy = run_module(unit_diagnosis, {"plan": local, "tasks": False}, [
        (["/usr/bin/systemctl", "list-units"], (0, "", "")),
        (["/usr/bin/systemctl", "show"], (0, SHOW, "")),
        (["/usr/bin/systemctl", "--no-pager"], journal),
        (["/usr/bin/systemctl", "--sync"], (0, "", "")),
    ])
    (d,) = result["diagnoses"]
    assert [t["id"] for t in d["running_tasks"]] == ["long-1"], d["running_tasks"]
    assert not any("poison-1" in line for line in result["summary"]), result["summary"]
