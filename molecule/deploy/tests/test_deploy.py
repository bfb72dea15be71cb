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

from conftest import (APPS, BOOKWORM, EPHEMERAL, SECRET, TRIXIE, WEB, WORKER_UNITS, WORKERS, current, dead_letters,
                      deploy, deploy_cmd, host, invocations, main_cwd, no_secret_in_the_ansible_log, readme_command,
                      recaps, report, run_as_readme, said, status, task, units_of, wait_for, while_tasks_flow)

B1, B2, B_NO_WORKER, B_CRASH, B5 = (f"2026.11.29-{n}" for n in range(1, 6))


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


def test_deploy_2_while_tasks_flow_loses_none_and_every_instance_answers_build_2():
    before = invocations()
    result, flow = while_tasks_flow(WEB, "flow2", lambda: deploy(B2))
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


def maintenance_locks() -> dict:
    """Each app host's /srv/shop/.maintenance.lock: its content and mode, or None."""
    found = {}
    for name in APPS:
        lock = host(name).file("/srv/shop/.maintenance.lock")
        found[name] = (json.loads(lock.content_string), oct(lock.mode)) if lock.exists else None
    return found


def test_a_lock_without_a_one_line_message_is_refused_and_locks_nothing():
    lock = readme_command("lock")
    assert lock[-2] == "-e" and lock[-1].startswith("sturdy_lock_message="), lock
    missing = run_as_readme(lock[:-2])
    assert missing.returncode != 0 and "sturdy_lock_message" in said(missing), said(missing)[-2000:]
    blank = run_as_readme([*lock[:-2], "-e", "sturdy_lock_message=' '"])
    assert blank.returncode != 0 and "is not a message of one line" in said(blank), said(blank)[-2000:]
    assert "Nothing was changed" in said(blank) and "Traceback" not in said(missing) + said(blank)
    assert maintenance_locks() == dict.fromkeys(APPS)


def told(result: subprocess.CompletedProcess) -> str:
    """said(), with the quotes of a message as written: the README's ansible.cfg keeps the default callback, which
    prints a failed task's result as JSON."""
    return said(result).replace('\\"', '"')


def test_the_readme_lock_refuses_deploy_rollback_and_restart_with_who_when_why_until_unlock():
    import pwd

    message = "Postgres upgrade until 02:00 UTC"
    lock = readme_command("lock")
    assert lock[-1] == f'sturdy_lock_message="{message}"', lock
    # As the role names the controller's user: `id -un`@`hostname`.
    owner = f"{pwd.getpwuid(os.geteuid()).pw_name}@{subprocess.check_output(['hostname'], text=True).strip()}"
    before = invocations()
    taken = run_as_readme(lock)
    try:
        assert taken.returncode == 0, said(taken)[-3000:]
        locked_on = re.search(r'shop is locked for maintenance on (.*?) by (\S+): "(.*?)"', told(taken))
        assert locked_on and sorted(locked_on[1].split(", ")) == sorted(APPS), told(taken)[-2000:]
        assert (locked_on[2], locked_on[3]) == (owner, message)
        held = maintenance_locks()
        for name in APPS:
            content, mode = held[name]
            assert (content["owner"], content["message"], mode) == (owner, message, "0o644"), held[name]
        # One time for the whole run, on every host.
        assert len({held[name][0]["started"] for name in APPS}) == 1, held
        since = held[APPS[0]][0]["started"]
        # Locking again with the same message changes nothing; with another, it is refused, naming the holder.
        assert run_as_readme(lock).returncode == 0 and maintenance_locks() == held
        other = run_as_readme([*lock[:-2], "-e", "sturdy_lock_message='something else'"])
        assert other.returncode != 0 and f"is already locked for maintenance by {owner} since {since}" in told(other), \
            told(other)[-2000:]
        assert maintenance_locks() == held
        # Deploy, rollback and restart: each refused in its first play, naming who, when and why.
        for kind, argv in (("Deploy", readme_command("deploy", build=B5)), ("Rollback", readme_command("rollback")),
                           ("Restart", readme_command("restart"))):
            result = run_as_readme(argv)
            text = told(result)
            assert result.returncode != 0, text[-3000:]
            assert f'{kind} of shop refused: locked for maintenance by {owner} since {since}: "{message}"' in text, \
                text[-3000:]
            assert "Nothing was changed" in text and "ansible-playbook sturdy.workers.unlock" in text
        assert invocations() == before
        assert all(current(name) == B5 and not host(name).file("/srv/shop/.deploy.lock").exists for name in APPS)
        # Status shows it, once for all the hosts, and it is no problem.
        shown, rep = status()
        assert shown.returncode == 0, said(shown)[-3000:]
        assert rep["maintenance"] == {f'by {owner} since {since}: "{message}"': sorted(APPS)}, rep["maintenance"]
        assert any(line.startswith(f"MAINTENANCE locked by {owner}") for line in rep["summary"]), rep["summary"]
    finally:
        released = run_as_readme(readme_command("unlock"))
    assert released.returncode == 0, said(released)[-3000:]
    unlocked_on = re.search(r"Unlocked shop on (.*?): it was locked for maintenance by (\S+) ", told(released))
    assert unlocked_on and sorted(unlocked_on[1].split(", ")) == sorted(APPS) and unlocked_on[2] == owner, \
        told(released)[-2000:]
    assert maintenance_locks() == dict.fromkeys(APPS)
    # The README restart below runs again.


