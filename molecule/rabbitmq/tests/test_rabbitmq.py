"""The deploy pipeline's main cases on RabbitMQ: quorum queues, the broker's own delivery ceiling set by the deploy,
dead letters, the task-name check and a rate-limited backlog. Converge deployed build 1; the tests run in order."""

from __future__ import annotations

import json

import yaml

from testhosts import flood, unit_states
from conftest import (EPHEMERAL, SCENARIO_DIR, SECRETS, WORKER_UNITS, WORKERS, current, dead_letters, deploy, host, playbook,
                      rabbitmqctl, report, said, shop_task, wait_for, while_tasks_flow)

B1, B2, B5 = "2026.11.29-1", "2026.11.29-2", "2026.11.29-5"
POLICY = {"delivery-limit": 3, "dead-letter-exchange": "", "dead-letter-routing-key": "sturdy.dead.default"}


# The mailer runs the app with no result backend: its smoke jobs are answered through RabbitMQ (rpc://).
MAILER = "shop-mailer@1.service"


def every_instance_answered(build: str) -> None:
    rep = report()
    assert rep["result"] == "success" and rep["build_id"] == build, rep.get("failure")
    for name in WORKERS:
        for unit in [*WORKER_UNITS, MAILER]:
            assert rep["hosts"][name]["instances"][unit]["smoke_build"] == build, (name, unit)
    mail = rep["queues"]["mail"]["smoke"]
    assert mail["ok"] and mail["answer"]["build_id"] == build, mail


def test_first_deploy_every_instance_answered_and_the_queue_got_rabbitmqs_own_ceiling():
    # Readiness, the per-instance smoke jobs and the real-queue smoke job, all through RabbitMQ.
    every_instance_answered(B1)
    queues = {q["name"]: q["type"] for q in rabbitmqctl("list_queues", "name", "type")}
    assert queues["default"] == "quorum" and queues["sturdy.dead.default"] == "classic", queues
    (policy,) = [p for p in rabbitmqctl("list_policies") if p["name"] == "sturdy-shop-default"]
    assert (policy["pattern"], policy["apply-to"], json.loads(policy["definition"])) == ("^default$", "queues", POLICY)
    # The report tells the queue after the deploy: its backlog, its rate limit, its dead letters.
    queue = report()["queues"]["default"]
    assert (queue["depth"], queue["rate_limit"], queue["dead_letter_depth"], queue["error"]) == (0, 20, 0, None), queue


def test_a_rabbitmq_host_outside_the_inventory_is_refused_in_preflight_naming_the_variable():
    result = deploy(B5, sturdy_deploy_rabbitmq={"host": "rabbit-9", "vhost": "shop"})
    assert result.returncode != 0
    text = said(result)
    assert "sturdy_deploy_rabbitmq.host=rabbit-9 is not a host of this inventory" in text, text[-3000:]
    assert "Nothing was changed" in text
    assert all(current(name) == B1 for name in WORKERS)
    assert not host("mq-bookworm").file(f"/srv/shop/releases/{B5}").exists


def test_a_deploy_to_every_host_is_refused_naming_the_broker_host_that_runs_none_of_the_app():
    result = playbook("sturdy.workers.deploy", sturdy_build_id=B5,
                      sturdy_artifact=str(EPHEMERAL / "dist" / f"shop-{B5}.tar.gz"))
    assert result.returncode != 0
    text = said(result)
    assert "mq-broker declares no process (sturdy_processes is empty there)" in text, text[-3000:]
    assert "-e sturdy_deploy_hosts=workers:web" in text and "Nothing was changed" in text
    assert not host("mq-broker").file("/srv/shop").exists
    assert all(current(name) == B1 for name in WORKERS)


DECLARE_CLASSIC = """
from kombu import Queue
from shopdemo.celery import app
with app.connection_for_write() as conn:
    Queue("legacy", routing_key="legacy").declare(channel=conn.default_channel)
"""


