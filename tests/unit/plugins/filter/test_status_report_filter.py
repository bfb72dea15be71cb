from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.status_report import status_report


def inst(unit, build, **extra):
    return {"unit": unit, "state": "active", "result": "success", "build": build, "old_release": False,
            "restarts": 0, "restarts_last_hour": 0, "uptime": 90, "last_exit": None, **extra}


def host(current, *procs, problems=()):
    return {"current": current, "processes": [{"name": n, "instances": i} for n, i in procs],
            "problems": list(problems), "systemd_version": 257}


def test_one_build_everywhere_is_ok_and_tabulated():
    rep = status_report({"w1": host("b2", ("worker", [inst("shop-worker@1.service", "b2")])),
                         "web": host("b2", ("web", [inst("shop-web@1.service", "b2")]))}, "shop", 0.0)
    assert rep["problems"] == []
    assert rep["summary"][0] == "shop at 1970-01-01 00:00:00 UTC: OK, no problems"
    assert rep["summary"][1].split() == ["HOST", "UNIT", "STATE", "BUILD", "RESTARTS", "LAST", "HOUR", "UP", "LAST",
                                         "EXIT"]
    assert rep["summary"][3].split()[:4] == ["web", "shop-web@1.service", "active", "b2"]
    assert rep["builds"] == {"b2": ["w1", "web"]}


def test_producer_and_worker_skew_and_a_lost_host_are_problems():
    rep = status_report({
        "w1": host("b1", ("worker", [inst("shop-worker@1.service", "b1")])),
        "web": host("b2", ("web", [inst("shop-web@1.service", "b2")]), problems=["web: something"]),
        "w2": {"unreachable": True, "msg": "ssh: connect to host w2 port 22: No route to host"},
    }, "shop", 0.0)
    text = "\n".join(rep["problems"])
    assert "web: something" in text
    assert "w2: could not be read (unreachable: ssh: connect to host w2" in text
    assert "hosts point current at different builds: b1 on w1; b2 on web" in text
    assert "processes run different builds" in text and "b1: w1 worker; b2: web web" in text
    assert rep["hosts"]["w2"] == {"error": "ssh: connect to host w2 port 22: No route to host"}
    assert any(line.startswith("PROBLEM w2: could not be read") for line in rep["summary"])
    assert "(old)" not in "\n".join(rep["summary"])


def test_queues_are_read_once_and_a_backlog_without_consumers_is_a_problem():
    waiting = {"queue": "default", "depth": 3, "oldest_age": 75.0, "oldest_stamped": True, "oldest_task": "shop.add",
               "consumers": []}
    rep = status_report({"w1": {**host("b2"), "queues": [waiting]},
                         "w2": {**host("b2"), "queues": [{**waiting, "depth": 4}]}}, "shop", 0.0)
    assert rep["queues"]["default"]["host"] == "w1" and rep["queues"]["default"]["depth"] == 3
    assert rep["problems"] == ["queue default has 3 message(s) waiting, the oldest waiting 1min (shop.add) and no worker "
                               "consumes it. Next: are the workers up (the instances above)? Do they listen to it (-Q "
                               "and sturdy_processes[].queues)?"]
    assert any(line.split() == ["default", "3", "1min", "0", "w1"] for line in rep["summary"])


def test_an_old_message_with_consumers_is_a_problem_past_the_limit():
    slow = {"queue": "default", "depth": 40, "oldest_age": 900.0, "consumers": ["celery@w1"]}
    rep = status_report({"w1": {**host("b2"), "queues": [slow]}}, "shop", 0.0, queue_age_limit=600)
    assert "the oldest message has waited 15min (more than 10min) with 40 waiting and 1 consumer(s)" in rep["problems"][0]
    assert status_report({"w1": {**host("b2"), "queues": [slow]}}, "shop", 0.0, queue_age_limit=1000)["problems"] == []


def test_the_dead_letter_column_shows_only_once_a_queue_reports_one():
    plain = {"queue": "default", "depth": 0, "consumers": ["celery@w1"]}
    rep = status_report({"w1": {**host("b2"), "queues": [plain]}}, "shop", 0.0)
    assert not any("DEAD" in line for line in rep["summary"])
    queues = [{**plain, "dead_letter_depth": 7}, {**plain, "queue": "mail"}]
    rep = status_report({"w1": {**host("b2"), "queues": queues}}, "shop", 0.0)
    assert any(line.split() == ["QUEUE", "DEPTH", "OLDEST", "CONSUMERS", "DEAD", "LETTERS", "READ", "ON"]
               for line in rep["summary"])
    assert any(line.split() == ["default", "0", "-", "1", "7", "w1"] for line in rep["summary"])
    assert any(line.split() == ["mail", "0", "-", "1", "-", "w1"] for line in rep["summary"])


def test_dead_letters_are_a_problem_that_names_the_playbook_to_run():
    queue = {"queue": "default", "depth": 0, "consumers": ["celery@w1"], "dead_letter_depth": 3}
    rep = status_report({"w1": {**host("b2"), "queues": [queue]}}, "shop", 0.0)
    (problem,) = rep["problems"]
    assert problem.startswith("queue default has 3 dead letter(s) in sturdy.dead.default: messages its workers could "
                              "not run")
    assert "ansible-playbook sturdy.workers.dead_letters" in problem and "sturdy_dead_letters_action=requeue" in problem
    assert status_report({"w1": {**host("b2"), "queues": [{**queue, "dead_letter_depth": 0}]}}, "shop",
                         0.0)["problems"] == []


