from __future__ import annotations

import json
import socket

from ansible_collections.sturdy.workers.plugins.modules import smoke_test

ARGS = {"celery_app": "shop.celery", "release": "/srv/shop/current", "build_id": "2", "user": "shop", "group": "shop",
        "units": ["shop-worker@1.service"], "timeout": 5}


def answer(build="2", queues=("default",)):
    return {"queue": "q", "ok": True, "latency": 0.1, "answer": {
        "build_id": build, "host": socket.gethostname(), "unit": "shop-worker@1.service", "pid": 42,
        "release": "/srv/shop/current", "cwd": "/srv/shop/current", "queues": list(queues),
        "settings": {"acks_late": True, "reject_on_worker_lost": True, "prefetch_multiplier": 1,
                     "task_time_limit": 30, "visibility_timeout": 60}}}


def run(run_module, monkeypatch, args, client_answers):
    monkeypatch.setattr(smoke_test.os.path, "realpath", lambda p: p)
    outputs = iter(client_answers)
    return run_module(smoke_test, args, [
        (["systemctl", "show", "--property=MainPID"], (0, "42\n", "")),
        (["systemd-run"], lambda argv: (0, json.dumps(next(outputs)) + "\n", "")),
    ])


def test_check_mode_sends_nothing(run_module):
    result, calls = run_module(smoke_test, {**ARGS, "_ansible_check_mode": True})
    assert result["changed"] is False and calls == []


def test_every_instance_answers_the_build_through_systemd_run(run_module, monkeypatch):
    result, calls = run(run_module, monkeypatch, ARGS, [[answer()]])
    assert not result.get("failed"), result
    client = next(c for c in calls if c[0] == "systemd-run")
    assert client[0] == "systemd-run" and "--uid=shop" in client and "--working-directory=/srv/shop/current" in client
    assert client[-1].startswith("sturdy.smoke.shop-worker@1.")


def test_an_old_build_fails_naming_the_unit(run_module, monkeypatch):
    result, dummy = run(run_module, monkeypatch, ARGS, [[answer(build="1")]])
    assert result["failed"] and "shop-worker@1.service on" in result["msg"] and "build_id is 1, expected 2" in result["msg"]


def test_a_queue_nobody_consumes_names_what_the_workers_do_consume(run_module, monkeypatch):
    lost = {"queue": "default", "ok": False, "error": "TimeoutError"}
    result, calls = run(run_module, monkeypatch, {**ARGS, "queues": ["default"]}, [[answer(queues=["orders"]), lost]])
    assert result["failed"] and "No worker took the smoke job sent to queue 'default'" in result["msg"]
    # One client run sent the instance's job and the real queue's.
    clients = [c for c in calls if c[0] == "systemd-run"]
    assert len(clients) == 1 and clients[0][-2].startswith("sturdy.smoke.shop-worker@1.") and clients[0][-1] == "default"
    assert "consume orders" in result["msg"]


def test_a_queue_with_a_backlog_is_proven_by_its_consumers_builds_not_by_a_job_behind_it(run_module, monkeypatch):
    args = {**ARGS, "queues": ["default"]}
    mine = {"node": "worker1@h", "build_id": "2", "host": "h", "unit": "shop-worker@1.service"}
    held = {"queue": "default", "ok": True, "backlog": 40, "consumers": [mine], "latency": 1.0}
    result, dummy = run(run_module, monkeypatch, args, [[answer(), held]])
    assert not result.get("failed"), result
    assert result["queues"][0]["backlog"] == 40
    old = {**mine, "node": "worker2@g", "host": "g", "build_id": "1"}
    result, dummy = run(run_module, monkeypatch, args, [[answer(), {**held, "consumers": [mine, old]}]])
    assert result["failed"] and "queue 'default' (40 waiting) is consumed by workers running another build" in result["msg"]
    assert "shop-worker@1.service on g (1)" in result["msg"]
    result, dummy = run(run_module, monkeypatch, args, [[answer(queues=["orders"]), {**held, "consumers": [],
                                                                                     "ok": False}]])
    assert result["failed"] and "Queue 'default' holds 40 waiting message(s) and no worker consumes it" in result["msg"]
    assert "consume orders" in result["msg"]


def test_an_instance_that_restarted_while_its_job_was_in_flight_is_named_as_unsteady(run_module, monkeypatch):
    monkeypatch.setattr(smoke_test.os.path, "realpath", lambda p: p)
    pids = iter(["42\n", "77\n"])
    restarted = answer()
    restarted["answer"]["pid"] = 77
    result, dummy = run_module(smoke_test, ARGS, [
        (["systemctl", "show", "--property=MainPID"], lambda argv: (0, next(pids), "")),
        (["systemd-run"], lambda argv: (0, json.dumps([restarted]) + "\n", "")),
    ])
    assert result["failed"], result
    assert "it restarted while its smoke job was in flight (main PID 42 -> 77)" in result["msg"]
    assert "journalctl -u shop-worker@1.service" in result["msg"] and "pid is" not in result["msg"]


def test_a_broker_that_does_not_answer_is_named_not_a_worker_that_does_not_consume(run_module, monkeypatch):
    down = {"queue": "q", "ok": False, "unreachable": True,
            "error": "OperationalError: Error 111 connecting to broker:6379. Connection refused."}
    result, dummy = run(run_module, monkeypatch, ARGS, [[down]])
    assert result["failed"] and "could not reach the broker: OperationalError: Error 111 connecting to broker:6379" in (
        result["msg"])
    assert "does not consume" not in result["msg"]


def test_with_the_target_only_the_instances_it_wants_here_get_a_job(run_module, monkeypatch):
    monkeypatch.setattr(smoke_test.os.path, "realpath", lambda p: p)
    args = {**ARGS, "units": ["shop-worker@1.service", "shop-worker@2.service"], "target": "shop.target"}
    wants = (["systemctl", "show", "--property=Wants,ConsistsOf"], (0, "shop-worker@1.service shop-web.service\n\n", ""))
    result, calls = run_module(smoke_test, args, [
        wants,
        (["systemctl", "show", "--property=MainPID"], (0, "42\n", "")),
        (["systemd-run"], lambda argv: (0, json.dumps([answer()]) + "\n", "")),
    ])
    assert not result.get("failed"), result
    assert [e["unit"] for e in result["instances"]] == ["shop-worker@1.service"]
    client = next(c for c in calls if c[0] == "systemd-run")
    assert not any("shop-worker@2" in arg for arg in client)
    # A process type none of whose instances run here (a singleton placed elsewhere) sends nothing.
    result, calls = run_module(smoke_test, {**args, "units": ["shop-beat@1.service"]}, [wants])
    assert result["instances"] == [] and not result.get("failed") and all(c[0] != "systemd-run" for c in calls)
