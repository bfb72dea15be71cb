from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.deploy_report import deploy_report

RUN = {"id": "r1", "owner": "ci@box", "started": 1000.0, "batches": [1, "100%"]}
PLAN = {"app": "shop", "build_id": "2", "target": "shop.target"}


def record(before_inv="a", after_inv="b", failure="", rolled_back=None, switched=True, rollback_failure=None):
    return {
        "switch": {"changed": switched, "previous": "1", "current": "2"},
        "marks": {"preflight": 1010.0, "install": 1030.0, "migrate": 1035.0, "restart": 1060.0},
        "before": {"shop-worker@1.service": {"NRestarts": "3", "InvocationID": before_inv}},
        "after": {"shop-worker@1.service": {"NRestarts": "0", "InvocationID": after_inv, "ActiveState": "active"}},
        "smoke": [{"instances": [{"unit": "shop-worker@1.service", "latency": 0.05, "answer": {"build_id": "2"}}]}],
        "restarted": [{"name": "shop-worker@1.service", "seconds": 4.2, "stop_seconds": 3.1}],
        "failure": failure,
        "rolled_back_to": rolled_back,
        "rollback_failure": rollback_failure,
    }


def test_success_report_has_builds_phases_restarts_and_latency():
    rep = deploy_report({"h1": record()}, RUN, PLAN, 1070.0)
    assert rep["result"] == "success" and rep["seconds"] == 70.0 and rep["message"] == ""
    assert rep["batches"] == [1, "100%"]
    assert rep["phases"] == {"preflight": 10.0, "install": 20.0, "migrate": 5.0, "restart": 25.0, "finish": 10.0}
    inst = rep["hosts"]["h1"]["instances"]["shop-worker@1.service"]
    assert inst == {"nrestarts_before": "3", "nrestarts_after": "0", "restarted": True, "started": False,
                    "restart_seconds": 4.2,
                    "stop_seconds": 3.1, "stop_timed_out": False,
                    "active": "active", "scaled_down": False, "smoke_build": "2", "smoke_latency": 0.05, "smoke_ran_in": None,
                    "smoke_busy": [], "settings": {}}
    assert rep["hosts"]["h1"]["from"] == "1" and rep["hosts"]["h1"]["to"] == "2"
    assert rep["summary"][0].startswith("deploy shop 2: success in 70.0s")
    assert "restarted in 4.2s (its stop waited 3.1s for running tasks)" in rep["summary"][2]
    # A stop that used its whole TimeoutStopSec= killed what still ran: the summary says so, and what happens next.
    killed = record()
    killed["restarted"][0]["stop_timed_out"] = True
    rep = deploy_report({"h1": killed}, RUN, PLAN, 1070.0)
    assert rep["hosts"]["h1"]["instances"]["shop-worker@1.service"]["stop_timed_out"] is True
    assert ("restarted in 4.2s (its stop waited 3.1s, its whole TimeoutStopSec=, and systemd SIGKILLed the tasks "
            "still running: with acks_late the broker hands them out again, to run from the start)") in rep["summary"][2]


def test_failure_and_rollback_are_reported():
    rep = deploy_report({"h1": record(failure="h1: boom", rolled_back="1"), "h2": record(after_inv="a")}, RUN, PLAN,
                        1070.0)
    assert rep["result"] == "rolled_back" and rep["failures"] == ["h1: boom"]
    assert rep["hosts"]["h2"]["instances"]["shop-worker@1.service"]["restarted"] is False
    assert rep["message"] == ("Deploy of 2 failed: h1: boom Rolled back to 1 on the switched hosts, code and config; "
                              "the bad release stays under releases/ for inspection.")
    failed = deploy_report({"h1": record(failure="h1: boom")}, RUN, PLAN, 1070.0)
    assert failed["summary"][0].startswith("deploy shop 2: failed in 70.0s") and failed["summary"][-1] == "FAILED: h1: boom"


def test_the_message_says_why_nothing_was_rolled_back():
    rep = deploy_report({"h1": record(failure="h1: boom", switched=False)}, RUN, PLAN, 1070.0)
    assert "Nothing was rolled back: no host was switched" in rep["message"]
    off = deploy_report({"h1": record(failure="h1: boom")}, RUN, PLAN, 1070.0, rollback=False)
    assert off["message"].endswith("Not rolled back (sturdy_deploy_rollback=false).")


