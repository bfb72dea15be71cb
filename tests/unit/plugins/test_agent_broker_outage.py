"""The worker agent through a broker outage: smoke jobs that wait it out, the watchdog fed while Celery reconnects, a
message Redis handed out as it went away put back, and the stacks of a worker its watchdog kills."""

from __future__ import annotations

import pytest


def test_a_smoke_job_waits_out_a_broker_restart_within_its_timeout_and_fails_on_one_longer(agent, monkeypatch):
    class OperationalError(Exception):
        pass

    clock = [100.0]
    monkeypatch.setattr(agent.client.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(agent.client.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setattr(agent.client, "waiting", lambda app, queues: dict.fromkeys(queues, 0))
    monkeypatch.setattr(agent.client.uuid, "uuid4", type("Token", (), {"hex": "t"}))

    def app_down_until(back: float):
        class Result:
            def get(self, timeout, propagate):
                if clock[0] < back:
                    raise OperationalError("Error 111 connecting to broker:6379. Connection refused.")
                return {"token": "t", "build_id": "5"}

        class App:
            conf = type("Conf", (), {"result_backend": "redis://broker:6379/0"})

            def send_task(self, name, args, queue, expires):
                if clock[0] < back:
                    raise OperationalError("Error 111 connecting to broker:6379. Connection refused.")
                return Result()
        return App()

    # Away 20 s of a 30 s timeout: the job is sent once the broker is back and answered.
    monkeypatch.setattr(agent.client, "load_app", lambda spec: app_down_until(clock[0] + 20))
    (entry,) = agent.client.smoke("shop.celery", ["default"], 30.0)
    assert entry["ok"] is True and entry["answer"]["build_id"] == "5", entry
    # Away longer than the timeout: it could not reach the broker, after waiting the timeout and no longer.
    started = clock[0]
    monkeypatch.setattr(agent.client, "load_app", lambda spec: app_down_until(clock[0] + 600))
    (entry,) = agent.client.smoke("shop.celery", ["default"], 30.0)
    assert (entry["ok"], entry["unreachable"]) == (False, True) and 29 <= clock[0] - started <= 31, entry
    # Any other error is not waited for.
    calls = []

    def refused():
        calls.append(1)
        raise ValueError("no such task")
    with pytest.raises(ValueError):
        agent.client.through_an_outage(refused, clock[0] + 30)
    assert calls == [1]


def test_a_worker_waiting_for_a_lost_broker_feeds_the_watchdog_and_says_so_until_its_loop_runs_again(agent, monkeypatch):
    sent = []
    monkeypatch.setattr(agent.celery_worker, "notify", sent.append)
    monkeypatch.setitem(agent.core.STATE, "node", "worker1@h")
    monkeypatch.delitem(agent.core.STATE, "watchdog", raising=False)
    agent.celery_worker.waiting_for_broker()
    assert sent == []  # before READY systemd watches no watchdog
    monkeypatch.setitem(agent.core.STATE, "watchdog", object())
    agent.celery_worker.waiting_for_broker()
    agent.celery_worker.waiting_for_broker()
    assert len(sent) == 2 and sent[0] == sent[1]
    assert sent[0].startswith("WATCHDOG=1\nSTATUS=waiting for the broker since ")
    agent.celery_worker.loop_alive()
    agent.celery_worker.loop_alive()
    assert sent[2:] == ["WATCHDOG=1\nSTATUS=consuming (worker1@h)", "WATCHDOG=1"]


def test_a_message_redis_handed_out_as_it_went_away_is_kept_and_put_back_at_the_head_of_its_queue(agent, monkeypatch):
    # The boundary that cannot run here: kombu's Redis transport, whose QoS.append (recording a popped message as
    # unacknowledged) meets a broker that has just gone away.
    import sys
    import types

    class Gone(Exception):
        pass

    class QoS:
        def __init__(self):
            self.channel = types.SimpleNamespace(connection_errors=(Gone,))

        def append(self, message, delivery_tag):
            raise Gone("Connection closed by server.")

    transport = types.ModuleType("kombu.transport.redis")
    transport.QoS = QoS
    monkeypatch.setitem(sys.modules, "kombu.transport.redis", transport)
    monkeypatch.setitem(sys.modules, "kombu.transport", types.SimpleNamespace(redis=transport))
    agent.celery_worker.keep_messages_popped_as_the_broker_left()
    agent.celery_worker.keep_messages_popped_as_the_broker_left()  # once only
    message = types.SimpleNamespace(_raw={"body": "b", "headers": {"id": "t1"}},
                                    delivery_info={"exchange": "", "routing_key": "default"})
    # kombu still sees the connection error (it reconnects as before); the message is kept.
    with pytest.raises(Gone):
        QoS().append(message, "tag-1")
    assert agent.core.STATE["popped"] == [({"body": "b", "headers": {"id": "t1"}}, "", "default")]

    pushed, said = [], []
    log = types.SimpleNamespace(warning=lambda msg, *args: said.append(msg % args))

    class Pipe:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self):
            pushed.append("executed")

    class Channel:
        client = types.SimpleNamespace(pipeline=Pipe)

        def _do_restore_message(self, payload, exchange, routing_key, pipe, leftmost=False):
            pushed.append((payload["headers"]["id"], exchange, routing_key, leftmost))

    class Conn:
        up = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def ensure_connection(self, **_):
            if not Conn.up:
                raise Gone("Error 111 connecting to broker:6379. Connection refused.")

        default_channel = Channel()

    app = types.SimpleNamespace(connection_for_write=Conn)
    # The broker still away: nothing put back, the message still kept, and said so.
    assert agent.celery_worker.push_back_popped(app, log) == 0
    assert pushed == [] and len(agent.core.STATE["popped"]) == 1 and "1 message(s)" in said[-1]
    # Back: put back at the head of its queue in one pipeline, and no longer kept.
    Conn.up = True
    assert agent.celery_worker.push_back_popped(app, log) == 1
    assert pushed == [("t1", "", "default", True), "executed"] and agent.core.STATE["popped"] == []
    assert "put 1 message(s)" in said[-1]
    assert agent.celery_worker.push_back_popped(app, log) == 0


def test_a_hooked_worker_writes_its_stacks_to_the_journal_when_its_watchdog_kills_it(agent, monkeypatch):
    import faulthandler

    was = faulthandler.is_enabled()
    faulthandler.disable()
    try:
        # The hooks themselves fail (no Celery here): the stacks are already set up by then.
        monkeypatch.setitem(__import__("sys").modules, "celery", None)
        agent.activate({"STURDY_AGENT": "celery"})
        assert faulthandler.is_enabled()
    finally:
        faulthandler.disable()
        if was:
            faulthandler.enable()


def test_every_kombu_retry_in_the_worker_feeds_the_watchdog_a_heartbeat_publish_too(agent, monkeypatch):
    # The boundary that cannot run here: kombu's retry_over_time, which blocks the worker's event loop while the broker
    # is away, whoever calls it (the consumer's reconnect with its callback, a heartbeat's publish with none).
    import sys
    import types

    calls = []

    def retry_over_time(fun, catch, args=None, kwargs=None, errback=None, max_retries=None, interval_start=2,
                        interval_step=2, interval_max=30, callback=None, timeout=None):
        for dummy in range(3):  # three seconds of retrying
            if callback:
                callback()
        calls.append((max_retries, timeout))
        return fun()

    kombu = types.ModuleType("kombu")
    kombu.connection = types.SimpleNamespace(retry_over_time=retry_over_time)
    monkeypatch.setitem(sys.modules, "kombu", kombu)
    sent = []
    monkeypatch.setattr(agent.celery_worker, "notify", sent.append)
    monkeypatch.setitem(agent.core.STATE, "watchdog", object())
    agent.celery_worker.feed_while_kombu_retries()
    agent.celery_worker.feed_while_kombu_retries()  # once only
    patched = kombu.connection.retry_over_time
    # As kombu's _ensure_connection calls it: every argument positional, no callback (a publish's retry).
    assert patched(lambda: "connected", (OSError,), (), {}, None, 3, 2, 2, 30, None, timeout=None) == "connected"
    assert len(sent) == 3 and all(m.startswith("WATCHDOG=1\nSTATUS=waiting for the broker") for m in sent)
    # The consumer's reconnect: its own callback (Celery's maybe_shutdown) still runs.
    shutdown_checks = []
    patched(lambda: "ok", (OSError,), callback=lambda: shutdown_checks.append(1), max_retries=None)
    assert len(shutdown_checks) == 3 and len(sent) == 6 and calls == [(3, None), (None, None)]


def test_a_stopping_worker_feeds_its_watchdog_from_a_thread_until_it_exits(agent, monkeypatch):
    # The warm shutdown's drain blocks the event loop (the pool's join) for as long as the running task takes.
    import time

    sent = []
    monkeypatch.setattr(agent.celery_worker, "notify", sent.append)
    monkeypatch.delitem(agent.core.STATE, "stop_feeder", raising=False)
    assert agent.celery_worker.feed_while_stopping({}) is None  # no WatchdogSec=: nothing to feed
    thread = agent.celery_worker.feed_while_stopping({"WATCHDOG_USEC": "20000"})  # 20 ms: fed every 10 ms
    assert thread.daemon and agent.celery_worker.feed_while_stopping({"WATCHDOG_USEC": "20000"}) is None  # once
    time.sleep(0.2)
    assert sent.count("WATCHDOG=1") >= 5, sent
