"""What the task_compat module calls orphaned work, and how it says so."""

from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.modules.task_compat import orphaned, refusal


def test_only_waiting_names_the_new_build_does_not_register_are_orphaned():
    waiting = [{"queue": "default", "tasks": {"shop.refund": 3, "shop.record": 40}},
               {"queue": "mail", "tasks": {"shop.refund": 1}},
               {"queue": "bulk", "error": "the transport shows no waiting message"}]
    assert orphaned(waiting, ["shop.record", "sturdy.smoke"]) == ({"shop.refund": {"default": 3, "mail": 1}}, {})
    assert orphaned(waiting, ["shop.record", "shop.refund"]) == ({}, {})


def test_the_refusal_lists_every_name_queue_and_count_and_the_ways_on():
    found = {"shop.refund": {"mail": 1, "default": 3}, "shop.audit": {"default": 2}}
    text = refusal("b2", "b1", found, ["shop.refund", "shop.record"])
    assert text.startswith("Build b2 does not register task(s) that queued messages are waiting for (shop.audit: 2 "
                           "waiting in default; shop.refund: 3 waiting in default, 1 waiting in mail): its workers "
                           "would move that work to the dead-letter queue. The running build b1 registers "
                           "shop.refund. Nothing was switched.")
    assert "sturdy_deploy_allow_orphaned_tasks=true" in text
    assert "does not register them either" in refusal("b2", "b1", found, ["shop.record"])
    assert "The running build" not in refusal("b2", "", found, None)


def test_on_a_broker_that_shows_no_message_a_dropped_name_with_messages_queued_is_refused_with_the_depth():
    waiting = [{"queue": "default", "depth": 7, "error": "the amqp broker shows no waiting message...", "tasks": {}},
               {"queue": "mail", "depth": 0, "error": "the amqp broker shows no waiting message...", "tasks": {}}]
    running = ["shop.record", "shop.refund"]
    assert orphaned(waiting, ["shop.record"], running) == ({}, {"shop.refund": {"default": 7}})
    # Nothing dropped, or no running build to compare with: nothing to refuse.
    assert orphaned(waiting, running, running) == ({}, {})
    assert orphaned(waiting, ["shop.record"], None) == ({}, {})
    text = refusal("b2", "b1", {}, running, {"shop.refund": {"default": 7}})
    assert "shop.refund: registered by the running build b1, and default holds 7 message(s)" in text
    assert "sturdy_deploy_allow_orphaned_tasks=true" in text and "does not register them either" not in text