def test_a_failed_rollback_names_the_host_and_what_to_do():
    broken = {"task": "Restart", "msg": "shop-worker@1.service did not come up.", "current": "1"}
    rep = deploy_report({"h1": record(failure="h1: boom", rollback_failure=broken)}, RUN, PLAN, 1070.0)
    assert ("ROLLBACK FAILED on h1 at 'Restart': shop-worker@1.service did not come up. current points at 1; check "
            "the units (systemctl status shop.target) and restart them by hand.") in rep["message"]
    assert "Nothing was rolled back" not in rep["message"]


def test_the_report_shows_each_queues_backlog_its_drain_time_and_dead_letters():
    queues = [{"queue": "default", "depth": 1200, "oldest_age": 95.0, "dead_letter_depth": 2, "consumers": ["w@a"],
               "rate_limit": 20, "drain_seconds": 60.0},
              {"queue": "mail", "depth": 0, "dead_letter_depth": 0, "consumers": ["w@a"]},
              {"queue": "bulk", "error": "ConnectionRefusedError: [Errno 111]"}]
    rep = deploy_report({"h1": dict(record(), queues=queues), "h2": record()}, RUN, PLAN, 1070.0)
    assert rep["queues"]["default"] == {"depth": 1200, "oldest_age": 95.0, "dead_letter_depth": 2, "consumers": ["w@a"],
                                        "rate_limit": 20, "drain_seconds": 60.0, "error": None, "smoke": None}
    assert rep["summary"][-3:] == [
        "queue default: 1200 waiting, the oldest for 1min, drains in 1min at the soonest (rate_limit 20/s), "
        "2 dead letter(s) (ansible-playbook sturdy.workers.dead_letters lists them)",
        "queue mail: 0 waiting",
        "queue bulk: not read (ConnectionRefusedError: [Errno 111])",
    ]
    assert deploy_report({"h1": record()}, RUN, PLAN, 1070.0)["queues"] == {}


def test_the_report_says_how_each_instance_and_queue_was_proven_under_a_backlog():
    busy = record()
    running = [{"id": "t1", "name": "shop.sleep", "running_for": 6.5}]
    busy["smoke"][0]["instances"][0]["answer"].update(ran_in="worker", busy=running)
    consumers = [{"node": "worker1@a", "build_id": "2"}, {"node": "worker2@a", "build_id": "2"}]
    busy.update(queues=[{"queue": "default", "depth": 40}, {"queue": "mail", "depth": 0}],
                queue_smoke=[{"queue": "default", "ok": True, "backlog": 41, "consumers": consumers},
                             {"queue": "mail", "ok": True, "latency": 0.2, "answer": {"build_id": "2"}}])
    rep = deploy_report({"h1": busy}, RUN, PLAN, 1070.0)
    inst = rep["hosts"]["h1"]["instances"]["shop-worker@1.service"]
    assert inst["smoke_ran_in"] == "worker" and inst["smoke_busy"][0]["name"] == "shop.sleep"
    assert ("smoke 2 in 0.05s (answered by the worker: every slot busy with 1 task(s), the longest running 6.5s)"
            in rep["summary"][2])
    assert rep["summary"][-2:] == [
        "queue default: 40 waiting, no smoke job sent behind the 41 then waiting: consumed by 2 worker(s) on build 2",
        "queue mail: 0 waiting, smoke job answered by build 2 in 0.2s",
    ]


def test_a_queue_the_status_does_not_read_still_shows_its_smoke_job():
    # An RQ queue: the deploy smoke-tested it, app_status did not read it (no depth): no "0 waiting" made up.
    rq = dict(record(), queue_smoke=[{"queue": "parcel.scales", "ok": True, "latency": 0.1, "answer": {"build_id": "2"}}])
    rep = deploy_report({"h1": rq}, RUN, PLAN, 1070.0)
    assert rep["queues"]["parcel.scales"]["smoke"]["ok"] is True
    assert rep["summary"][-1] == "queue parcel.scales: smoke job answered by build 2 in 0.1s"


def test_a_surge_instance_is_reported_apart_from_the_declared_ones():
    rec = record()
    rec["after"]["shop-worker@2.service"] = {"NRestarts": "0", "InvocationID": "s", "ActiveState": "deactivating"}
    rec["surge"] = [{"name": "shop-worker@2.service", "ready_seconds": 1.5}]
    rep = deploy_report({"h1": rec}, RUN, PLAN, 1070.0)
    assert list(rep["hosts"]["h1"]["instances"]) == ["shop-worker@1.service"]
    assert rep["hosts"]["h1"]["surge"] == rec["surge"]
    assert ("  shop-worker@2.service: surge, ready in 1.5s before any instance was stopped; told to stop once they "
            "were back (it finishes its running tasks, then exits)") in rep["summary"]