def status_texts() -> dict[str, str]:
    return {f"{name} {unit}": host(name).check_output(f"systemctl show -P StatusText {unit}")
            for name in WORKERS for unit in WORKER_UNITS}


def test_readme_pause_stops_the_workers_taking_messages_through_a_deploy_and_resume_proves_every_queue():
    import pwd

    owner = f"{pwd.getpwuid(os.geteuid()).pw_name}@{subprocess.check_output(['hostname'], text=True).strip()}"
    paused = run_as_readme(readme_command("pause"))
    assert paused.returncode == 0, said(paused)[-3000:]
    assert f"shop is PAUSED on {', '.join(APPS)} by {owner}" in told(paused), told(paused)[-2000:]
    # Every instance says so, and is still up.
    texts = status_texts()
    assert all(t.startswith(f"paused by {owner} since ") and "taking no message from default" in t
               for t in texts.values()), texts
    assert all(host(name).run(f"systemctl is-active {unit}").rc == 0 for name in WORKERS for unit in WORKER_UNITS)
    try:
        # A task sent now waits; status says PAUSED and raises no problem for the queue nobody consumes.
        host(WEB).check_output("/usr/local/sbin/shop-task --send shopdemo.record paused-while-waiting")
        shown, rep = status()
        assert rep["queues"]["default"]["depth"] >= 1 and not rep["queues"]["default"]["consumers"], rep["queues"]
        assert not [p for p in rep["problems"] if "no worker consumes it" in p or "has waited" in p], rep["problems"]
        assert any(line.startswith(f"PAUSED every worker by {owner}") for line in rep["summary"]), rep["summary"]
        # An instance restarted by systemd (a crash) starts paused.
        bookworm = host(BOOKWORM)
        bookworm.check_output(f"systemctl restart {WORKER_UNITS[0]}")
        wait_for("the restarted instance paused", lambda: bookworm.check_output(
            f"systemctl show -P StatusText {WORKER_UNITS[0]}").startswith("paused by "), 60)
        # A deploy during the pause (in full) keeps the fleet paused: each instance proven by its own smoke job, no job
        # through the real queues, and it says so.
        before = invocations()
        redeployed = deploy(B5, sturdy_deploy_force=True)
        assert redeployed.returncode == 0, said(redeployed)[-3000:]
        # (Its callback writes YAML: "app's" is printed app''s.)
        assert "workers take no message (paused by" in said(redeployed), said(redeployed)[-3000:]
        assert report()["queues"]["default"].get("smoke") is None, report()["queues"]
        # So does a restart, which restarts every instance: each starts paused and answers its own smoke job.
        restarted = run_as_readme(readme_command("restart"))
        assert restarted.returncode == 0, said(restarted)[-3000:]
        assert "PAUSED: the app's workers take no message (paused by" in said(restarted), said(restarted)[-3000:]
        after = invocations()
        assert all(before[k] != after[k] for k in before if "shop-worker@" in k), (before, after)
        assert all(t.startswith("paused by ") for t in status_texts().values()), status_texts()
        assert status()[1]["queues"]["default"]["depth"] >= 1
    finally:
        # Whatever failed above, the tests after this one find the app consuming.
        resumed = run_as_readme(readme_command("resume"))

    assert resumed.returncode == 0, said(resumed)[-3000:]
    assert f"shop consumes again on {', '.join(APPS)}" in told(resumed), told(resumed)[-2000:]
    assert all(t.startswith("consuming (") for t in status_texts().values()), status_texts()
    assert task(WEB, "after-resume")["build_id"] == B5
    wait_for("the task sent while paused ran", lambda: status()[1]["queues"]["default"]["depth"] == 0, 60)
    assert not any(host(name).file("/srv/shop/.paused").exists for name in APPS)


