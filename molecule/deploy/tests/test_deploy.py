"""The deploy pipeline end to end, across a broker, two worker hosts (252 and 257) and a web host.

The tests run in order (one xdist group); each deploys to every app host. Converge deployed build 1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from conftest import (APPS, B1, B2, B5, BOOKWORM, B_CRASH, B_NO_WORKER, EPHEMERAL, HEALTH, SECRET, TRIXIE, WEB, WORKERS,
                      WORKER_UNITS, current, dead_letters, deploy, deploy_cmd, host, invocations, main_cwd,
                      readme_command, recaps, report, run_as_readme, said, assert_served_in_turn, status, task, told,
                      units_of, wait_for, while_requests_flow, while_tasks_flow)


def test_first_deploy_every_instance_answered_build_1():
    rep = report()
    assert rep["result"] == "success" and rep["build_id"] == B1
    for name in WORKERS:
        for unit in WORKER_UNITS:
            assert rep["hosts"][name]["instances"][unit]["smoke_build"] == B1
            assert main_cwd(name, unit) == f"/srv/shop/releases/{B1}"
            # What the running worker's settings are, from the worker itself: a prefork pool whose children are
            # replaced after the task that took them past worker_max_memory_per_child.
            settings = rep["hosts"][name]["instances"][unit]["settings"]
            assert (settings["pool"], settings["max_memory_per_child"], settings["acks_late"]) == (
                "prefork", 200_000, True), settings
    # Readiness comes from the agent: Type=notify, and a watchdog the worker feeds.
    h = host(TRIXIE)
    assert h.check_output("systemctl show -P Type shop-worker@1.service") == "notify"
    assert h.check_output("systemctl show -P WatchdogUSec shop-worker@1.service") == "15s"  # the inventory's watchdog_sec
    web = host(WEB).check_output("python3 -c \"import urllib.request as u; "
                                 "print(u.urlopen('http://127.0.0.1:8000/health').read().decode())\"")
    assert json.loads(web)["build_id"] == B1
    # The web listens through its socket unit (listen in group_vars/web.yml), which systemd holds for it.
    listening = host(WEB).check_output("systemctl show -P Listen shop-web@1.socket")
    assert listening == "127.0.0.1:8000 (Stream)", listening


def test_deploy_2_while_tasks_flow_loses_none_and_every_instance_answers_build_2():
    before = invocations()
    socket_since = host(WEB).check_output("systemctl show -P ActiveEnterTimestampMonotonic shop-web@1.socket")
    (result, flow), answers = while_requests_flow(
        WEB, HEALTH, lambda: while_tasks_flow(WEB, "flow2", lambda: deploy(B2)))
    # The web restarted under a client firing requests: not one refused, every one answered 200, by build 1 until the
    # restart and by build 2 after it; the socket stayed open throughout.
    assert_served_in_turn(answers, B1, B2, WEB)
    assert host(WEB).check_output("systemctl show -P ActiveEnterTimestampMonotonic shop-web@1.socket") == socket_since
    # The stream spans the restarts: both builds answered, and every task exactly once in effect.
    assert set(flow["builds"]) == {B1, B2}, flow["builds"]
    # The migration ran once, on one host (the app's own record of its runs, on every host of the deploy), and
    # before any instance of any host restarted.
    ran = [line.split() for name in APPS
           for line in host(name).run("cat /var/lib/shop/migrations.log").stdout.splitlines() if line.startswith(B2)]
    assert len(ran) == 1 and ran[0][3] == "1->2", ran
    restarted = [float(host(name).check_output(f"systemctl show -P ActiveEnterTimestamp --timestamp=unix {unit}")
                       .lstrip("@")) for name in APPS for unit in units_of(name)]
    assert float(ran[0][2]) < min(restarted), (ran, restarted)
    rep = report()
    assert rep["result"] == "success"
    # The queue after the deploy, in the report: its backlog and the rate it drains at.
    assert (rep["queues"]["default"]["rate_limit"], rep["queues"]["default"]["error"]) == (20, None), rep["queues"]
    assert any(line.startswith("queue default: ") for line in rep["summary"]), rep["summary"]
    after = invocations()
    for name in WORKERS:
        for unit in WORKER_UNITS:
            inst = rep["hosts"][name]["instances"][unit]
            assert inst["smoke_build"] == B2 and inst["restarted"] and inst["nrestarts_after"] == "0"
            assert main_cwd(name, unit) == f"/srv/shop/releases/{B2}"
    assert all(before[k] != after[k] for k in before)
    assert task(WEB, "after-2")["build_id"] == B2


class Webhook:
    """A webhook on the controller: the JSON bodies POSTed to it, in order."""

    def __init__(self):
        import http.server
        import threading

        self.bodies: list[dict] = []
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0KEN-1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_same_build_again_changes_and_restarts_nothing_and_notifies_even_when_a_hook_fails():
    # The README's deploy command, as written (its build ID replaced), from an inventory.yml with group_vars; with
    # hooks: a webhook that answers, one that does not (nothing listens there), a command given the event on stdin.
    before = invocations()
    hook, events = Webhook(), EPHEMERAL / "notify-events.jsonl"
    events.unlink(missing_ok=True)
    notify = {"webhooks": [hook.url, "http://127.0.0.1:9/hooks/T0KEN-2"],
              "command": ["sh", "-c", f'cat >> {events} && echo " $STURDY_EVENT" >> {events}']}
    try:
        result = run_as_readme([*readme_command("deploy", B2), "-e", json.dumps({"sturdy_deploy_notify": notify})])
    finally:
        hook.close()
    assert result.returncode == 0, said(result)[-3000:]
    # Each hook: once when the run started, once when it ended, with the same run; the failing one is named by its
    # host, never its URL (the token), and failed nothing.
    assert [b["event"] for b in hook.bodies] == ["started", "succeeded"], hook.bodies
    started, ended = hook.bodies
    assert started["run_id"] == ended["run_id"] == report()["run_id"] and ended["build_id"] == B2
    assert started["text"].startswith(f"deploy of shop {B2} started by ") and sorted(started["hosts"]) == sorted(APPS)
    assert ended["text"].startswith(f"deploy shop {B2}: success in ") and ended["report"]["result"] == "success"
    text = told(result)
    assert 'Notification "started" failed, the deploy did not: webhook on 127.0.0.1: ' in text, text[-3000:]
    assert 'Notification "succeeded" failed, the deploy did not: webhook on 127.0.0.1: ' in text, text[-3000:]
    assert "T0KEN" not in result.stdout + result.stderr
    lines = events.read_text().splitlines()
    assert [line.rsplit(" ", 1)[-1] for line in lines] == ["started", "succeeded"], lines
    assert json.loads(lines[1].rsplit(" ", 1)[0])["run_id"] == ended["run_id"]
    assert set(recaps(result)) == set(APPS)
    assert all(r["changed"] == 0 for r in recaps(result).values()), recaps(result)
    assert invocations() == before
    # Nothing differed from the last deploy on any host: only the smoke jobs ran, every instance answering build 2.
    rep = report()
    assert rep["result"] == "success" and all(h["unchanged"] for h in rep["hosts"].values()), rep["hosts"]
    assert all(i["smoke_build"] == B2 for name in WORKERS for i in rep["hosts"][name]["instances"].values())
    assert "unchanged since its last deploy: nothing installed, written or restarted" in said(result)


def test_failing_migration_stops_before_the_switch():
    before = invocations()
    result = deploy(B5, sturdy_migrate_environment={"SHOP_MIGRATION_FAIL": "1"})
    assert result.returncode != 0
    text = said(result)
    assert "migration failed on purpose" in text and "exit 1" in text, text[-3000:]
    # Its output as lines, one printed line each (not one line of \n escapes), and its last line in the failure.
    # (Printed as a YAML or JSON list, as the callback is set: one item per line.)
    assert [line for line in result.stdout.splitlines()
            if line.strip().lstrip("- ").strip("'\",").startswith(f"migrate: build {B5}, schema ")], result.stdout[-3000:]
    assert not [line for line in result.stdout.splitlines() if "\\nmigrate:" in line], text[-3000:]
    assert "(exit 1): migrate: ERROR: migration failed on purpose (SHOP_MIGRATION_FAIL=1)" in text, text[-3000:]
    # The migration printed the broker URL and, inside another URL, its password: both are masked.
    assert "migrate: connected to ********" in text and "redis://:********@replica:6379/1" in text, text[-3000:]
    assert SECRET not in result.stdout + result.stderr
    assert "no host was switched" in text
    assert invocations() == before
    assert all(current(name) == B2 for name in APPS)
    assert task(WEB, "after-failed-migration")["build_id"] == B2


def test_release_without_the_worker_command_fails_preflight_and_changes_nothing():
    before = invocations()
    result = deploy(B_NO_WORKER)
    assert result.returncode != 0
    text = said(result)
    assert f"command[0]=bin/shop-worker is missing in build {B_NO_WORKER}" in text, text[-3000:]
    assert "Nothing was changed" in text
    for name in APPS:
        assert not host(name).file(f"/srv/shop/releases/{B_NO_WORKER}").exists
        assert current(name) == B2
    assert invocations() == before


def test_release_that_crashes_on_start_is_rolled_back():
    events = EPHEMERAL / "notify-rolled-back.jsonl"
    events.unlink(missing_ok=True)
    result = deploy(B_CRASH, sturdy_deploy_notify={"command": ["sh", "-c", f"cat >> {events}; echo >> {events}"],
                                                   "events": ["rolled_back"]})
    assert result.returncode != 0
    text = said(result)
    # The hook heard of the rollback only (its events), with the report, the broker URL masked.
    [told_of] = [json.loads(line) for line in events.read_text().splitlines()]
    assert told_of["event"] == "rolled_back" and told_of["report"]["result"] == "rolled_back", told_of
    assert "did not come up on the new code" in told_of["text"] and SECRET not in events.read_text()
    # The first host's first instance: named, with its log, and the others were never touched.
    assert "shop-worker@1.service did not come up on the new code" in text, text[-4000:]
    assert "broken on purpose (crash-on-start variant), broker ********" in text
    assert SECRET not in result.stdout + result.stderr
    assert f"Rolled back to {B2}" in text
    rep = report()
    assert rep["result"] == "rolled_back"
    for name in APPS:
        assert current(name) == B2
    for unit in WORKER_UNITS:
        assert rep["hosts"][BOOKWORM]["instances"][unit]["smoke_build"] == B2
        assert main_cwd(BOOKWORM, unit) == f"/srv/shop/releases/{B2}"
    # The bad release stays for inspection where it was installed.
    assert host(BOOKWORM).file(f"/srv/shop/releases/{B_CRASH}/RELEASE.json").exists
    assert task(WEB, "after-crash")["build_id"] == B2


def dead_letters_as_readme(having: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    report_file = EPHEMERAL / "dead-letters.json"
    report_file.unlink(missing_ok=True)
    result = run_as_readme(readme_command("dead_letters", having=having))
    return result, json.loads(report_file.read_text()) if report_file.exists() else {}


def test_a_task_the_running_build_does_not_know_and_one_it_cannot_call_wait_as_dead_letters():
    web = host(WEB)
    # A producer on a newer build sends a task the workers' build 2 does not register, and one with arguments
    # shopdemo.record cannot take; Celery alone would drop the first and fail the second.
    web.check_output("/usr/local/sbin/shop-task --send shopdemo.refund dl-refund")
    web.check_output("/usr/local/sbin/shop-task --send shopdemo.record dl-bad '[1, 2, 3]'")
    got = wait_for("both messages in sturdy.dead.default", lambda: (d := dead_letters())["count"] == 2 and d, 60)
    assert got["reasons"] == {
        f"unknown task shopdemo.refund in build {B2}": 1,
        f"arguments do not fit shopdemo.record in build {B2}: record() takes 2 positional arguments but 3 were given": 1,
    }, got
    # The README's command lists them, read-only, with no argument shown.
    result, listed = dead_letters_as_readme()
    assert result.returncode == 0, said(result)[-3000:]
    assert recaps(result)[BOOKWORM]["changed"] == 0
    (queue,) = listed["queues"]
    assert (queue["queue"], queue["count"], queue["tasks"]) == ("default", 2,
                                                                {"shopdemo.refund": 1, "shopdemo.record": 1}), queue
    assert {e["build"] for e in queue["sample"]} == {B2} and all(e["deliveries"] == 1 for e in queue["sample"])
    assert "default: 2 dead letter(s) in sturdy.dead.default, the oldest for" in said(result)
    assert "[1, 2, 3]" not in json.dumps(listed)
    # Status calls it a problem, with the command to run next; the workers are fine.
    dummy, rep = status()
    assert rep["queues"]["default"]["dead_letter_depth"] == 2, rep["queues"]
    assert any(p.startswith("queue default has 2 dead letter(s) in sturdy.dead.default") and
               "ansible-playbook sturdy.workers.dead_letters" in p for p in rep["problems"]), rep["problems"]
    assert rep["queues"]["default"]["rate_limit"] == 20
    for name in WORKERS:
        assert all(host(name).service(unit).is_running for unit in WORKER_UNITS)


def test_worker_listening_to_another_queue_fails_the_real_queue_smoke_and_goes_back_to_the_queue_it_consumed():
    result = deploy(B2, shop_worker_queue="orders")
    assert result.returncode != 0
    text = said(result)
    assert "No worker took the smoke job sent to queue 'default'" in text, text[-4000:]
    assert "consume orders" in text
    # The same build with another declaration is a release of its own: the switched hosts go back to the one that ran
    # before, units and declaration, and consume `default` again.
    assert f"Rolled back to {B2} on the switched hosts, code and config" in text, text[-3000:]
    rep = report()
    assert rep["result"] == "rolled_back"
    for name in WORKERS:
        assert rep["hosts"][name]["release"].startswith(f"{B2}~") and rep["hosts"][name]["rolled_back_release"] == B2
        assert current(name) == B2
        for unit in WORKER_UNITS:
            assert "-Q default" in host(name).check_output(f"systemctl show -P ExecStart {unit}")
            assert rep["hosts"][name]["instances"][unit]["smoke_build"] == B2
    assert task(WEB, "after-orders")["build_id"] == B2
    # The report's message, the last thing the run prints, carries the reason, not "One or more items failed".
    message = rep["message"]
    assert "No worker took the smoke job sent to queue 'default'" in message and "One or more items" not in message, (
        message)


def test_concurrent_deploy_is_refused_by_the_lock():
    first = subprocess.Popen(deploy_cmd(B5, "converge.yml"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lock = host(TRIXIE).file("/srv/shop/.deploy.lock")
    deadline = time.monotonic() + 120
    while not lock.exists and time.monotonic() < deadline:
        time.sleep(0.5)
    assert lock.exists
    second = deploy(B5)
    out = first.communicate(timeout=600)[0]
    assert first.returncode == 0, " ".join(out.split())[-3000:]
    assert second.returncode != 0
    assert "Another deploy is running" in said(second) and "for build 2026.11.29-5" in said(second)
    assert not lock.exists
    for name in WORKERS:
        for unit in WORKER_UNITS:
            assert report()["hosts"][name]["instances"][unit]["smoke_build"] == B5


def test_dead_letters_requeued_after_deploying_a_build_that_knows_them_complete_and_discard_needs_its_flag():
    web = host(WEB)
    (refund,) = [e["id"] for e in dead_letters()["sample"] if e["task"] == "shopdemo.refund"]

    def state(task_id):
        out = web.check_output(f"/usr/local/sbin/shop-task --agent tasks --celery-app shopdemo.celery {task_id}")
        return json.loads(out.splitlines()[-1])[0]["state"]

    assert state(refund) == "FAILURE"
    # Build 5 registers shopdemo.refund: requeued, it runs; the call that never fits comes back with its reason.
    result, moved = dead_letters_as_readme("sturdy_dead_letters_action=requeue")
    assert result.returncode == 0, said(result)[-3000:]
    assert moved["queues"][0]["moved"] == 2, moved
    wait_for("the requeued refund ran", lambda: state(refund) == "SUCCESS", 60)
    back = wait_for("the bad call back in sturdy.dead.default", lambda: (d := dead_letters())["count"] == 1 and d, 60)
    (entry,) = back["sample"]
    assert (entry["task"], entry["requeues"], entry["build"]) == ("shopdemo.record", 1, B5), entry
    # Discard refuses without its flag and deletes nothing; with it, the dead-letter queue is empty.
    refused = run_as_readme([*readme_command("dead_letters", having="discard")[:-2]])
    assert refused.returncode != 0 and "sturdy_dead_letters_confirm_discard" in said(refused), said(refused)[-2000:]
    assert dead_letters()["count"] == 1
    result, gone = dead_letters_as_readme("sturdy_dead_letters_confirm_discard=true")
    assert result.returncode == 0, said(result)[-3000:]
    assert gone["queues"][0]["moved"] == 1 and dead_letters()["count"] == 0
    # Only the dead-letter queue was touched: the live queue still takes work.
    assert task(WEB, "after-dead-letters")["build_id"] == B5


def test_a_lock_without_a_sign_of_life_is_reported_dead_with_its_owner_and_time():
    h = host(WEB)
    h.check_output("printf '%s' '{\"run_id\": \"old\", \"owner\": \"alice@ci-7\", \"build_id\": \"x\", "
                   "\"started\": \"2026-11-28T01:00:00+00:00\", \"started_epoch\": 1764291600}' > /srv/shop/.deploy.lock")
    try:
        result = deploy(B2)
        assert result.returncode != 0
        text = said(result)
        assert "held by a DEAD deploy" in text and "alice@ci-7" in text and "2026-11-28T01:00:00+00:00" in text, \
            text[-3000:]
        assert "no sign of life for" in text and "sturdy_deploy_break_lock=true" in text
        # Refused in preflight: still on build 5, and no other host took a lock.
        assert all(current(name) == B5 for name in APPS)
        assert not any(host(name).file("/srv/shop/.deploy.lock").exists for name in APPS if name != WEB)
        assert json.loads(h.file("/srv/shop/.deploy.lock").content_string)["owner"] == "alice@ci-7"
    finally:
        h.check_output("rm -f /srv/shop/.deploy.lock")


def builds_named_before(text: str) -> dict[str, list[str]]:
    """The preflight's "Before this deploy the instances of shop run N builds: B on h u, h u; B2 on ..." as a dict."""
    found = re.search(r"Before this deploy the instances of shop run \d+ builds: (.*?)\. This deploy", text)
    assert found, text[text.find("Name the builds"):][:2000]
    return {build: names.split(", ") for build, names in (part.split(" on ", 1) for part in found[1].split("; "))}


