"""The worker agent package (roles/release/files/sturdy_agent/), loaded as the release's venv loads it."""

from __future__ import annotations

import json
import socket
from pathlib import Path


def test_notify_sends_one_datagram_to_the_socket_systemd_names(agent, tmp_path, monkeypatch):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert agent.core.notify("READY=1\nSTATUS=consuming") is True
        assert server.recv(4096) == b"READY=1\nSTATUS=consuming"


def test_notify_without_a_socket_does_nothing(agent, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert agent.core.notify("READY=1") is False


def test_notify_reaches_an_abstract_socket(agent, monkeypatch):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0sturdy-agent-test")
        monkeypatch.setenv("NOTIFY_SOCKET", "@sturdy-agent-test")
        agent.core.notify("STOPPING=1")
        assert server.recv(100) == b"STOPPING=1"


def test_the_build_is_read_from_the_release_the_code_was_loaded_from(agent, tmp_path):
    release, build = agent.core.loaded_build()
    assert (release, build) == (str(tmp_path / "releases" / "b7"), "b7")


def test_smoke_queue_matches_the_deploy_side(agent):
    from ansible_collections.sturdy.workers.plugins.module_utils.adapters import smoke_queue

    env = {"STURDY_APP": "shop", "STURDY_PROCESS": "worker", "STURDY_INSTANCE": "2"}
    assert agent.core.own_smoke_queue(env) == smoke_queue("shop-worker@2.service", socket.gethostname())
    assert agent.core.own_smoke_queue({}) is None


def test_answer_reports_identity_queues_and_settings(agent, monkeypatch):
    class Conf:
        task_acks_late = True
        task_reject_on_worker_lost = True
        worker_prefetch_multiplier = 1
        task_time_limit = 25
        task_soft_time_limit = None
        broker_transport_options = {"visibility_timeout": 60}

    monkeypatch.setenv("STURDY_APP", "shop")
    monkeypatch.setenv("STURDY_PROCESS", "worker")
    monkeypatch.setenv("STURDY_INSTANCE", "1")
    got = agent.celery_worker.answer("tok", Conf, ["default", "sturdy.smoke.shop-worker@1.h"])
    assert got["token"] == "tok" and got["build_id"] == "b7" and got["unit"] == "shop-worker@1.service"
    assert got["queues"] == ["default"]
    assert got["settings"]["visibility_timeout"] == 60 and got["settings"]["acks_late"] is True
    monkeypatch.setitem(agent.core.STATE, "pool", "prefork")
    monkeypatch.setitem(agent.core.STATE, "max_memory_per_child", 200_000)
    got = agent.celery_worker.answer("tok", Conf, ["default"])
    assert (got["settings"]["pool"], got["settings"]["max_memory_per_child"]) == ("prefork", 200_000)
    assert got["settings"]["max_tasks_per_child"] is None


def test_the_pool_is_named_as_celery_names_it_from_a_class_or_a_setting(agent):
    class TaskPool:  # what `celery worker --pool solo` hands the worker
        __module__ = "celery.concurrency.solo"

    assert agent.celery_worker.pool_name(TaskPool) == "solo"
    assert agent.celery_worker.pool_name("prefork") == "prefork"
    assert agent.celery_worker.pool_name("celery.concurrency.thread:TaskPool") == "thread"
    assert agent.celery_worker.pool_name(None) is None


def test_activate_ignores_processes_without_sturdy_agent(agent):
    agent.activate({})
    assert not agent._HOOKED  # pylint: disable=protected-access


def test_an_rq_worker_without_rq_says_so_and_keeps_running(agent, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "rq", None)  # RQ not installed in this venv
    monkeypatch.setitem(__import__("sys").modules, "rq.worker", None)
    agent.activate({"STURDY_AGENT": "rq"})
    assert agent._HOOKED == ["rq"]  # pylint: disable=protected-access
    assert "STURDY_AGENT=rq but its worker cannot be hooked" in capsys.readouterr().err


def test_the_rq_url_delivered_as_a_credential_is_read_where_rq_worker_reads_it(agent, tmp_path):
    (tmp_path / "RQ_REDIS_URL").write_text("redis://:pw@broker:6379/7\n")
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    assert agent.core.rq_url_from_credentials(environ) == "redis://:pw@broker:6379/7"
    assert environ["RQ_REDIS_URL"] == "redis://:pw@broker:6379/7"
    # Set in the environment (env_file delivery): kept as it is.
    assert agent.core.rq_url_from_credentials({"RQ_REDIS_URL": "redis://x/1", "CREDENTIALS_DIRECTORY": str(tmp_path)}) == \
        "redis://x/1"
    assert agent.core.rq_url_from_credentials({}) is None


def test_a_busy_rq_worker_answers_from_its_registration_naming_the_job_its_horse_runs(agent):
    worker = {"name": "a1", "hostname": "h1", "queues": "sturdy.smoke.parcel-worker@1.h1,parcel.scales",
              "sturdy_build_id": "b7", "sturdy_release": "/srv/parcel/releases/b7", "sturdy_unit": "parcel-worker@1.service",
              "sturdy_pid": "412", "sturdy_job": "p-9", "sturdy_job_name": "parcel.jobs.weigh",
              "sturdy_job_started": "1796368036.5"}
    got = agent.rq_client.registered_answer("tok", worker)
    assert got["ran_in"] == "worker" and got["busy"] == [{"id": "p-9", "name": "parcel.jobs.weigh",
                                                          "started": 1796368036.5, "running_for": got["busy"][0]["running_for"]}]
    assert got["busy"][0]["running_for"] > 0
    assert (got["build_id"], got["host"], got["unit"], got["pid"], got["queues"]) == (
        "b7", "h1", "parcel-worker@1.service", "412", ["parcel.scales"])


def test_oldest_waiting_reads_the_stamp_and_the_task(agent):
    raw = json.dumps({"body": "e30=", "headers": {"task": "shop.add", "id": "abc", "sturdy_sent": 1000.0}})
    assert agent.client.oldest_waiting(raw, 1012.34) == {"oldest_task": "shop.add", "oldest_id": "abc", "oldest_age": 12.3,
                                                         "oldest_stamped": True}
    unstamped = agent.client.oldest_waiting(json.dumps({"headers": {"task": "shop.add"}}), 1000.0)
    assert unstamped["oldest_age"] is None and unstamped["oldest_stamped"] is False
    assert agent.client.oldest_waiting(b"not json", 1.0)["oldest_task"] is None


def test_task_counts_add_up_per_build_and_outcome_in_one_file_per_unit(agent, tmp_path):
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "STURDY_APP": "shop", "STURDY_PROCESS": "worker",
           "STURDY_INSTANCE": "1"}
    path = agent.records.task_counts_path(env)
    assert path == str(tmp_path / "state" / "sturdy-counts" / "shop-worker@1.service.json")
    for build, outcome in [("b1", "succeeded"), ("b1", "succeeded"), ("b1", "failed"), ("b2", "retried")]:
        agent.records.count_task(path, build, outcome)
    assert json.loads(Path(path).read_text()) == {"b1": {"failed": 1, "succeeded": 2}, "b2": {"retried": 1}}
    assert agent.records.task_counts_path({"STURDY_APP": "shop"}) is None
    # A pruned release's build goes; a broken file is set aside, not counted on from garbage.
    agent.records.count_task(path, "b3", "succeeded", keep=lambda build: build == "b2")
    assert json.loads(Path(path).read_text()) == {"b2": {"retried": 1}, "b3": {"succeeded": 1}}
    Path(path).write_text("{half")
    agent.records.count_task(path, "b3", "failed")
    assert json.loads(Path(path).read_text()) == {"b3": {"failed": 1}}
    assert Path(f"{path}.bad").read_text() == "{half"