def test_a_rate_limited_backlog_shows_its_drain_time_and_an_old_one_blames_the_limit_not_the_workers():
    slow = {"queue": "default", "depth": 2400, "oldest_age": 900.0, "consumers": ["celery@w1"], "rate_limit": 20,
            "drain_seconds": 120.0}
    rep = status_report({"w1": {**host("b2"), "queues": [slow]}}, "shop", 0.0, queue_age_limit=600)
    assert any(line.split() == ["default", "2400", "15min", "1", "20/s,", "2min", "w1"] for line in rep["summary"]), \
        rep["summary"]
    (problem,) = rep["problems"]
    assert "at the declared rate_limit of 20/s it drains in 2min at the soonest" in problem
    assert "raise sturdy_processes[].rate_limit" in problem and "do not keep up" not in problem


def test_a_singleton_must_run_on_exactly_one_host():
    def beat(*units):
        return {"name": "beat", "singleton": True, "instances": [inst(u, "b2") for u in units]}

    def fleet(a, b):
        return {h: {"current": "b2", "processes": [p], "problems": [], "systemd_version": 257}
                for h, p in (("a1", a), ("a2", b))}

    assert status_report(fleet(beat("shop-beat@1.service"), beat()), "shop", 0.0)["problems"] == []
    two = status_report(fleet(beat("shop-beat@1.service"), beat("shop-beat@1.service")), "shop", 0.0)["problems"]
    assert two == [two[0]] and two[0].startswith("the singleton beat runs on 2 hosts (a1, a2)")
    none = status_report(fleet(beat(), beat()), "shop", 0.0)["problems"]
    assert none == [none[0]] and none[0].startswith("the singleton beat runs on no host")


def test_the_live_release_is_named_per_host_with_its_config():
    rep = status_report({"w1": {**host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), "release": "b2~2"},
                         "w2": {**host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), "release": "b2"}},
                        "shop", 0.0)
    assert rep["releases"] == {"b2~2": ["w1"], "b2": ["w2"]} and rep["hosts"]["w1"]["release"] == "b2~2"
    assert rep["summary"][-1] == "current: b2 on w2; b2~2 on w1"
    # One build, two configs: no build skew.
    assert rep["problems"] == []


def test_a_maintenance_lock_is_shown_once_for_its_hosts_and_is_no_problem():
    held = {"owner": "alice@ci-7", "started": "2026-12-06T22:40:00+00:00", "message": "Postgres upgrade"}
    rep = status_report({"w1": dict(host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), maintenance=held),
                         "web": dict(host("b2", ("web", [inst("shop-web@1.service", "b2")])), maintenance=held),
                         "w2": dict(host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), maintenance=None)},
                        "shop", 0.0)
    assert rep["problems"] == [] and rep["summary"][0].endswith("OK, no problems")
    text = 'by alice@ci-7 since 2026-12-06T22:40:00+00:00: "Postgres upgrade"'
    assert rep["maintenance"] == {text: ["w1", "web"]} and rep["hosts"]["w1"]["maintenance"] == held
    assert [line for line in rep["summary"] if line.startswith("MAINTENANCE")] == [
        f"MAINTENANCE locked {text} on w1, web: deploys, rollbacks and restarts are refused until ansible-playbook "
        "sturdy.workers.unlock"]


def test_the_newest_run_recorded_is_shown_once_with_its_hosts():
    run = {"run": "deploy-2", "kind": "deploy", "who": "alice@ctl", "from": "b1", "to": "b2", "result": "success",
           "started": 0.0, "finished": 40.0}
    older = dict(run, run="deploy-1", finished=10.0)
    rep = status_report({"w1": dict(host("b2"), last_run=dict(run, host="w1")),
                         "w2": dict(host("b2"), last_run=dict(run, host="w2")),
                         "w3": dict(host("b1"), last_run=dict(older, host="w3"))}, "shop", 0.0)
    [line] = [line for line in rep["summary"] if line.startswith("last run: ")]
    assert line == ("last run: 1970-01-01 00:00:40 UTC  deploy b1 -> b2: success in 40s, by alice@ctl, 2 host(s) "
                    "(all runs: ansible-playbook sturdy.workers.history)")
    assert rep["last_run"] == line[len("last run: "):-len(" (all runs: ansible-playbook sturdy.workers.history)")]


def test_a_pause_is_shown_once_for_its_hosts_and_its_queues_raise_no_problem():
    held = {"owner": "alice@ci-7", "started": "2026-12-07T02:00:00+00:00", "message": "broker upgrade",
            "processes": []}
    queue = {"queue": "emails", "depth": 40, "oldest_age": 4000.0, "consumers": [], "paused": True}
    rep = status_report({"w1": dict(host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), paused=held,
                                    queues=[queue]),
                         "w2": dict(host("b2", ("worker", [inst("shop-worker@1.service", "b2")])), paused=held)},
                        "shop", 0.0)
    assert rep["problems"] == [], rep["problems"]
    assert [line for line in rep["summary"] if line.startswith("PAUSED")] == [
        'PAUSED every worker by alice@ci-7 since 2026-12-07T02:00:00+00:00: "broker upgrade" on w1, w2: they take no '
        "message, the queues grow on purpose (no problem is raised for it); the tasks they were running finish. Next, "
        "when it is over: ansible-playbook sturdy.workers.resume"]
    # Unpaused, the same queue is a problem.
    rep = status_report({"w1": dict(host("b2", ("worker", [inst("shop-worker@1.service", "b2")])),
                                    queues=[dict(queue, paused=False)])}, "shop", 0.0)
    assert any("no worker consumes it" in p for p in rep["problems"])