def test_a_deploy_killed_between_restarts_is_known_dead_at_once_and_one_flag_lets_the_next_converge():
    # The controller SIGKILLed (a cancelled CI job) once worker-bookworm's first instance runs build 2: in the first
    # batch (web-trixie and worker-bookworm, inventory order), before worker-trixie's. Hosts and instances are left on
    # two builds, with the dead run's lock.
    first = subprocess.Popen(deploy_cmd(B2), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        bookworm = host(BOOKWORM)
        wait_for(f"{BOOKWORM}'s first instance on build 2", lambda: bookworm.run(
            "readlink /proc/$(systemctl show -P MainPID shop-worker@1.service)/cwd").stdout.strip()
            == f"/srv/shop/releases/{B2}", 240)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        # Mitogen's connection multiplexer leaves the controller's session (setsid): the group kill misses it and it
        # lingered, parented to PID 1, for the rest of the machine's run. Killed too, as a CI runner's cgroup kill
        # would.
        subprocess.run(["pkill", "-KILL", "-P", "1", "-f", f"shop-{B2}.tar.gz"], check=False)
    assert current(TRIXIE) == B5 and host(TRIXIE).file("/srv/shop/.deploy.lock").exists
    # Without the flag: refused at once (not after an hour), saying why the holder is dead and what to do.
    refused = deploy(B2)
    text = said(refused)
    assert refused.returncode != 0
    assert "held by a DEAD deploy" in text and f"for build {B2}" in text, text[-3000:]
    assert f"its ansible-playbook process {first.pid} on " in text and "is gone" in text
    assert "sturdy_deploy_break_lock=true" in text
    assert current(TRIXIE) == B5
    # With it: the lock taken over, the builds left behind named, every host and instance brought to build 2.
    result = deploy(B2, sturdy_deploy_break_lock=True)
    text = said(result)
    assert result.returncode == 0, text[-3000:]
    assert "Took over the deploy lock" in text and "of a dead deploy" in text
    before = builds_named_before(text)
    assert f"{BOOKWORM} shop-worker@1.service" in before[B2], before
    assert {f"{TRIXIE} shop-worker@1.service", f"{TRIXIE} shop-worker@2.service"} <= set(before[B5]), before
    assert report()["result"] == "success"
    for name in APPS:
        assert current(name) == B2 and not host(name).file("/srv/shop/.deploy.lock").exists
        for unit in units_of(name):
            assert main_cwd(name, unit) == f"/srv/shop/releases/{B2}", (name, unit)


def test_a_host_lost_mid_rollout_is_named_the_others_rolled_back_and_unlocked_and_the_next_deploy_converges():
    # From build 2 (the test before) to 5: worker-trixie (second batch) stops answering while the first batch
    # (web-trixie, worker-bookworm) restarts.
    answering = [WEB, BOOKWORM]
    first = subprocess.Popen(deploy_cmd(B5), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bookworm = host(BOOKWORM)
    try:
        wait_for(f"{BOOKWORM}'s first instance on build 5", lambda: bookworm.run(
            "readlink /proc/$(systemctl show -P MainPID shop-worker@1.service)/cwd").stdout.strip()
            == f"/srv/shop/releases/{B5}", 240)
        subprocess.run(["podman", "stop", "-t", "0", TRIXIE], check=True, capture_output=True)
        out = first.communicate(timeout=600)[0]
        assert first.returncode != 0, out[-3000:]
        rep = report()
        assert rep["result"] == "rolled_back", rep
        assert any(f.startswith(f"{TRIXIE}: ") and "the host cannot be reached" in f for f in rep["failures"]), rep
        # The hosts that answer are back on build 2, unlocked.
        for name in answering:
            assert current(name) == B2 and not host(name).file("/srv/shop/.deploy.lock").exists
            assert rep["hosts"][name]["rolled_back_to"] == B2, rep["hosts"][name]
            for unit in units_of(name):
                assert main_cwd(name, unit) == f"/srv/shop/releases/{B2}", (name, unit)
    finally:
        if first.poll() is None:
            first.kill()
        subprocess.run(["podman", "start", TRIXIE], check=True, capture_output=True)
    trixie = host(TRIXIE)
    wait_for(f"{TRIXIE} back with its instances", lambda: all(
        trixie.run(f"systemctl is-active {unit}").rc == 0 for unit in WORKER_UNITS), 120)
    # Back, it still holds the lock of the run that lost it (and never switched): the next deploy takes it over with
    # the flag and finishes the job (build 5 everywhere, where the tests after this one start).
    assert current(TRIXIE) == B2 and trixie.file("/srv/shop/.deploy.lock").exists
    result = deploy(B5, sturdy_deploy_break_lock=True)
    assert result.returncode == 0, said(result)[-3000:]
    for name in APPS:
        assert current(name) == B5 and not host(name).file("/srv/shop/.deploy.lock").exists