def test_health_answers_with_the_loaded_build_its_queues_without_smoke_and_its_tasks(agent, monkeypatch):
    for key, value in {"STURDY_APP": "shop", "STURDY_PROCESS": "worker", "STURDY_INSTANCE": "2"}.items():
        monkeypatch.setenv(key, value)
    got = agent.celery_worker.health(["default", "sturdy.smoke.shop-worker@2.h"], [{"id": "t1", "name": "shop.x", "started": 1.0}])
    assert got["build_id"] == "b7" and got["release"].endswith("/releases/b7")
    assert got["unit"] == "shop-worker@2.service" and got["queues"] == ["default"]
    assert got["tasks"] == [{"id": "t1", "name": "shop.x", "started": 1.0}]


def test_dead_letters_wait_beside_their_queue_and_never_in_it(agent):
    assert agent.letters.dead_letter_queue("default") == "sturdy.dead.default"
    # Naming a dead-letter queue again gives the same one: no command can be pointed at a live queue through it.
    assert agent.letters.dead_letter_queue("sturdy.dead.default") == "sturdy.dead.default"


def test_a_retry_and_a_requeued_dead_letter_are_counted_afresh(agent):
    first = agent.letters.deliveries_key({"id": "t1", "retries": 0})
    assert first == "sturdy.deliveries.t1.0.0"
    assert agent.letters.deliveries_key({"id": "t1", "retries": 1}) != first
    assert agent.letters.deliveries_key({"id": "t1", "retries": 0, "sturdy_requeues": 1}) != first