def test_a_classic_queue_is_refused_before_the_switch_saying_how_to_move_to_a_quorum_queue():
    host("mq-bookworm").check_output(f"/usr/local/sbin/shop-task --python <<'EOF'\n{DECLARE_CLASSIC}EOF")
    worker = {"name": "worker", "adapter": "celery", "celery_app": "shopdemo.celery", "queues": ["default", "legacy"],
              "command": ["bin/shop-worker", "--concurrency", "1", "-Q", "default,legacy"], "instances": 2,
              "max_deliveries": 3, "max_task_runtime": 30}
    try:
        result = deploy(B5, sturdy_processes=[worker])
        assert result.returncode != 0
        text = said(result)
        assert "RabbitMQ queue(s) legacy in vhost shop are classic queues" in text, text[-3000:]
        assert "task_default_queue_type" in text and "Nothing was switched" in text
        assert all(current(name) == B1 for name in WORKERS)
        assert not [p for p in rabbitmqctl("list_policies") if p["name"] == "sturdy-shop-legacy"]
    finally:
        host("mq-broker").run("rabbitmqctl --quiet delete_queue --vhost shop legacy")


def test_deploy_5_while_tasks_flow_loses_none_and_leaves_the_policy_as_it_is():
    result, flow = while_tasks_flow("mq-bookworm", "flow", lambda: deploy(B5))
    assert set(flow["builds"]) == {B1, B5}, flow["builds"]
    every_instance_answered(B5)
    # Set once: a deploy that finds the policy as it should be does not set it again.
    (dummy, task_output) = result.stdout.split("Set each queue's delivery limit and dead-letter queue", 1)
    assert "changed:" not in task_output.split("TASK [", 1)[0], task_output[:2000]


def test_a_poison_task_stops_after_max_deliveries_while_a_2000_task_backlog_drains_once_each_at_the_rate_limit():
    # rate_limit 20/s over four instances; max_deliveries 3. The poison task SIGKILLs the pool process that runs it.
    before = unit_states(WORKERS, WORKER_UNITS)
    sent = flood("mq-trixie")
    # RabbitMQ counted the deliveries (x-delivery-count); the agent moved the fourth, with its reason.
    assert (sent["poison_state"], sent["poison_runs"]) == ("FAILURE", 3), sent
    poison = [e for e in dead_letters()["sample"] if e["id"] == sent["poison_id"]]
    assert poison and poison[0]["deliveries"] == 4, poison
    assert poison[0]["reason"].startswith("delivered 4 times without an acknowledgement (max_deliveries=3)")
    assert unit_states(WORKERS, WORKER_UNITS) == {key: (True, n) for key, (dummy, n) in before.items()}


RETURN_UNTIL_DEAD = """
import json, time
from shopdemo.celery import app
with app.connection_for_write() as conn:
    channel, returned = conn.channel(), 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = channel.basic_get("default", no_ack=False)
        if message is None:
            if channel.queue_declare("sturdy.dead.default", passive=True).message_count:
                break
            time.sleep(0.2)
            continue
        channel.basic_reject(message.delivery_tag, requeue=True)
        returned += 1
print(json.dumps({"returned": returned}))
"""


def test_rabbitmq_itself_dead_letters_for_a_consumer_without_the_agent():
    # A consumer the agent is not in (another app's worker, an old one) returns a message again and again: the
    # deploy's policy stops it after delivery-limit returns and RabbitMQ moves it to sturdy.dead.default.
    shop_task("--agent dead discard --confirm-discard --celery-app shopdemo.celery default")
    for name in WORKERS:
        host(name).check_output("systemctl stop " + " ".join(WORKER_UNITS))
    try:
        sent = host("mq-bookworm").check_output("/usr/local/sbin/shop-task --send shopdemo.record broker-dl")
        out = host("mq-bookworm").check_output(f"/usr/local/sbin/shop-task --python <<'EOF'\n{RETURN_UNTIL_DEAD}EOF")
        assert json.loads(out.splitlines()[-1]) == {"returned": 4}, out
        # Returned 4 times: delivery-limit 3 (RabbitMQ does not stamp its count on what it dead-letters).
        (entry,) = dead_letters()["sample"]
        assert entry["id"] == sent.splitlines()[-1], entry
        assert entry["reason"].startswith("delivered more times than the queue's delivery-limit allows"), entry
    finally:
        for name in WORKERS:
            host(name).run("systemctl start " + " ".join(WORKER_UNITS))
    shop_task("--agent dead discard --confirm-discard --celery-app shopdemo.celery default")


def dead_letters_playbook(**extra):
    report_file = EPHEMERAL / "dead-letters.json"
    report_file.unlink(missing_ok=True)
    result = playbook("sturdy.workers.dead_letters", sturdy_status_hosts="workers", **extra)
    return result, json.loads(report_file.read_text()) if report_file.exists() else {}


