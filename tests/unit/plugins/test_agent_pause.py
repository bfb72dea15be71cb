"""The agent's side of a pause (sturdy.workers.pause): the marker beside the releases, Celery's task consumers and
RQ's pops, each at a boundary that cannot run here (a consumer, a worker)."""

from __future__ import annotations

import json


def fresh(agent, monkeypatch):
    monkeypatch.delitem(agent.core.STATE, "pause_seen", raising=False)
    monkeypatch.delitem(agent.core.STATE, "pause_file", raising=False)
    monkeypatch.delitem(agent.core.STATE, "paused", raising=False)


def test_the_marker_beside_the_releases_pauses_the_process_types_it_names(agent, tmp_path, monkeypatch):
    fresh(agent, monkeypatch)
    monkeypatch.setenv("STURDY_PROCESS", "worker")
    marker = tmp_path / ".paused"
    assert agent.core.pause_file() == str(marker)
    assert agent.core.paused_here(now=0.0) is None
    marker.write_text(json.dumps({"owner": "alice@ci", "processes": [], "started": "t0"}))
    # Read at most once a second: still the answer of the last read.
    assert agent.core.paused_here(now=0.5) is None
    assert agent.core.paused_here(now=1.0)["owner"] == "alice@ci"
    marker.write_text(json.dumps({"owner": "alice@ci", "processes": ["mailer"]}))
    assert agent.core.paused_here(now=2.0) is None
    marker.write_text(json.dumps({"owner": "alice@ci", "processes": ["mailer", "worker"]}))
    assert agent.core.paused_here(now=3.0) is not None
    # Someone meant to pause: a marker that cannot be read still pauses.
    marker.write_text("{half")
    assert "cannot be read as JSON" in agent.core.paused_here(now=4.0)["message"]
    marker.unlink()
    assert agent.core.paused_here(now=5.0) is None


class Queue:
    def __init__(self, name):
        self.name = name


class Consumer:
    """Celery's consumer as follow_pause uses it: its task consumer's queues, cancel and add by name."""

    def __init__(self, *names):
        self.task_consumer = type("TaskConsumer", (), {"queues": [Queue(n) for n in names]})()
        self.calls = []
        calls = self.calls
        # The app's queues as cancel_task_queue leaves them: none of the task queues selected.
        self.app = type("App", (), {"amqp": type("Amqp", (), {"queues": type("Queues", (), {
            "consume_from": {"reports": 1}, "select": lambda self, names: calls.append(("select", names))})()})()})()

    def cancel_task_queue(self, name):
        self.calls.append(("cancel", name))

    def add_task_queue(self, name):
        self.calls.append(("add", name))


def test_celery_cancels_its_task_queues_while_paused_and_takes_them_again_after(agent, tmp_path, monkeypatch):
    fresh(agent, monkeypatch)
    said = []
    monkeypatch.setattr(agent.celery_worker, "notify", said.append)
    clock = iter(range(0, 100, 2))
    real = agent.core.paused_here
    monkeypatch.setattr(agent.celery_worker, "paused_here", lambda: real(now=float(next(clock))))
    consumer = Consumer("default", "emails")
    agent.celery_worker.follow_pause(consumer)
    assert consumer.calls == [] and said == []
    (tmp_path / ".paused").write_text(json.dumps({"owner": "alice@ci", "started": "t0", "processes": []}))
    agent.celery_worker.follow_pause(consumer)
    agent.celery_worker.follow_pause(consumer)  # once only
    assert consumer.calls == [("cancel", "default"), ("cancel", "emails")]
    assert said == ["STATUS=paused by alice@ci since t0: taking no message from default, emails (its smoke queue "
                    "stays consumed)"]
    # The watchdog's feed after a broker outage keeps saying so.
    assert agent.celery_worker.consuming_status().startswith("paused by alice@ci")
    (tmp_path / ".paused").unlink()
    agent.celery_worker.follow_pause(consumer)
    # Selected again (a task consumer rebuilt after a lost connection consumes them too), then consumed.
    assert consumer.calls[2:] == [("select", ["reports", "default", "emails"]), ("add", "default"), ("add", "emails")]
    assert said[-1].startswith("STATUS=consuming")
    # Between a lost connection and the next there is no task consumer: nothing to do.
    consumer.task_consumer = None
    agent.celery_worker.follow_pause(consumer)


def test_a_celery_worker_started_while_paused_selects_none_of_its_task_queues(agent, tmp_path, monkeypatch):
    fresh(agent, monkeypatch)
    deselected = []
    queues = type("Queues", (), {"consume_from": {"default": 1, "emails": 2}, "deselect": deselected.extend})()
    app = type("App", (), {"amqp": type("Amqp", (), {"queues": queues})()})()
    agent.celery_worker.pause_at_start(app)
    assert deselected == []
    monkeypatch.delitem(agent.core.STATE, "pause_seen")
    (tmp_path / ".paused").write_text(json.dumps({"owner": "bob", "processes": []}))
    agent.celery_worker.pause_at_start(app)
    assert deselected == ["default", "emails"] and agent.core.STATE["paused"][1] == ["default", "emails"]


def test_rq_pops_only_its_smoke_queue_while_paused(agent, tmp_path, monkeypatch):
    fresh(agent, monkeypatch)
    for key, value in (("STURDY_APP", "parcel"), ("STURDY_PROCESS", "worker"), ("STURDY_INSTANCE", "1")):
        monkeypatch.setenv(key, value)
    said = []
    monkeypatch.setattr(agent.rq_worker, "notify", said.append)
    clock = iter(range(0, 100, 2))
    real = agent.core.paused_here
    monkeypatch.setattr(agent.rq_worker, "paused_here", lambda: real(now=float(next(clock))))
    smoke = agent.core.own_smoke_queue()
    worker = type("Worker", (), {"queue_class": type("Q", (), {"redis_queue_namespace_prefix": "rq:queue:"}),
                                 "queue_names": lambda self: [smoke, "parcel.scales"]})()
    keys = [f"rq:queue:{smoke}", "rq:queue:parcel.scales"]
    assert agent.rq_worker.follow_pause(worker, keys) == keys
    (tmp_path / ".paused").write_text(json.dumps({"owner": "bob", "started": "t1", "processes": ["worker"]}))
    assert agent.rq_worker.follow_pause(worker, keys) == [f"rq:queue:{smoke}"]
    assert said == ["STATUS=paused by bob since t1: taking no message from parcel.scales (its smoke queue stays "
                    "consumed)"]
    (tmp_path / ".paused").unlink()
    assert agent.rq_worker.follow_pause(worker, keys) == keys
    assert said[-1] == f"STATUS=listening on {smoke}, parcel.scales"