def test_a_dead_letter_says_why_where_from_and_goes_back_clean(agent):
    headers = {"id": "t1", "task": "shop.charge", "retries": 0, "redelivered": True, "sturdy_sent": 1.0}
    dead = agent.letters.dead_headers(headers, "unknown task shop.charge in build b7", "default", 1, "b7", "w1", 100.0)
    assert dead == {"id": "t1", "task": "shop.charge", "retries": 0, "sturdy_sent": 1.0,
                    "sturdy_dead_reason": "unknown task shop.charge in build b7", "sturdy_dead_queue": "default",
                    "sturdy_dead_build": "b7", "sturdy_dead_host": "w1", "sturdy_dead_at": 100.0,
                    "sturdy_dead_deliveries": 1}
    back = agent.letters.requeue_headers(dead)
    assert back == {"id": "t1", "task": "shop.charge", "retries": 0, "sturdy_sent": 1.0, "sturdy_requeues": 1}
    assert agent.letters.requeue_headers(dict(dead, sturdy_requeues=1))["sturdy_requeues"] == 2


def test_a_dead_letter_listing_counts_reasons_and_never_shows_arguments(agent):
    dead = [agent.letters.dead_headers({"id": f"t{n}", "task": "shop.poison", "argsrepr": "('card 4242',)"},
                                       "delivered 6 times without an acknowledgement", "default", 6, "b7", "w1", 50.0 + n)
            for n in range(3)]
    dead.append(agent.letters.dead_headers({"id": "u", "task": "shop.old"}, "unknown task shop.old in build b7", "default",
                                           1, "b7", "w2", 90.0))
    got = agent.letters.describe_dead(dead, 100.0, sample=2)
    assert got["count"] == 4 and got["oldest_age"] == 50.0
    assert got["reasons"] == {"delivered 6 times without an acknowledgement": 3, "unknown task shop.old in build b7": 1}
    assert got["tasks"] == {"shop.poison": 3, "shop.old": 1}
    assert [e["id"] for e in got["sample"]] == ["t0", "t1"]
    assert "4242" not in json.dumps(got)
    assert agent.letters.describe_dead([], 100.0) == {"count": 0, "reasons": {}, "tasks": {}, "oldest_age": None, "sample": []}


def test_a_message_rabbitmq_dead_lettered_itself_is_listed_with_why_and_goes_back_without_its_death(agent):
    import datetime

    at = datetime.datetime(2026, 12, 2, 14, 2, 25)  # py-amqp: a naive UTC datetime
    headers = {"id": "t9", "task": "shop.poison", "x-delivery-count": 5, "x-first-death-queue": "default",
               "x-first-death-reason": "delivery_limit",
               "x-death": [{"count": 1, "reason": "delivery_limit", "queue": "default", "time": at}]}
    got = agent.letters.describe_dead([headers], at.replace(tzinfo=datetime.timezone.utc).timestamp() + 30)
    assert got["sample"][0]["reason"].startswith("delivered more times than the queue's delivery-limit allows")
    assert got["sample"][0]["deliveries"] == 5 and got["sample"][0]["age"] == 30.0 and got["oldest_age"] == 30.0
    # Our own reason wins over the broker's record of the same message.
    ours = dict(headers, sturdy_dead_reason="unknown task shop.poison in build b7")
    assert agent.letters.describe_dead([ours], 0.0)["reasons"] == {"unknown task shop.poison in build b7": 1}
    assert agent.letters.requeue_headers(headers) == {"id": "t9", "task": "shop.poison", "sturdy_requeues": 1}