def test_a_dropped_task_with_messages_queued_is_refused_then_dead_lettered_then_requeued_to_a_build_that_knows_it():
    for name in WORKERS:
        host(name).check_output("systemctl stop " + " ".join(WORKER_UNITS))
    try:
        ids = [host("mq-bookworm").check_output(f"/usr/local/sbin/shop-task --send shopdemo.refund orphan-{n}")
               .splitlines()[-1] for n in range(3)]
        # Build 2 drops shopdemo.refund, which the running build 5 registers, and default holds 3 messages: RabbitMQ
        # shows none without delivering it, so the deploy refuses on the depth, before the migration and the switch.
        refused = deploy(B2)
        assert refused.returncode != 0
        text = said(refused)
        assert (f"Build {B2} does not register task(s) that queued messages may be waiting for (shopdemo.refund: "
                f"registered by the running build {B5}, and default holds 3 message(s)") in text, text[-3000:]
        assert "sturdy_deploy_allow_orphaned_tasks=true" in text and "Nothing was switched" in text
        assert all(current(name) == B5 for name in WORKERS)
        # Told to, it deploys; build 2's workers move the three to the dead-letter queue, once each.
        result = deploy(B2, sturdy_deploy_allow_orphaned_tasks=True)
        assert result.returncode == 0, said(result)[-3000:]
    finally:
        for name in WORKERS:
            host(name).run("systemctl start " + " ".join(WORKER_UNITS))
    got = wait_for("three orphans in sturdy.dead.default", lambda: (d := dead_letters())["count"] == 3 and d, 60)
    assert got["reasons"] == {f"unknown task shopdemo.refund in build {B2}": 3}, got
    # Build 5 knows shopdemo.refund again: requeued, each runs once.
    result = deploy(B5)
    assert result.returncode == 0, said(result)[-3000:]
    result, moved = dead_letters_playbook(sturdy_dead_letters_action="requeue")
    assert result.returncode == 0, said(result)[-3000:]
    assert moved["queues"][0]["moved"] == 3, moved

    def states():
        return {t["state"] for t in shop_task("--agent tasks --celery-app shopdemo.celery " + " ".join(ids))}

    wait_for("the requeued refunds ran", lambda: states() == {"SUCCESS"}, 60)
    assert dead_letters()["count"] == 0
    # Discard refuses without its flag.
    refused, dummy = dead_letters_playbook(sturdy_dead_letters_action="discard")
    assert refused.returncode != 0 and "sturdy_dead_letters_confirm_discard" in said(refused), said(refused)[-2000:]


def test_a_new_process_type_whose_instance_cannot_start_is_named_with_why_on_the_canary_alone():
    processes = yaml.safe_load((SCENARIO_DIR / "inventory" / "group_vars" / "workers.yml").read_text())["sturdy_processes"]
    broken = {"name": "broken", "adapter": "celery", "celery_app": "shopdemo.celery", "queues": ["broken"],
              "command": ["venv/bin/celery", "-A", "shopdemo.nosuch", "worker", "-Q", "broken"], "max_task_runtime": 30}
    try:
        result = deploy(B5, sturdy_processes=[*processes, broken])
        assert result.returncode != 0
        text = said(result)
        # Not only systemd's "see systemctl status": the instance's own words, through the diagnosis (masked).
        assert "shop-broken@1.service did not start on mq-bookworm" in text, text[-3000:]
        assert "The module shopdemo.nosuch was not found" in text, text[-3000:]
        assert "sturdy.workers.diagnose -e sturdy_diagnose_unit=shop-broken@1.service" in text, text[-3000:]
        # The canary failed: the other host never got the new process type.
        assert not host("mq-trixie").file("/etc/systemd/system/shop-broken@.service").exists
    finally:
        host("mq-bookworm").run("systemctl disable --now shop-broken@1.service; systemctl reset-failed 'shop-broken@*';"
                                " rm -f /etc/systemd/system/shop-broken@.service; systemctl daemon-reload")


def test_no_secret_value_is_anywhere_in_the_ansible_log_of_the_whole_scenario():
    log = (EPHEMERAL / "ansible.log").read_text(errors="replace")
    assert "********" in log
    assert not [s for s in SECRETS if s in log]
