"""A release is a build and its config: a refused deploy changes nothing the running units read, and a rollback
restores both. Each test starts from build 1 with the inventory's declaration and TOKEN_A (converge.yml) and leaves
the hosts there."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from conftest import (
    B1,
    B2,
    B3,
    B4,
    B5,
    BOOKWORM,
    SECRET,
    TOKEN_A,
    TOKEN_B,
    TOKEN_C,
    TRIXIE,
    WORKERS,
    deploy,
    deploy_cmd,
    everything_read,
    host,
    instances,
    live_release,
    playbook,
    report,
    restarted_answers,
    running_build,
    said,
    secrets,
    sha,
    task,
    token_seen,
    wait_for,
    worker,
)

UNITS = ["shop-worker@1.service", "shop-worker@2.service"]
# The changed config every refused deploy below carries besides its cause: a rotated secret and another declaration
# (three instances, an environment value).
CHANGED = {"sturdy_secrets": secrets(TOKEN_B), "sturdy_processes": [worker(instances=3, SHOP_MARK="new")]}


def on_build_1() -> bool:
    return all(instances(name) == UNITS and all(running_build(name, unit) == B1 and token_seen(name, unit) == sha(TOKEN_A)
                                                for unit in UNITS) for name in WORKERS)


@pytest.fixture(autouse=True)
def from_build_1():
    """Each test starts from build 1 with its config, as converged: a test that failed midway does not fail the next."""
    if not on_build_1():
        for name in WORKERS:
            host(name).run("rm -f /srv/shop/.deploy.lock; systemctl reset-failed 'shop-*'")
        result = deploy(B1)
        assert result.returncode == 0 and on_build_1(), said(result)[-3000:]


def on_build_1_as_converged() -> None:
    for name in WORKERS:
        assert instances(name) == UNITS, name
        for unit in UNITS:
            assert running_build(name, unit) == B1 and token_seen(name, unit) == sha(TOKEN_A), (name, unit)


def lose_the_other_host() -> subprocess.CompletedProcess:
    """Deploy build 5 and stop answering on trixie (the second batch) while the canary, bookworm, restarts."""
    run = subprocess.Popen(deploy_cmd(B5, **CHANGED), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(f"{BOOKWORM}'s first instance on build 5", lambda: running_build(BOOKWORM, UNITS[0]) == B5, 300)
        subprocess.run(["podman", "stop", "-t", "0", TRIXIE], check=True, capture_output=True)
        out = run.communicate(timeout=600)[0]
    finally:
        if run.poll() is None:
            run.kill()
        subprocess.run(["podman", "start", TRIXIE], check=True, capture_output=True)
    trixie = host(TRIXIE)
    wait_for(f"{TRIXIE} back with its instances", lambda: all(
        trixie.run(f"systemctl is-active {unit}").rc == 0 for unit in UNITS), 180)
    # It was never switched; the lock of the run that lost it stays until a deploy takes it over.
    trixie.check_output("rm -f /srv/shop/.deploy.lock")
    return subprocess.CompletedProcess(run.args, run.returncode, out, "")


# Every way a deploy ends before or at the canary, with a changed secret and declaration, and what the run says.
WAYS = {
    "a failed migration": (lambda: deploy(B5, sturdy_migrate_environment={"SHOP_MIGRATION_FAIL": "1"}, **CHANGED),
                           "migration failed on purpose"),
    # An absolute command that is not on the hosts, with the preflight's look for it turned off (it refuses it before
    # any change, tests/test_config_bad_input.py): systemd-analyze refuses the unit when the release is installed.
    "a unit systemd refuses": (lambda: deploy(B5, sturdy_worker_check_paths=False, **CHANGED | {"sturdy_processes": [
        *CHANGED["sturdy_processes"], {"name": "mailer", "command": ["/usr/local/bin/no-such-mailer"]}]}),
        "systemd-analyze verify refused shop-mailer@.service"),
    # The canary's instances start and consume, but from a working directory outside the release: its smoke jobs
    # fail, it is rolled back.
    "a failed smoke on the canary": (lambda: deploy(B5, **CHANGED | {"sturdy_processes": [
        worker(instances=3, SHOP_MARK="new") | {"working_directory": "/tmp"}]}),
        "its working directory /tmp is outside"),
    "a lost host": (lose_the_other_host, "the host cannot be reached"),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_deploy_that_ends_before_or_at_the_canary_leaves_what_the_running_units_read_byte_identical(way):
    on_build_1_as_converged()
    before = everything_read()
    run, why = WAYS[way]
    result = run()
    assert result.returncode != 0
    assert why in said(result), said(result)[-3000:]
    assert SECRET not in result.stdout + result.stderr
    assert everything_read() == before
    # A crash, an OOM kill or a reboot restarts an instance hours later: it comes back as it ran.
    for name in WORKERS:
        assert instances(name) == UNITS, name
        restarted_answers(name, UNITS[0], B1, TOKEN_A)


def test_a_surge_instance_that_fails_stops_the_rollout_before_any_running_instance_is_touched():
    # Celery with a surge: build 4 crashes as an instance starts (its app imports for the task-name check). With
    # max_surge 1, the canary starts shop-worker@3 on build 4 beside its two running instances: it never becomes
    # ready, so the rollout stops there, neither running instance is stopped, and the canary goes back.
    on_build_1_as_converged()
    before = everything_read()
    running = {name: invocation_ids(name) for name in WORKERS}
    declared = [{**unlimited(2)[0], "max_surge": 1}]
    result = deploy(B4, sturdy_secrets=secrets(TOKEN_B), sturdy_processes=declared)
    text = said(result)
    assert result.returncode != 0
    assert ("shop-worker@3.service (a surge instance, started beside the running ones before any of them was stopped) "
            "did not come up on the new code") in text, text[-3000:]
    assert "No running instance of its process type was stopped" in text, text[-3000:]
    assert SECRET not in result.stdout + result.stderr
    rep = report()
    assert rep["result"] == "rolled_back" and rep["hosts"][BOOKWORM]["rolled_back_to"] == B1, rep["message"]
    # The two instances on each host run as they ran before the deploy: the same invocation, build 1, the old token.
    assert {name: invocation_ids(name) for name in WORKERS} == running
    assert everything_read() == before
    for name in WORKERS:
        assert instances(name) == UNITS, name
        assert all(running_build(name, unit) == B1 for unit in UNITS), name


def test_a_broker_that_does_not_answer_is_refused_before_any_change_naming_what_to_check():
    # Build 5 with another config, Redis stopped: the preflight's look at the broker refuses the deploy on every host.
    # Past that look (sturdy_deploy_broker empty, as if the broker went as the deploy began), the task-name check
    # cannot read the queues: it says the broker could not be reached and what to check, not that the app does not
    # import. Either way nothing the running units read changed and nothing restarted.
    on_build_1_as_converged()
    before, running = everything_read(), {name: invocation_ids(name) for name in WORKERS}
    broker = host("config-broker")
    try:
        broker.check_output("systemctl stop redis-server")
        refused = deploy(B5, **CHANGED)
        unchecked = deploy(B5, sturdy_deploy_broker={}, **CHANGED)
    finally:
        broker.check_output("systemctl start redis-server")
    assert refused.returncode != 0
    assert "The broker broker:6379 (sturdy_deploy_broker) does not answer from config-" in said(refused), \
        said(refused)[-3000:]
    text = said(unchecked)
    assert unchecked.returncode != 0
    assert "the task-name check of worker" in text and "could not reach the broker: rc 1: " in text, text[-3000:]
    assert "check that the broker runs and that config-" in text and "does the app import" not in text, text[-3000:]
    assert SECRET not in refused.stdout + refused.stderr + unchecked.stdout + unchecked.stderr
    assert everything_read() == before
    assert {name: invocation_ids(name) for name in WORKERS} == running
    for name in WORKERS:
        assert task(name, f"broker-back-{name}")["build_id"] == B1


def test_smoke_jobs_name_a_broker_that_is_gone_and_end_at_their_limit_when_it_is_silent():
    # The smoke jobs a deploy sends last, sent by the smoke_test role on its own (smoke.yml) to the running build.
    # Redis stopped: they wait out their timeout and fail in the README's words, naming what to check, and nothing
    # restarts. Redis frozen (it takes connections and never answers): systemd stops the smoke client at twice the
    # timeout plus 30 s, and the failure says so; before, it waited forever.
    on_build_1_as_converged()
    running = {name: invocation_ids(name) for name in WORKERS}
    broker = host("config-broker")
    smoke = deploy_cmd(B1, playbook="smoke.yml", sturdy_smoke_test_timeout=4)
    try:
        broker.check_output("systemctl stop redis-server")
        gone = subprocess.run(smoke, capture_output=True, text=True, timeout=300, check=False)
        after_gone = {name: invocation_ids(name) for name in WORKERS}
        broker.check_output("systemctl start redis-server && systemctl kill -s STOP redis-server")
        began = time.monotonic()
        silent = subprocess.run(smoke, capture_output=True, text=True, timeout=300, check=False)
        took = time.monotonic() - began
    finally:
        # A frozen Redis must not outlive the test: woken, then restarted.
        broker.run("systemctl kill -s CONT redis-server")
        broker.check_output("systemctl restart redis-server")
    text = said(gone)
    assert gone.returncode != 0
    assert "could not reach the broker" in text and "check that the broker runs and that config-" in text, text[-3000:]
    text = said(silent)
    assert silent.returncode != 0 and took < 120, (took, text[-3000:])
    assert "stopped after 38 s without an answer: the broker takes connections and does not answer" in text, \
        text[-3000:]
    assert SECRET not in gone.stdout + gone.stderr + silent.stdout + silent.stderr
    # The first run restarted no instance. (While Redis is frozen, past WatchdogSec, systemd's watchdog may restart
    # one: after the second run the instances are only waited for.)
    assert after_gone == running
    for name in WORKERS:
        wait_for(f"{name}'s instances active", lambda n=name: host(n).run(
            f"systemctl is-active {' '.join(UNITS)}").stdout.split() == ["active"] * len(UNITS), 120)
        assert task(name, f"broker-back-{name}")["build_id"] == B1


def test_a_build_refused_for_the_tasks_messages_wait_for_leaves_what_the_running_units_read_byte_identical():
    # Messages for a task build 1 does not register wait while its workers are stopped (a producer on a newer build
    # sent them): a deploy of build 1 with another config is refused before anything switches.
    try:
        for name in WORKERS:
            host(name).check_output("systemctl stop shop-worker@1.service shop-worker@2.service")
        for n in range(2):
            host(BOOKWORM).check_output(f"/usr/local/sbin/shop-task --send shopdemo.refund cfg-orphan-{n}")
        before = everything_read()
        refused = deploy(B1, **CHANGED)
        assert refused.returncode != 0
        assert f"Build {B1} does not register task(s) that queued messages are waiting for" in said(refused), \
            said(refused)[-3000:]
        assert everything_read() == before
    finally:
        for name in WORKERS:
            host(name).run("systemctl start shop-worker@1.service shop-worker@2.service")
    for name in WORKERS:
        restarted_answers(name, UNITS[0], B1, TOKEN_A)
    # Build 1's workers moved the two messages to the dead-letter queue; they go, for the tests after this one.
    agent = "/usr/local/sbin/shop-task --agent dead {} --celery-app shopdemo.celery default"
    wait_for("the two messages dead-lettered", lambda: json.loads(host(BOOKWORM).check_output(
        agent.format("list")).splitlines()[-1])[0]["count"] == 2, 60)
    host(BOOKWORM).check_output(agent.format("discard --confirm-discard"))


def test_a_build_whose_app_does_not_import_is_refused_with_its_error_before_anything_switches():
    # Build 1's app given SHOP_CRASH_ON_IMPORT=1 by the new declaration raises at import (a RuntimeError naming the
    # broker URL, a secret): the task-name check imports it from the new release, with the new environment and
    # secrets, and refuses the deploy with the error's last lines, the secret masked.
    on_build_1_as_converged()
    before = everything_read()
    refused = deploy(B1, sturdy_secrets=secrets(TOKEN_B),
                     sturdy_processes=[worker(instances=3, SHOP_MARK="new", SHOP_CRASH_ON_IMPORT="1")])
    text = said(refused)
    assert refused.returncode != 0
    assert "could not tell the task names of worker" in text and "does the app import with this build's code" in text, \
        text[-3000:]
    assert f"RuntimeError: build {B1} is broken on purpose (crash-on-start variant), broker ********" in text, \
        text[-3000:]
    assert SECRET not in refused.stdout + refused.stderr
    assert everything_read() == before


def test_a_renamed_queue_and_more_instances_that_fail_are_rolled_back_and_the_old_queue_is_consumed_again():
    # Build 5 consumes `orders` only, three instances a host, while producers still send to `default` (declared): the
    # real-queue smoke fails once both hosts are switched (one batch), and both go back.
    result = deploy(B5, sturdy_deploy_serial=2, sturdy_processes=[worker(queues=("default", "orders"), consume="orders",
                                                                         instances=3)])
    assert result.returncode != 0
    text = said(result)
    assert "No worker took the smoke job sent to queue 'default'" in text, text[-3000:]
    rep = report()
    assert rep["result"] == "rolled_back" and all(rep["hosts"][n]["rolled_back_to"] == B1 for n in WORKERS), rep
    for name in WORKERS:
        assert instances(name) == UNITS, name
        assert "-Q default" in host(name).check_output("systemctl show -P ExecStart shop-worker@1.service")
    # The rollback's own smoke went through `default` again; and so does a producer's message.
    for name in WORKERS:
        assert task(name, f"old-queue-{name}")["build_id"] == B1
    on_build_1_as_converged()


def test_a_rollback_to_a_build_two_deploys_back_restores_its_units_declaration_and_secrets():
    assert deploy(B5, sturdy_secrets=secrets(TOKEN_B), sturdy_processes=[worker(instances=3)]).returncode == 0
    assert all(len(instances(name)) == 3 for name in WORKERS)
    scaled = deploy(B2, sturdy_secrets=secrets(TOKEN_C), sturdy_processes=[worker(instances=1)])
    assert scaled.returncode == 0, said(scaled)[-3000:]
    for name in WORKERS:
        assert instances(name) == UNITS[:1] and token_seen(name, UNITS[0]) == sha(TOKEN_C)
    # The report says what became of the two instances no longer declared, on each host.
    assert said(scaled).count(f"{UNITS[1]}: stopped (scaled down: no longer declared)") == len(WORKERS), \
        said(scaled)[-3000:]
    assert "state unknown" not in said(scaled)
    # A release no host keeps is refused on every host before any changes, naming the kept ones.
    refused = playbook("rollback", "-e", f"sturdy_rollback_to={B3}")
    assert refused.returncode != 0
    assert f"release {B3} is not kept here" in said(refused), said(refused)[-2000:]
    assert re.search(rf"newest first: {B2}, {B5}(~\d+)?, {B1}", said(refused)), said(refused)[-2000:]
    assert all(running_build(name, UNITS[0]) == B2 for name in WORKERS)
    result = playbook("rollback", "-e", f"sturdy_rollback_to={B1}")
    assert result.returncode == 0, said(result)[-3000:]
    on_build_1_as_converged()
    # The migrations of builds 5 and 2 ran since build 1 was live: the rollback says so, and leaves the schema.
    text = said(result)
    assert re.search(rf"the migration of release {B5}(~\d+)? \(bin/shop-migrate\) ran on {BOOKWORM}", text), text[-3000:]
    assert f"the migration of release {B2} (bin/shop-migrate) ran on {BOOKWORM}" in text
    assert "a rollback does not undo a migration" in text


def test_a_secret_rotation_is_a_release_and_the_readme_rollback_restores_the_old_value():
    (was,) = {live_release(name) for name in WORKERS}
    result = deploy(B1, sturdy_secrets=secrets(TOKEN_B))
    assert result.returncode == 0, said(result)[-3000:]
    rep = report()
    (name_of,) = {rep["hosts"][n]["release"] for n in WORKERS}
    assert name_of.startswith(f"{B1}~"), rep["hosts"]
    for name in WORKERS:
        for unit in UNITS:
            assert running_build(name, unit) == B1 and token_seen(name, unit) == sha(TOKEN_B), (name, unit)
    # The README's rollback, as written: back to the previous release, build 1 with TOKEN_A.
    result = playbook("rollback")
    assert result.returncode == 0, said(result)[-3000:]
    assert f"{name_of} -> {was}" in said(result), said(result)[-2000:]
    assert all(live_release(name) == was for name in WORKERS)
    on_build_1_as_converged()


def invocation_ids(name: str) -> dict[str, str]:
    return {unit: host(name).check_output(f"systemctl show -P InvocationID {unit}") for unit in UNITS}


def unlimited(instances: int) -> list[dict]:
    """The worker without its rate_limit: a limit is split between the instances, so their count is in each unit."""
    return [{k: v for k, v in worker(instances=instances).items() if k != "rate_limit"}]


def test_more_instances_is_a_release_that_restarts_none_and_its_rollback_stops_only_the_new_one():
    assert deploy(B1, sturdy_processes=unlimited(2)).returncode == 0
    before = {name: invocation_ids(name) for name in WORKERS}
    metrics = ("/etc/systemd/system/sturdy-metrics-shop.timer /etc/systemd/system/sturdy-metrics-shop.service "
               "/var/lib/prometheus/node-exporter/sturdy_shop.prom")
    assert all(host(name).run(f"ls {metrics}").rc == 0 for name in WORKERS)
    # A scale: the live build again with a third instance. A release of its own, that restarts nothing; the metrics
    # collector is given its new configuration (the instances it reads), its code is left as installed.
    scaled = deploy(B1, sturdy_processes=unlimited(3))
    assert scaled.returncode == 0, said(scaled)[-3000:]
    for name in WORKERS:
        assert "shop-worker@3.service" in host(name).check_output("cat /etc/sturdy-workers/shop.metrics.json")
        assert invocation_ids(name) == before[name]
    # The same deploy turns the metrics off, as the README says it does: the timer and the file go.
    result = deploy(B1, sturdy_processes=unlimited(3), sturdy_metrics_enabled=False)
    assert result.returncode == 0, said(result)[-3000:]
    rep = report()
    for name in WORKERS:
        assert host(name).check_output(f"ls {metrics} 2>/dev/null || true") == "", name
        assert host(name).run("systemctl is-active --quiet sturdy-metrics-shop.timer").rc != 0
        assert rep["hosts"][name]["release"].startswith(f"{B1}~"), rep["hosts"][name]
        assert instances(name) == [*UNITS, "shop-worker@3.service"]
        # Same unit files: the running instances were not touched.
        assert invocation_ids(name) == before[name]
        assert rep["hosts"][name]["instances"]["shop-worker@3.service"]["smoke_build"] == B1
    result = playbook("rollback")
    assert result.returncode == 0, said(result)[-3000:]
    for name in WORKERS:
        assert instances(name) == UNITS and invocation_ids(name) == before[name]


@pytest.mark.parametrize("value, shape", [(["a", "b"], "is a list"), ({"k": "v"}, "is a mapping"),
                                          (True, "is true or false")])
def test_a_secret_that_is_not_a_string_is_refused_naming_the_key_never_the_value(value, shape):
    before = everything_read()
    result = deploy(B5, sturdy_secrets=secrets(SHOP_EXTRA=value))
    assert result.returncode != 0
    assert f"sturdy_secrets: SHOP_EXTRA {shape}" in said(result), said(result)[-2000:]
    assert "Nothing was changed" in said(result)
    assert "'k': 'v'" not in said(result) and "['a', 'b']" not in said(result)
    assert everything_read() == before


LEGACY = """set -e
cd /etc/shop
if [ -L shop.env ]; then cp -p --remove-destination "$(readlink -f shop.env)" shop.env; fi
if [ -L credentials ]; then src=$(readlink -f credentials); rm credentials; cp -a "$src" credentials; fi
sed -i -E 's#/etc/shop/secrets/[0-9]+/#/etc/shop/#' /etc/systemd/system/shop-*.service
rm -rf releases secrets current previous
systemctl daemon-reload
systemctl restart shop-worker@1.service shop-worker@2.service
"""


def test_a_host_deployed_before_release_configs_has_its_live_state_adopted_and_a_rollback_goes_back_to_it():
    # Both hosts as the collection before release configs left them: secrets as files at the live paths, the unit
    # files naming them, no release config.
    for name in WORKERS:
        host(name).check_output(LEGACY)
    on_build_1_as_converged()
    before = {name: {k: v for k, v in read.items() if not k.startswith("link ")}
              for name, read in everything_read().items()}
    result = deploy(B5, sturdy_secrets=secrets(TOKEN_B))
    assert result.returncode == 0, said(result)[-3000:]
    for name in WORKERS:
        assert token_seen(name, UNITS[0]) == sha(TOKEN_B)
        adopted = json.loads(host(name).check_output(f"cat /etc/shop/releases/{B1}/RELEASE.json"))
        assert adopted["adopted"] and adopted["activated"], adopted
    # Back to what ran before the upgrade: its unit files byte for byte, its secrets' bytes, its instances.
    result = playbook("rollback")
    assert result.returncode == 0, said(result)[-3000:]
    after = {name: {k: v for k, v in read.items() if not k.startswith("link ")}
             for name, read in everything_read().items()}
    assert after == before
    on_build_1_as_converged()