def test_a_message_copied_to_the_dead_letter_queue_is_acknowledged_not_rejected(agent):
    """Rejected, a RabbitMQ dead-letter policy would make a second copy (without the reason); a failed copy is
    rejected as Celery does."""
    calls = []

    class Message:
        headers = {"id": "t1", "task": "shop.gone"}

        def ack_log_error(self, logger, errors):
            calls.append("ack")

        def reject_log_error(self, logger, errors, requeue=False):
            calls.append("reject")

    class Gate(agent.celery_gate.Gate):
        def __init__(self, fail):  # pylint: disable=super-init-not-called
            self.fail, self.log = fail, None

        def dead_letter(self, message, reason, deliveries):
            if self.fail:
                raise OSError("broker gone")
            calls.append(f"copy: {reason}")

    def celery_handler(body, message, exc):
        assert message.headers["task"] == "shop.gone"
        message.reject_log_error(None, ())

    Gate(False).before_reject(celery_handler, lambda m, e: "unknown task")(None, Message(), None)
    assert calls == ["copy: unknown task", "ack"]
    calls.clear()
    gate = Gate(True)
    gate.log = type("Log", (), {"error": lambda *a: calls.append("logged")})()
    gate.before_reject(celery_handler, lambda m, e: "unknown task")(None, Message(), None)
    assert calls == ["logged", "reject"]


def test_arguments_are_checked_as_celery_checks_them_at_the_producer(agent):
    class Task:
        typing = True

        @staticmethod
        def __header__(order_id, amount=0):
            return order_id, amount

    assert agent.celery_gate.argument_error(Task, [1], {"amount": 2}) is None
    assert "argument" in agent.celery_gate.argument_error(Task, [1, 2, 3], {})
    assert "unexpected keyword" in agent.celery_gate.argument_error(Task, [1], {"coupon": "x"})
    Task.typing = False
    assert agent.celery_gate.argument_error(Task, [1, 2, 3], {}) is None


def test_the_rate_is_read_from_the_unit_and_ignored_when_unusable(agent):
    assert agent.celery_gate.per_instance_rate({"STURDY_RATE_LIMIT": "2.5"}) == 2.5
    assert agent.celery_gate.per_instance_rate({}) is None
    assert agent.celery_gate.per_instance_rate({"STURDY_RATE_LIMIT": "fast"}) is None
    assert agent.celery_gate.per_instance_rate({"STURDY_RATE_LIMIT": "0"}) is None


def test_a_smoke_job_runs_in_the_pool_with_a_free_slot_and_is_answered_at_once_when_every_slot_is_busy(
        agent, monkeypatch):
    """The smoke queue has a consumer of its own: the job never waits behind the app's tasks."""

    class Request:
        def __init__(self, name, started):
            self.id, self.name, self.time_start = f"id-{name}", name, started

    class Message:
        headers = {"id": "smoke-1", "task": "sturdy.smoke"}

        def __init__(self, expires=None):
            self.acked = False
            if expires:
                self.headers = {**self.headers, "expires": expires}

        def decode(self):
            return (["tok"], {}, {})

        def ack(self):
            self.acked = True

    stored = []

    class App:
        conf = type("Conf", (), {"broker_transport_options": {}, "task_acks_late": True,
                                 "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1,
                                 "task_time_limit": None, "task_soft_time_limit": None,
                                 "result_backend": "redis://broker:6379/0"})
        amqp = type("Amqp", (), {"queues": type("Queues", (dict,), {"consume_from": {"default": None}})()})
        backend = type("Backend", (), {"store_result": staticmethod(lambda *a, request: stored.append(a))})

    consumer = type("Consumer", (), {"app": App})
    pooled = []
    long_task = Request("shop.sleep", agent.client.time.time() - 6)
    held = Request("shop.record", None)
    reserved = {long_task, held}
    monkeypatch.setitem(agent.core.STATE, "concurrency", 1)  # pylint: disable=protected-access
    # The only slot runs a long task (the rate-limit gate still holds another): answered here, naming the task.
    monkeypatch.setitem(agent.core.STATE, "gate", type("Gate", (), {"waiting": [held]}))  # pylint: disable=protected-access
    message = Message()
    agent.celery_worker.answer_smoke(consumer, message, pooled.append, reserved)
    assert pooled == [] and message.acked
    task_id, result, state = stored[0]
    assert (task_id, state, result["token"], result["ran_in"], result["build_id"]) == ("smoke-1", "SUCCESS", "tok",
                                                                                       "worker", "b7")
    assert [(b["name"], b["running_for"] >= 6) for b in result["busy"]] == [("shop.sleep", True)]
    # An expired job (its deploy stopped waiting) is dropped, not answered.
    stored.clear()
    agent.celery_worker.answer_smoke(consumer, Message(expires="2020-01-01T00:00:00+00:00"), pooled.append, reserved)
    assert stored == [] and pooled == []
    # A free slot: the pool runs it, as any task.
    monkeypatch.setitem(agent.core.STATE, "concurrency", 2)  # pylint: disable=protected-access
    message = Message()
    agent.celery_worker.answer_smoke(consumer, message, pooled.append, reserved)
    assert pooled == [message] and not message.acked and stored == []


