from __future__ import annotations

import json

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import (
    AdapterError,
    CeleryAdapter,
    CommandAdapter,
    adapter_for,
    check_answer,
    broker_unreachable,
    names_an_unreachable_broker,
    run_bounded,
    reliability_warnings,
    smoke_queue,
    transient_argv,
)

SAFE = {"acks_late": True, "reject_on_worker_lost": True, "prefetch_multiplier": 1, "task_time_limit": 25,
        "visibility_timeout": 60}


def test_smoke_queue_is_per_instance_and_host():
    assert smoke_queue("shop-worker@2.service", "app1") == "sturdy.smoke.shop-worker@2.app1"
    assert smoke_queue("shop-worker@2.service", "app1") != smoke_queue("shop-worker@2.service", "app2")


def test_transient_argv_carries_identity_secrets_and_environment_and_ends_options():
    argv = transient_argv("shop", "shop", "/srv/shop/releases/7", ["EnvironmentFile=/etc/shop/shop.env"],
                          {"B": "2", "A": "1"}, ["bin/migrate", "--flag"])
    assert argv[:5] == ["systemd-run", "--quiet", "--collect", "--pipe", "--wait"]
    assert "--uid=shop" in argv and "--gid=shop" in argv and "--working-directory=/srv/shop/releases/7" in argv
    assert "--property=EnvironmentFile=/etc/shop/shop.env" in argv
    assert argv.index("--setenv=A=1") < argv.index("--setenv=B=2")
    assert argv[-3:] == ["--", "bin/migrate", "--flag"]


def test_adapters_need_their_options():
    with pytest.raises(AdapterError, match="celery_app"):
        adapter_for({"adapter": "celery"})
    with pytest.raises(AdapterError, match="smoke_command"):
        adapter_for({"adapter": "command"})
    with pytest.raises(AdapterError, match="no smoke test"):
        adapter_for({"adapter": "none"})


def test_celery_adapter_runs_the_agent_client_from_the_release_and_reads_its_last_json_line():
    adapter = CeleryAdapter({"celery_app": "shop.celery"})
    [argv] = adapter.commands("/srv/shop/releases/7", ["q1", "q2"], 20)
    assert argv[:4] == ["/srv/shop/releases/7/venv/bin/python", "-m", "sturdy_agent", "smoke"]
    assert argv[-2:] == ["q1", "q2"] and "20" in argv
    out = "some log line\n" + json.dumps([{"queue": "q1", "ok": True}]) + "\n"
    assert adapter.parse([out], ["q1"], [0.3]) == [{"queue": "q1", "ok": True}]
    with pytest.raises(AdapterError, match="no JSON answer"):
        adapter.parse(["Traceback ..."], ["q1"], [0.3])


def test_rq_adapter_runs_the_agents_rq_client_from_the_release_with_no_celery_app():
    adapter = adapter_for({"adapter": "rq"})
    [argv] = adapter.commands("/srv/parcel/releases/3", ["sturdy.smoke.parcel-worker@1.h", "parcel.scales"], 15)
    assert argv == ["/srv/parcel/releases/3/venv/bin/python", "-m", "sturdy_agent", "rq-smoke", "--timeout", "15",
                    "sturdy.smoke.parcel-worker@1.h", "parcel.scales"]
    assert adapter.parse(["log\n" + json.dumps([{"queue": "parcel.scales", "ok": True}])], ["parcel.scales"],
                         [0.2]) == [
        {"queue": "parcel.scales", "ok": True}]


def test_command_adapter_runs_once_per_queue_and_reports_a_bad_answer_per_queue():
    adapter = CommandAdapter({"smoke_command": ["bin/smoke", "--x"]})
    cmds = adapter.commands("/srv/a/releases/1", ["q1", "q2"], 5)
    assert [c[1] for c in cmds] == ["STURDY_SMOKE_QUEUE=q1", "STURDY_SMOKE_QUEUE=q2"]
    assert cmds[0][3:] == ["/srv/a/releases/1/bin/smoke", "--x"]
    found = adapter.parse(['{"build_id": "1"}', "oops"], ["q1", "q2"], [0.41, 2.5])
    # Each queue's latency is how long its command ran: the report says "in 0.41s", never "in Nones".
    assert found[0] == {"queue": "q1", "ok": True, "answer": {"build_id": "1"}, "latency": 0.41}
    assert found[1]["ok"] is False and "no JSON answer" in found[1]["error"] and found[1]["latency"] == 2.5


def test_check_answer_names_every_difference():
    answer = {"build_id": "1", "host": "h", "unit": "u", "pid": 10, "release": "/srv/a/releases/1",
              "cwd": "/srv/a/releases/1"}
    expect = {"build_id": "1", "host": "h", "unit": "u", "pid": "10", "release": "/srv/a/releases/1"}
    assert check_answer(answer, expect) == []
    problems = check_answer(dict(answer, build_id="0", cwd="/srv/a/releases/0"), expect)
    assert "build_id is 0, expected 1" in problems
    assert "its working directory /srv/a/releases/0 is outside /srv/a/releases/1" in problems
    assert check_answer(dict(answer, pid=11), expect) == ["pid is 11, expected 10"]


