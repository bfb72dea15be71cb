"""The deploy scenario, continued (collected after test_deploy.py, in the same ordered xdist group): the days between
deploys, through the README's commands - the maintenance lock, pause and resume, restart, rollback, history, a command
run in the release; last, no secret in the whole scenario's Ansible log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

from conftest import (APPS, B2, B5, BOOKWORM, HEALTH, SECRET, TRIXIE, WEB, WORKERS, WORKER_UNITS, current, deploy,
                      host, invocations, main_cwd, no_secret_in_the_ansible_log, readme_command, report, run_as_readme,
                      said, assert_served_in_turn, status, task, told, wait_for, while_requests_flow)


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
    result, answers = while_requests_flow(WEB, HEALTH, lambda: run_as_readme(readme_command("rollback")))
    assert result.returncode == 0, said(result)[-3000:]
    for name in APPS:
        assert current(name) == B2
    # A client firing requests through the rollback saw only 200s: build 5's, then build 2's.
    assert_served_in_turn(answers, B5, B2, WEB)
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