def test_a_smoke_job_the_broker_did_not_take_is_told_apart_from_one_no_worker_answered(agent):
    class OperationalError(Exception):  # kombu's, when the broker refuses the connection
        pass

    class TimeoutError(Exception):  # pylint: disable=redefined-builtin  # celery.exceptions.TimeoutError
        pass

    down = agent.client.failed(OperationalError("Error 111 connecting to broker:6379. Connection refused."))
    assert down == {"ok": False, "unreachable": True,
                    "error": "OperationalError: Error 111 connecting to broker:6379. Connection refused."}
    assert agent.client.failed(ConnectionRefusedError(111, "Connection refused"))["unreachable"] is True
    assert agent.client.failed(TimeoutError("The operation timed out."))["unreachable"] is False
    assert agent.client.failed(TimeoutError())["error"] == "TimeoutError"
    # Celery's Redis result backend giving up reconnecting (the broker's Redis stopped while answers were awaited).
    gone = agent.client.failed(RuntimeError("\nRetry limit exceeded while trying to reconnect to the Celery result store\n"
                                            "backend. The Celery application must be restarted.\n"))
    assert gone == {"ok": False, "unreachable": True,
                    "error": "RuntimeError: Retry limit exceeded while trying to reconnect to the Celery result store "
                             "backend. The Celery application must be restarted."}
    assert agent.client.failed(RuntimeError("something else"))["unreachable"] is False


def test_smoke_reports_a_job_the_broker_refused_and_still_waits_for_the_others(agent, monkeypatch):
    class OperationalError(Exception):
        pass

    class Result:
        def get(self, timeout, propagate):
            return {"token": "t", "build_id": "5"}

    class App:
        conf = type("Conf", (), {"result_backend": "redis://broker:6379/0"})

        def send_task(self, name, args, queue, expires):
            if queue == "mail":
                raise OperationalError("Error 111 connecting to broker:6379. Connection refused.")
            return Result()

    monkeypatch.setattr(agent.client, "load_app", lambda spec: App())
    monkeypatch.setattr(agent.client, "waiting", lambda app, queues: dict.fromkeys(queues, 0))
    monkeypatch.setattr(agent.client.uuid, "uuid4", type("Token", (), {"hex": "t"}))
    default, mail = agent.client.smoke("shop.celery", ["default", "mail"], 1.0)
    assert default["ok"] is True and default["answer"]["build_id"] == "5"
    assert (mail["queue"], mail["ok"], mail["unreachable"]) == ("mail", False, True)
    assert "Error 111 connecting to broker:6379" in mail["error"]