def test_reliability_warnings_only_for_unsafe_settings():
    assert reliability_warnings("u", SAFE, stop_timeout=55) == []
    found = " ".join(reliability_warnings("u", dict(SAFE, acks_late=False, task_time_limit=None)))
    assert "task_acks_late is off" in found and "no task_time_limit" in found
    assert "reject_on_worker_lost" in " ".join(reliability_warnings("u", dict(SAFE, reject_on_worker_lost=False)))
    assert "worker_prefetch_multiplier=4" in " ".join(reliability_warnings("u", dict(SAFE, prefetch_multiplier=4)))
    assert "redelivers a task" in " ".join(reliability_warnings("u", dict(SAFE, visibility_timeout=20)))
    assert "not below the unit's stop timeout" in " ".join(reliability_warnings("u", SAFE, stop_timeout=25))


def test_a_prefork_pool_that_never_replaces_its_children_is_warned_about():
    found = " ".join(reliability_warnings("u", dict(SAFE, pool="prefork"), stop_timeout=55))
    assert "u: a prefork pool without worker_max_memory_per_child or worker_max_tasks_per_child" in found
    assert "Set worker_max_memory_per_child (KiB) below the unit's memory_high" in found
    for recycled in ({"max_memory_per_child": 200_000}, {"max_tasks_per_child": 100}, {"pool": "solo"}):
        assert reliability_warnings("u", {**SAFE, "pool": "prefork", **recycled}, stop_timeout=55) == []


def test_the_agent_runs_from_the_release_as_the_units_do_and_says_why_it_gave_no_answer():
    from ansible_collections.sturdy.workers.plugins.module_utils.adapters import run_agent

    ran = []
    proc = {"user": "shop", "group": "shop", "environment": {"A": "1"}}

    def answers(cmd):
        ran.append(cmd)
        return 0, 'a log line\n["shop.record"]\n', ""

    assert run_agent(answers, proc, "/srv/shop/releases/b2", ["LoadCredential=X:/c"], ["registered"], list) == (
        ["shop.record"], None)
    assert ran[0][-4:] == ["/srv/shop/releases/b2/venv/bin/python", "-m", "sturdy_agent", "registered"]
    assert "--uid=shop" in ran[0] and "--property=LoadCredential=X:/c" in ran[0] and "--setenv=A=1" in ran[0]
    # Stopped by systemd after two minutes: a broker that takes connections and never answers cannot hold a deploy.
    assert "--property=RuntimeMaxSec=120" in ran[0]
    assert run_agent(lambda cmd: (1, "", "ImportError: no module shop\n"), proc, "/r", [], ["x"], list) == (
        None, "rc 1: ImportError: no module shop")
    assert run_agent(lambda cmd: (0, "not json\n", ""), proc, "/r", [], ["x"], list) == (None, "rc 0: not json")


def test_a_broker_that_does_not_answer_is_named_with_what_to_check():
    said = broker_unreachable("the smoke job for shop-worker@1.service on h1", "h1",
                              {"error": "OperationalError: Error 111 connecting to broker:6379. Connection refused."})
    assert said.startswith("the smoke job for shop-worker@1.service on h1 could not reach the broker: OperationalError: "
                           "Error 111 connecting to broker:6379")
    assert "check that the broker runs and that h1 reaches it, and BROKER_URL in the app's secrets" in said


@pytest.mark.parametrize("why, unreachable", [
    # What the task-name check saw with Redis stopped (the agent's last lines), and a RabbitMQ refused.
    ("rc 1: raise e redis.exceptions.ConnectionError: Error 111 connecting to broker:6379. Connection refused.", True),
    ("rc 1: kombu.exceptions.OperationalError: [Errno 111] Connection refused", True),
    ("rc 1: kombu.exceptions.OperationalError: [Errno -2] Name or service not known", True),
    # The app itself: not the broker (an app whose database is down at import raises errors of the same short names).
    ("rc 1: django.db.utils.OperationalError: connection to server at db:5432 failed: Connection refused", False),
    ("rc 1: psycopg.OperationalError: connection failed", False),
    ("rc 1: ImportError: no module named shop", False),
    ("rc 1: RuntimeError: build 1 is broken on purpose", False),
])
def test_an_agent_failure_is_told_apart_when_the_broker_could_not_be_reached(why, unreachable):
    assert names_an_unreachable_broker(why) is unreachable


def test_a_bounded_command_carries_systemds_limit_and_says_when_it_was_stopped_there(monkeypatch):
    cmd = transient_argv("shop", "shop", "/r", ["LoadCredential=X:/c"], {}, ["python", "-m", "sturdy_agent"])
    assert not any("RuntimeMaxSec" in part for part in transient_argv("shop", "shop", "/r", [], {}, ["x"]))
    ran, clock = [], iter([100.0, 139.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    rc, out, err = run_bounded(lambda cmd: ran.append(cmd) or (1, "", ""), cmd, 38.5)
    cmd = ran[0]
    assert "--property=RuntimeMaxSec=39" in cmd and cmd.index("--property=RuntimeMaxSec=39") < cmd.index("--")
    assert (rc, out) == (1, "") and err.startswith("stopped after 38.5 s without an answer: the broker takes connections")
    assert names_an_unreachable_broker(f"rc 1: {err}")
    # A command that failed on its own, early, is left as it said.
    clock = iter([100.0, 101.0])
    assert run_bounded(lambda cmd: (1, "", "ImportError: x\n"), cmd, 38.5) == (1, "", "ImportError: x\n")
