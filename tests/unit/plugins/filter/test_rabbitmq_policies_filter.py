from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.rabbitmq_policies import rabbitmq_policies


def plan(*processes):
    return {"app": "shop", "processes": list(processes)}


def celery(name, queues, **extra):
    return {"name": name, "adapter": "celery", "celery_app": "shop.celery", "queues": queues, **extra}


def test_one_policy_per_queue_matching_only_it_with_the_ceiling_and_its_dead_letter_queue():
    got = rabbitmq_policies([plan(celery("worker", ["default", "mail.out"], max_deliveries=3),
                                  {"name": "web", "adapter": "none", "queues": []})])
    assert got == [
        {"name": "sturdy-shop-default", "queue": "default", "pattern": "^default$",
         "definition": {"delivery-limit": 3, "dead-letter-exchange": "",
                        "dead-letter-routing-key": "sturdy.dead.default"}},
        {"name": "sturdy-shop-mail.out", "queue": "mail.out", "pattern": r"^mail\.out$",
         "definition": {"delivery-limit": 3, "dead-letter-exchange": "",
                        "dead-letter-routing-key": "sturdy.dead.mail.out"}},
    ]


def test_hosts_and_process_types_sharing_a_queue_give_one_policy_with_the_lowest_ceiling():
    hosts = [plan(celery("worker", ["default"])), plan(celery("worker", ["default"])),
             plan(celery("bulk", ["default", "bulk"], max_deliveries=2)), {}]
    got = {p["queue"]: p["definition"]["delivery-limit"] for p in rabbitmq_policies(hosts, max_deliveries=7)}
    assert got == {"default": 2, "bulk": 2}
    assert rabbitmq_policies([plan(celery("worker", ["default"]))], max_deliveries=7)[0]["definition"][
        "delivery-limit"] == 7
    assert rabbitmq_policies([]) == []