def test_a_broker_that_refuses_every_job_fails_them_all_within_one_timeout(agent, monkeypatch):
    # Three queues, the broker refusing each send: the sends share one deadline, so the client ends after about one
    # timeout, not one per queue (systemd stops it at twice the timeout plus 30 s, which would misname the failure).
    class OperationalError(Exception):
        pass

    clock = {"now": 0.0}
    monkeypatch.setattr(agent.client.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(agent.client.time, "sleep", lambda seconds: clock.update(now=clock["now"] + seconds))

    class App:
        conf = type("Conf", (), {"result_backend": "redis://broker:6379/0"})

        def send_task(self, name, args, queue, expires):
            raise OperationalError("Error 111 connecting to broker:6379. Connection refused.")

    monkeypatch.setattr(agent.client, "load_app", lambda spec: App())
    monkeypatch.setattr(agent.client, "waiting", lambda app, queues: dict.fromkeys(queues, 0))
    found = agent.client.smoke("shop.celery", ["default", "mail", "reports"], 5.0)
    assert [(f["queue"], f["unreachable"]) for f in found] == [("default", True), ("mail", True), ("reports", True)]
    assert clock["now"] <= 5.0, clock


def test_an_app_without_a_result_backend_gets_the_smoke_answers_through_the_broker(agent, monkeypatch):
    # Redis: the broker's own database; any other broker: a reply queue of the sender's.
    assert agent.core.reply_url("redis://:pw@broker:6379/3") == "redis://:pw@broker:6379/3"
    assert agent.core.reply_url("rediss://:pw@broker:6380/0") == "rediss://:pw@broker:6380/0"
    assert agent.core.reply_url("amqp://shop:pw@rabbit:5672/shop") == "rpc://"

    class Result:
        def get(self, timeout, propagate):
            return {"token": "t"}

    class App:
        conf = type("Conf", (), {"result_backend": None})()
        seen = []

        def connection_for_write(self):
            return type("Connection", (), {"as_uri": lambda self, include_password: "redis://:pw@broker:6379/3"})()

        def send_task(self, name, args, queue, expires):
            self.seen.append(self.conf.result_backend)  # set before the first job is sent
            return Result()

    app = App()
    monkeypatch.setattr(agent.client, "load_app", lambda spec: app)
    monkeypatch.setattr(agent.client, "waiting", lambda app, queues: dict.fromkeys(queues, 0))
    monkeypatch.setattr(agent.client.uuid, "uuid4", type("Token", (), {"hex": "t"}))
    (entry,) = agent.client.smoke("ledger.worker", ["ledger.entries"], 1.0)
    assert entry["ok"] is True and app.seen == ["redis://:pw@broker:6379/3"]


def test_a_smoke_job_answered_by_the_worker_itself_over_rpc_goes_to_the_senders_reply_queue(agent, monkeypatch):
    stored = []

    class Backend:  # rpc://: the answer is published to the queue the message names
        def destination_for(self, task_id, request):
            return request.reply_to, request.correlation_id

        def store_result(self, task_id, result, state, request):
            stored.append((task_id, state, self.destination_for(task_id, request)))

    class App:
        conf = type("Conf", (), {"broker_transport_options": {}, "task_acks_late": True,
                                 "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1,
                                 "task_time_limit": None, "task_soft_time_limit": None, "result_backend": "rpc://"})
        amqp = type("Amqp", (), {"queues": type("Queues", (dict,), {"consume_from": {"default": None}})()})
        backend = Backend()

    class Message:
        headers = {"id": "smoke-2", "task": "sturdy.smoke"}
        properties = {"reply_to": "a1b2-oid", "correlation_id": "smoke-2"}
        acked = False

        def decode(self):
            return (["tok"], {}, {})

        def ack(self):
            self.acked = True

    busy = type("Request", (), {"id": "r1", "name": "shop.sleep", "time_start": agent.client.time.time() - 3})()
    monkeypatch.setitem(agent.core.STATE, "concurrency", 1)  # pylint: disable=protected-access
    monkeypatch.setitem(agent.core.STATE, "gate", None)  # pylint: disable=protected-access
    message = Message()
    agent.celery_worker.answer_smoke(type("Consumer", (), {"app": App}), message, [].append, {busy})
    assert message.acked and stored == [("smoke-2", "SUCCESS", ("a1b2-oid", "smoke-2"))]


def test_records_a_dead_pool_process_left_are_closed_and_the_live_ones_kept(agent, tmp_path):
    # Two pool processes of invocation inv-2 ran tasks: one was SIGKILLed mid-task (pid 101), one runs (pid 102); a
    # record of the previous invocation is left as it is (a diagnosis of that death reads it).
    unit = tmp_path / "shop-worker@1.service"
    unit.mkdir()
    for pid, task, invocation in ((101, "poison", "inv-2"), (102, "long", "inv-2"), (99, "old", "inv-1")):
        (unit / f"{pid}.json").write_text(json.dumps({"id": task, "pid": pid, "invocation": invocation}))
    closed = agent.records.close_task_records(str(unit), "its pool process died", 50.0, invocation="inv-2",
                                              alive=lambda pid: pid == 102)
    assert closed == ["poison"]
    poison = json.loads((unit / "101.json").read_text())
    assert (poison["ended"], poison["end"]) == (50.0, "its pool process died")
    assert "ended" not in json.loads((unit / "102.json").read_text())
    assert "ended" not in json.loads((unit / "99.json").read_text())
    # A dead-lettered message closes the record that names it, whoever runs it; a closed record stays as it was.
    assert agent.records.close_task_records(str(unit), "dead-lettered to sturdy.dead.default", 60.0, task_id="long") == ["long"]
    assert json.loads((unit / "102.json").read_text())["end"] == "dead-lettered to sturdy.dead.default"
    assert agent.records.close_task_records(str(unit), "again", 70.0, task_id="poison") == []
    assert not list(unit.glob("*.tmp"))


def test_the_rq_smoke_client_sends_a_job_to_each_queue_and_reads_its_answer(agent, monkeypatch):
    import sys
    import types

    class Job:
        id = "j1"

        def __init__(self, token):
            self.token = token

        def get_status(self, refresh):
            return "finished"

        def return_value(self, refresh):
            return {"token": self.token, "build_id": "b7"}

    class Queue:
        count = 0

        def __init__(self, name, connection=None, serializer=None):
            self.name = name

        def enqueue(self, func, token, **options):
            assert func == "sturdy_agent.rq_smoke" and options["ttl"] == 5
            return Job(token)

    class Conn:
        @classmethod
        def from_url(cls, url):
            assert url == "redis://broker:6379/1"
            return cls()

    registration = types.SimpleNamespace(get_keys=lambda queue: [])  # no worker registered: none is busy
    fakes = {"redis": types.SimpleNamespace(Redis=Conn),
             "rq": types.SimpleNamespace(Queue=Queue, worker_registration=registration),
             "rq.queue": types.SimpleNamespace(Queue=Queue),
             "rq.serializers": types.SimpleNamespace(resolve_serializer=lambda name: None)}
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("RQ_REDIS_URL", "redis://broker:6379/1")
    got = agent.rq_client.smoke(["sturdy.smoke.parcel-worker@1.h", "parcel.scales"], 5)
    assert [(g["queue"], g["ok"], g["answer"]["build_id"]) for g in got] == [
        ("sturdy.smoke.parcel-worker@1.h", True, "b7"), ("parcel.scales", True, "b7")], got


def test_stats_stops_waiting_for_consumers_once_as_many_as_the_caller_expects_answered(agent, monkeypatch, capsys):
    # The broker's pidbox cannot run here: a Celery app that records how its broadcast was asked to wait.
    asked = []

    class Channel:
        def queue_declare(self, queue, passive):
            return type("Declared", (), {"message_count": 0})()

    class Connection:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def channel(self):
            return Channel()

    class App:
        control = type("Control", (), {"inspect": lambda self, timeout, limit: asked.append((timeout, limit)) or type(
            "Inspect", (), {"active_queues": lambda self: {"w1@h": [{"name": "default"}], "w2@h": []}})()})()

        def connection_for_read(self):
            return Connection()

    monkeypatch.setattr(agent.client, "load_app", lambda spec: App())
    monkeypatch.setenv("STURDY_CONSUMERS_EXPECTED", "2")
    assert agent.__main__.main(["stats", "--timeout", "1.5", "--celery-app", "shop.celery", "default"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["consumers"] == ["w1@h"]
    # Without it (the status, the metrics collector): every worker that answers within the timeout.
    monkeypatch.delenv("STURDY_CONSUMERS_EXPECTED")
    assert agent.__main__.main(["stats", "--timeout", "1.5", "--celery-app", "shop.celery", "default"]) == 0
    assert asked == [(1.5, 2), (1.5, None)]