def test_readme_restart_restarts_every_instance_on_every_host_and_proves_the_build():
    # Exactly as the README writes it: no build ID given, every host's current build is what the smoke job expects.
    before = invocations()
    result = run_as_readme(readme_command("restart"))
    assert result.returncode == 0, said(result)[-3000:]
    after = invocations()
    assert all(before[k] != after[k] for k in before)
    assert all(current(name) == B5 for name in APPS)
    # The run ends saying what every host runs, and what proved it.
    assert f"restart of shop: done on {len(APPS)} host(s)" in said(result)
    for name in APPS:
        assert f"{name}: {B5}, " + (f"{len(WORKER_UNITS)} worker instance(s) answered with its build" if name in WORKERS
                                    else "no worker instance here") in said(result)


def test_readme_rollback_goes_back_to_the_previous_build_on_every_host():
    result = run_as_readme(readme_command("rollback"))
    assert result.returncode == 0, said(result)[-3000:]
    for name in APPS:
        assert current(name) == B2
    for name in WORKERS:
        for unit in WORKER_UNITS:
            assert main_cwd(name, unit) == f"/srv/shop/releases/{B2}"
    assert task(WEB, "after-rollback")["build_id"] == B2
    for name in WORKERS:
        assert f"{name}: {B5} -> {B2}, {len(WORKER_UNITS)} worker instance(s) answered with its build" in said(result)
    # previous is gone after a rollback: a second one is refused on every host before any changes, with what to do.
    again = run_as_readme(readme_command("rollback"))
    assert again.returncode != 0 and "no previous release is recorded here" in said(again), said(again)[-2000:]
    assert "sturdy_rollback_to=<release or build>" in said(again)
    assert all(current(name) == B2 for name in APPS)
    assert not any(host(name).file("/srv/shop/.deploy.lock").exists for name in APPS)


def test_readme_history_prints_every_run_merged_newest_first_and_status_the_last():
    import pwd

    owner = f"{pwd.getpwuid(os.geteuid()).pw_name}@{subprocess.check_output(['hostname'], text=True).strip()}"
    shown = run_as_readme(readme_command("history"))
    assert shown.returncode == 0, said(shown)[-3000:]
    # One line per run, printed as an item of the debug task's list (the README's callback writes JSON).
    runs = [json.loads(line.strip().rstrip(",")) for line in shown.stdout.splitlines()
            if re.match(r'\s*"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  ', line)]
    # Newest first: the rollback and the restart of the two tests before; the runs the lock refused left no line.
    # (A release is its build, with ~<n> for another config of it.)
    assert re.match(rf"rollback {B5}(~\d+)? -> {B2}(~\d+)?: success in ", runs[0].split("  ")[1]), runs[:3]
    assert f"by {owner}, {len(APPS)} host(s) - rollback of shop: done on {len(APPS)} host(s)" in runs[0], runs[0]
    assert re.match(rf"restart {B5}(~\d+)? -> {B5}(~\d+)?: success in ", runs[1].split("  ")[1]), runs[:3]
    # The restart and the deploy during the pause, then the deploy that finished the lost host's.
    assert re.match(rf"restart {B5}(~\d+)? -> {B5}(~\d+)?: success in ", runs[2].split("  ")[1]), runs[:5]
    assert re.match(rf"deploy {B5}(~\d+)? -> {B5}(~\d+)?: success in ", runs[3].split("  ")[1]), runs[:5]
    assert re.match(rf"deploy {B2}(~\d+)? -> {B5}(~\d+)?: success in ", runs[4].split("  ")[1]), runs[:5]
    # The deploy that lost a host mid-rollout: rolled back where it could be, and the lost host has no record of it.
    lost = [r for r in runs if f"ONLY on {', '.join(sorted([BOOKWORM, WEB]))} (not on {TRIXIE})" in r]
    assert lost and ": rolled_back in " in lost[0] and f"deploy shop {B5}: rolled_back" in lost[0], runs
    # The failed migration: stopped before the switch, on every host.
    assert any(f"-> {B5}" in r and ": failed in " in r and "stopped before the switch" in r for r in runs), runs
    # Each host's file: root's, world-readable, one JSON object per line; a run has one ID on every host.
    rollback_ids = set()
    for name in APPS:
        record = host(name).file("/srv/shop/history.jsonl")
        assert (record.user, oct(record.mode)) == ("root", "0o644"), name
        assert SECRET not in record.content_string, name
        entries = [json.loads(line) for line in record.content_string.splitlines()]
        assert entries[-1]["kind"] == "rollback" and entries[-1]["host"] == name and entries[-1]["who"] == owner
        assert entries[-1]["finished"] >= entries[-1]["started"] > entries[-2]["finished"] - 1, entries[-2:]
        rollback_ids.add(entries[-1]["run"])
    assert len(rollback_ids) == 1, rollback_ids
    # Status: the newest run, in one line.
    read, rep = status()
    assert read.returncode == 0, said(read)[-3000:]
    assert rep["last_run"] == runs[0].rsplit(" ONLY on", 1)[0], (rep["last_run"], runs[0])
    assert f"last run: {runs[0]} (all runs: ansible-playbook sturdy.workers.history)" in rep["summary"]


