from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.queue_readers import queue_readers


def plan(*processes):
    return {"plan": {"processes": list(processes)}}


CELERY = {"adapter": "celery", "celery_app": "shop.celery", "queues": ["default", "mail"]}


def test_each_queue_is_read_from_the_first_host_that_has_it():
    hostvars = {
        "web1": plan({"adapter": "web"}),
        "w1": plan(CELERY),
        "w2": plan(CELERY),
        "w3": plan(CELERY | {"queues": ["mail", "reports"]}),
        "r1": plan({"adapter": "rq", "queues": ["default"]}),
        "none": {},
    }
    assert queue_readers(list(hostvars), hostvars, "plan") == ["w1", "w3", "r1"]


def test_no_host_with_queues_reads_nothing():
    assert queue_readers(["a"], {"a": plan({"adapter": "web"})}, "plan") == []