def test_an_instance_that_did_not_run_before_is_started_not_restarted():
    # A first deploy (or a new instance): no invocation before, one after.
    rep = deploy_report({"h1": record(before_inv="")}, RUN, PLAN, 1070.0)
    inst = rep["hosts"]["h1"]["instances"]["shop-worker@1.service"]
    assert (inst["restarted"], inst["started"]) == (False, True)
    assert rep["summary"][2].startswith("  shop-worker@1.service: active, started, NRestarts"), rep["summary"]


def test_a_unit_gone_after_the_deploy_was_not_restarted():
    # A surge instance of an earlier deploy, loaded before this one and garbage-collected since.
    rec = record()
    rec["before"]["shop-worker@3.service"] = {"NRestarts": "0", "InvocationID": "old-surge"}
    rep = deploy_report({"h1": rec}, RUN, PLAN, 1070.0)
    assert rep["hosts"]["h1"]["instances"]["shop-worker@3.service"]["restarted"] is False


def test_an_instance_running_before_and_no_longer_declared_is_reported_scaled_down():
    rec = record()
    rec["before"]["shop-worker@2.service"] = {"NRestarts": "1", "InvocationID": "x", "ActiveState": "active"}
    rep = deploy_report({"h1": rec}, RUN, PLAN, 1070.0)
    assert rep["hosts"]["h1"]["instances"]["shop-worker@2.service"]["scaled_down"] is True
    assert "  shop-worker@2.service: stopped (scaled down: no longer declared), NRestarts 1 before" in rep["summary"]
    assert not any("state unknown" in line for line in rep["summary"]), rep["summary"]
    # Without a read of the instances after the deploy, nothing is said to be stopped.
    rec["after"] = {}
    rep = deploy_report({"h1": rec}, RUN, PLAN, 1070.0)
    assert rep["hosts"]["h1"]["instances"]["shop-worker@2.service"]["scaled_down"] is False


def test_an_unchanged_host_says_nothing_was_done_and_a_full_redeploy_says_why():
    same = {k: v for k, v in record(after_inv="a").items() if k not in ("switch", "restarted")}
    again = {**record(), "differs": "/etc/shop/shop.env changed since the last deploy",
             "switch": {"changed": True, "previous": "2", "current": "2"}}
    # A switch from another build is a deploy, whatever the record of the last one says.
    other = deploy_report({"h1": {**record(), "differs": "current names 1"}}, RUN, PLAN, 1070.0)
    assert "h1: 1 -> 2" in other["summary"], other["summary"]
    rep = deploy_report({"h1": {**same, "unchanged": True}, "h2": again}, RUN, PLAN, 1070.0)
    assert rep["result"] == "success"
    h1, h2 = rep["hosts"]["h1"], rep["hosts"]["h2"]
    assert (h1["unchanged"], h1["from"], h1["to"], h1["switched"], h1["differs"]) == (True, "2", "2", False, "")
    assert h1["instances"]["shop-worker@1.service"]["restarted"] is False
    assert (h2["unchanged"], h2["differs"]) == (False, "/etc/shop/shop.env changed since the last deploy")
    assert ("h1: 2, unchanged since its last deploy: nothing installed, written or restarted, the instances proven by "
            "their smoke jobs (-e sturdy_deploy_force=true redoes every step)") in rep["summary"]
    assert "h2: 2 -> 2, again in full (/etc/shop/shop.env changed since the last deploy)" in rep["summary"]


def test_a_queue_read_on_one_host_and_smoke_tested_from_another_shows_both():
    # Each queue is read from one host (queue_readers); the real-queue smoke goes out from another.
    reader = dict(record(), queues=[{"queue": "default", "depth": 3}])
    smoker = dict(record(), queue_smoke=[{"queue": "default", "ok": True, "latency": 0.2, "answer": {"build_id": "2"}}])
    for records in ({"h1": reader, "h2": smoker}, {"h1": smoker, "h2": reader}):
        rep = deploy_report(records, RUN, PLAN, 1070.0)
        assert rep["queues"]["default"]["depth"] == 3 and rep["queues"]["default"]["smoke"]["ok"] is True, rep["queues"]