def test_readme_run_runs_a_command_once_in_the_live_release_as_the_app_with_its_secrets_masked():
    readme = readme_command("run")
    assert readme[-2] == "-e" and json.loads(readme[-1])["sturdy_run_command"], readme

    def logs_now() -> dict:
        found = {name: host(name).file("/var/lib/shop/migrations.log") for name in APPS}
        return {name: log.content_string if log.exists else "" for name, log in found.items()}

    logs = logs_now()

    def run(**extra) -> subprocess.CompletedProcess:
        return run_as_readme([*readme[:-1], json.dumps(extra)])

    # The app's own migration command, as a one-off: once, on the first host, from the live release (build 2).
    done = run(sturdy_run_command=["bin/shop-migrate"])
    assert done.returncode == 0, said(done)[-3000:]
    assert f"migrate: build {B2}, schema " in said(done) and "migrate: nothing to do" in said(done), said(done)[-3000:]
    # On the host named: worker-trixie loads its secrets as encrypted credentials, as its units do.
    elsewhere = run(sturdy_run_command=["bin/shop-migrate"], sturdy_run_host=TRIXIE)
    assert elsewhere.returncode == 0, said(elsewhere)[-3000:]
    added = {name: text[len(logs[name]):] for name, text in logs_now().items()}
    assert added[BOOKWORM].startswith(f"{B2} ") and added[BOOKWORM].count("\n") == 1, added
    assert added[TRIXIE].startswith(f"{B2} ") and added[TRIXIE].count("\n") == 1, added
    assert not added[WEB], added
    # Failing: its exit status is the play's result, its output masked (the app prints its broker URL and password
    # from the environment: web-trixie's env file), the failure names its last line.
    failed = run(sturdy_run_command=["bin/shop-migrate"], sturdy_run_host=WEB,
                 sturdy_run_environment={"SHOP_MIGRATION_FAIL": "1"})
    text = told(failed)
    assert failed.returncode != 0, text[-3000:]
    assert (f"bin/shop-migrate exited 1 on {WEB} (release {B2}): migrate: ERROR: migration failed on purpose "
            "(SHOP_MIGRATION_FAIL=1)") in text, text[-3000:]
    assert "migrate: connected to ********" in text and "redis://:********@replica:6379/1" in text, text[-3000:]
    assert SECRET not in failed.stdout + failed.stderr
    # Bad input: refused before anything runs, naming the variable.
    for extra, words in (
            ({"sturdy_run_command": []}, "sturdy_run_command=[]: give the command as a list (argv)"),
            ({"sturdy_run_command": "bin/shop-migrate"}, 'sturdy_run_command="bin/shop-migrate": give the command as a'),
            ({"sturdy_run_command": ["bin/shop-migrate --fast"]}, "holds a space: a whole command line in one string"),
            ({"sturdy_run_command": ["bin/shop-nothing"]}, "sturdy_run_command[0]=bin/shop-nothing is not there on"),
            ({"sturdy_run_command": ["bin/shop-migrate"], "sturdy_run_host": "nowhere"},
             "sturdy_run_host=nowhere is not one of this play's hosts")):
        refused = run(**extra)
        assert refused.returncode != 0 and words in told(refused) and "Nothing was run." in told(refused), \
            (extra, told(refused)[-2000:])
    assert logs_now() == {name: logs[name] + added[name] for name in APPS}


def test_no_secret_value_is_anywhere_in_the_ansible_log_of_the_whole_scenario():
    no_secret_in_the_ansible_log()
