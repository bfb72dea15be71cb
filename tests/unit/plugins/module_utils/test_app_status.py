from __future__ import annotations

import json

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import (
    UNIT_PROCESS_EXIT,
    UNIT_RESTART_SCHEDULED,
    current_build_of,
    duration_words,
    exit_words,
    host_status,
    journal_argv,
    journal_by_unit,
    parse_journal,
    parse_queue_stats,
    queue_commands,
    queue_groups,
    queue_problems,
    running_build,
)

NOW = 1_800_000_000.0
PLAN = plan("shop", processes=[{"name": "worker", "command": ["bin/shop-worker"], "instances": 2,
                                "adapter": "celery", "celery_app": "shop.celery", "queues": ["default"]},
                               {"name": "web", "command": ["bin/shop-web"]}])


def record(unit, message_id, ago, **fields):
    return json.dumps({"UNIT": unit, "MESSAGE_ID": message_id, "__REALTIME_TIMESTAMP": str(int((NOW - ago) * 1e6)),
                       **fields})


@pytest.mark.parametrize("code,status,words", [
    ("killed", "9", "killed by SIGKILL"),
    ("killed", "15", "killed by SIGTERM"),
    ("dumped", "11", "dumped core on SIGSEGV"),
    ("exited", "0", "exited cleanly (status 0)"),
    ("exited", "1", "exited with status 1"),
    ("2", "9", "killed by SIGKILL"),  # ExecMainCode= numbers (CLD_KILLED)
])
def test_exit_words(code, status, words):
    assert exit_words(code, status).startswith(words)


def test_sigkill_words_name_the_usual_killers():
    assert "OOM killer" in exit_words("killed", "9") and "empty log" in exit_words("killed", "9")


def test_journal_counts_restarts_of_the_last_hour_and_keeps_the_latest_exit():
    text = "\n".join([
        record("shop-worker@1.service", UNIT_RESTART_SCHEDULED, 7200),
        record("shop-worker@1.service", UNIT_RESTART_SCHEDULED, 600),
        record("shop-worker@1.service", UNIT_RESTART_SCHEDULED, 30),
        record("shop-worker@1.service", UNIT_PROCESS_EXIT, 601, EXIT_CODE="exited", EXIT_STATUS="1"),
        record("shop-worker@1.service", UNIT_PROCESS_EXIT, 31, EXIT_CODE="killed", EXIT_STATUS="9"),
        record("shop-worker@1.service", UNIT_PROCESS_EXIT, 20, EXIT_CODE="exited", EXIT_STATUS="1",
               COMMAND="ExecStartPre"),
        "-- No entries --",
    ])
    found = journal_by_unit(parse_journal(text), NOW)["shop-worker@1.service"]
    assert found["restarts_last_hour"] == 2
    assert found["last_exit"]["words"].startswith("killed by SIGKILL")
    assert found["last_exit"]["time"] == pytest.approx(NOW - 31)


def test_journal_argv_ors_message_ids_and_units():
    argv = journal_argv(["shop-worker@1.service", "shop-web@1.service"])
    assert argv[:4] == ["journalctl", "--no-pager", "-o", "json"]
    assert "_PID=1" in argv and f"MESSAGE_ID={UNIT_PROCESS_EXIT}" in argv and "UNIT=shop-web@1.service" in argv


def test_running_build_prefers_the_working_directory_over_the_unit_environment():
    releases = "/srv/shop/releases"
    assert running_build("/srv/shop/releases/b2/app", "STURDY_BUILD_ID=b3\0X=1", releases) == ("b2", "cwd")
    assert running_build("/var/lib/shop", "A=1\0STURDY_BUILD_ID=b3\0", releases) == ("b3", "environment")
    assert running_build(None, None, releases) == (None, "unknown")
    # A sibling directory whose name starts the same is not a release.
    assert running_build("/srv/shop/releases-old/b1", None, releases) == (None, "unknown")


def test_current_build_of_reads_the_link_target():
    assert current_build_of("/srv/shop/current", "/srv/shop/releases",
                            lambda p: "/srv/shop/releases/b2") == "b2"
    assert current_build_of("/srv/shop/current", "/srv/shop/releases", lambda p: p) is None


@pytest.mark.parametrize("seconds,words", [(None, "-"), (45, "45s"), (750, "12min"), (11520, "3h 12min"),
                                           (187200, "2d 4h")])
def test_duration_words(seconds, words):
    assert duration_words(seconds) == words


def show(unit, state="active", pid="100", restarts="0", result="success", start=1000.0, loaded="loaded"):
    return {"Id": unit, "LoadState": loaded, "ActiveState": state, "SubState": "running" if state == "active" else "dead",
            "Result": result, "NRestarts": restarts, "MainPID": pid if state == "active" else "0",
            "ExecMainStartTimestampMonotonic": str(int(start * 1e6)), "UnitFileState": "enabled",
            "Environment": "STURDY_APP=shop STURDY_BUILD_ID=b2"}


def status(units, journal=None, procs=None, current="b2"):
    return host_status(PLAN, units, journal or {}, procs or {}, current, 1600.0, "h1")


def test_a_healthy_host_has_no_problem():
    units = [show("shop-worker@1.service"), show("shop-worker@2.service", pid="101"), show("shop-web@1.service", pid="102")]
    procs = {u["Id"]: {"cwd": "/srv/shop/releases/b2", "environ": ""} for u in units}
    got = status(units, procs=procs)
    assert got["problems"] == []
    worker = got["processes"][0]
    assert [i["unit"] for i in worker["instances"]] == ["shop-worker@1.service", "shop-worker@2.service"]
    assert worker["instances"][0]["build"] == "b2" and worker["instances"][0]["uptime"] == 600.0
    assert worker["instances"][0]["unit_build"] == "b2"


def test_each_problem_names_the_unit_and_the_next_step():
    units = [show("shop-worker@1.service", restarts="2"),
             show("shop-worker@2.service", state="failed", result="oom-kill"),
             show("shop-worker@3.service", pid="103"),
             show("shop-web@1.service", pid="102")]
    procs = {"shop-worker@1.service": {"cwd": "/srv/shop/releases/b2"},
             "shop-worker@3.service": {"cwd": "/srv/shop/releases/b2"},
             "shop-web@1.service": {"cwd": "/srv/shop/releases/b1"}}
    journal = {"shop-worker@1.service": {"restarts_last_hour": 4, "last_exit": {"words": "killed by SIGKILL"}},
               "shop-worker@2.service": {"restarts_last_hour": 0,
                                         "last_exit": {"words": "killed by SIGKILL (the OOM killer ...)"}}}
    problems = status(units, journal, procs)["problems"]
    text = "\n".join(problems)
    assert "h1 shop-worker@1.service died and was restarted by systemd 2 time(s)" in text and "a crash loop" in text
    assert "h1 shop-worker@2.service is declared but failed (oom-kill: it was killed by the OOM killer" in text
    assert "sturdy.workers.diagnose -e sturdy_diagnose_unit=shop-worker@2.service" in text
    assert "h1 shop-worker@3.service runs but is not declared" in text
    assert "h1 shop-web@1.service runs build b1 but current is b2" in text and "sturdy.workers.restart" in text
    assert len(problems) == 4


def test_an_old_restart_is_no_longer_a_problem_after_an_hour():
    units = [show("shop-worker@1.service", restarts="1"), show("shop-worker@2.service"), show("shop-web@1.service")]
    journal = {"shop-worker@1.service": {"restarts_last_hour": 0, "last_exit": {"words": "exited with status 1"}}}
    assert status(units, journal)["problems"] == []


def test_a_host_without_a_release_or_units_says_to_deploy():
    problems = status([], current=None)["problems"]
    assert "current does not point at a release" in problems[0]
    assert any("shop-worker@1.service: no unit file" in p for p in problems)


def test_queue_commands_run_the_agent_once_per_queue_set_of_celery_processes():
    commands = queue_commands(PLAN, "/srv/shop/releases/b2", 1.0)
    assert commands == [(PLAN["processes"][0], ["/srv/shop/releases/b2/venv/bin/python", "-m", "sturdy_agent", "stats",
                                                "--timeout", "1", "--celery-app", "shop.celery", "default"])]


def test_a_queue_two_process_types_consume_is_read_once():
    shared = plan("shop", processes=[
        {"name": "worker", "command": ["bin/w"], "adapter": "celery", "celery_app": "shop.celery",
         "queues": ["default", "high"]},
        {"name": "urgent", "command": ["bin/w"], "adapter": "celery", "celery_app": "shop.celery",
         "queues": ["high", "high"]},
        {"name": "mail", "command": ["bin/w"], "adapter": "celery", "celery_app": "shop.celery",
         "queues": ["high", "mail"]}])
    got = [(proc["name"], argv[8:]) for proc, argv in queue_commands(shared, "/r", 1.0)]
    assert got == [("worker", ["default", "high"]), ("mail", ["mail"])]


def test_rq_queues_are_read_by_the_agents_rq_client_and_their_failed_jobs_are_a_problem():
    both = plan("parcel", processes=[
        {"name": "worker", "command": ["venv/bin/rq", "worker", "parcel.scales"], "adapter": "rq",
         "queues": ["parcel.scales"]},
        {"name": "mail", "command": ["bin/w"], "adapter": "celery", "celery_app": "parcel.celery", "queues": ["mail"]}])
    got = [argv for dummy, argv in queue_commands(both, "/r", 1.0)]
    assert got == [["/r/venv/bin/python", "-m", "sturdy_agent", "rq-stats", "parcel.scales"],
                   ["/r/venv/bin/python", "-m", "sturdy_agent", "stats", "--timeout", "1", "--celery-app",
                    "parcel.celery", "mail"]]
    # Dead letters and the rest stay Celery's.
    assert [p["name"] for p in queue_groups(both)] == ["mail"]
    problems = queue_problems([{"queue": "parcel.scales", "depth": 0, "consumers": ["a1"], "failed_jobs": 3}], 600)
    assert problems == ["queue parcel.scales has 3 job(s) in RQ's failed job registry: jobs that raised, timed out or "
                        "whose work horse was killed. Next: rq info and the workers' journal say why; fix the cause, "
                        "then rq requeue --queue parcel.scales --all (from the release, with RQ_REDIS_URL)"]


def test_queue_stats_that_cannot_be_read_say_why_per_queue():
    got = parse_queue_stats(PLAN["processes"][0], 1, "", "kombu.exceptions.OperationalError: Connection refused")
    assert got == [{"queue": "default", "error": "the agent could not read it (rc 1): "
                                                 "kombu.exceptions.OperationalError: Connection refused"}]
    assert parse_queue_stats(PLAN["processes"][0], 0, 'log line\n[{"queue": "default", "depth": 2}]\n', "") == [
        {"queue": "default", "depth": 2}]
    assert "check the broker" in queue_problems(got, 600)[0]
    limited = {**PLAN["processes"][0], "rate_limit": 20}
    assert parse_queue_stats(limited, 0, '[{"queue": "default", "depth": 50}]', "") == [
        {"queue": "default", "depth": 50, "rate_limit": 20, "drain_seconds": 2.5}]


def test_processes_from_a_release_outside_the_units_are_named_with_their_build_and_pids():
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import stray_problems, stray_processes
    unit_cg = "0::/system.slice/system-shop\\x2dworker.slice/shop-worker@1.service\n"
    session = "0::/user.slice/user-0.slice/session-3.scope\n"
    procs = {
        # A worker's main process and its pool child, in the unit's cgroup: the unit's own.
        10: ("/srv/shop/releases/b2", unit_cg, "/srv/shop/releases/b2/venv/bin/python\0/srv/shop/releases/b2/venv/bin/celery"),
        11: ("/srv/shop/releases/b2", unit_cg, "/srv/shop/releases/b2/venv/bin/python\0-m\0celery"),
        # status's own queue read, a transient unit.
        12: ("/srv/shop/releases/b2", "0::/system.slice/run-u42.service\n", "/srv/shop/releases/b2/venv/bin/python"),
        # Started by hand from an old release, in someone's session.
        13: ("/srv/shop/releases/b1", session, "venv/bin/python\0-m\0celery\0worker\0"),
        # An operator's shell and a tail that only sit in a release: not the app's program.
        14: ("/srv/shop/releases/b2", session, "-bash"),
        15: ("/srv/shop/releases/b2", session, "tail\0-f\0log/app.log"),
        # Started through current from elsewhere (a cron job): current's build.
        16: ("/root", session, "/srv/shop/current/venv/bin/python\0/srv/shop/current/bin/report"),
    }
    read = {f"/proc/{pid}/cgroup": cg for pid, (dummy, cg, dummy2) in procs.items()}
    read.update({f"/proc/{pid}/cmdline": cmd for pid, (dummy, dummy2, cmd) in procs.items()})
    cwds = {f"/proc/{pid}/cwd": cwd for pid, (cwd, dummy, dummy2) in procs.items()}
    strays = stray_processes(PLAN, list(procs), read.get, cwds.get,
                             lambda p: "/srv/shop/releases/b2" if p == "/srv/shop/current" else p)
    assert [(s["pid"], s["build"], s["cgroup"]) for s in strays] == [(13, "b1", "session-3.scope"),
                                                                     (16, "b2", "session-3.scope")]
    assert strays[0]["command"] == "venv/bin/python -m celery worker"
    old, same = stray_problems("h1", strays, "b2")
    assert old.startswith("h1: 1 process(es) run the old build b1 from its release outside the app's units (pids "
                          "13: venv/bin/python -m celery worker)")
    assert "Next: stop them (kill 13" in old
    assert same.startswith("h1: 1 process(es) run build b2 from its release outside")


def test_a_singleton_shows_only_on_the_host_that_runs_it():
    with_beat = plan("shop", processes=[{"name": "beat", "command": ["bin/shop-beat"], "singleton": True}])
    away = {**show("shop-beat@1.service", state="inactive"), "UnitFileState": "disabled"}
    got = host_status(with_beat, [away], {}, {}, "b2", 1600.0, "h2")
    assert got["problems"] == [] and got["processes"][0]["instances"] == [] and got["processes"][0]["singleton"]
    # Enabled here but down: a problem on this host.
    down = {**away, "UnitFileState": "enabled"}
    got = host_status(with_beat, [down], {}, {}, "b2", 1600.0, "h1")
    assert "h1 shop-beat@1.service is declared but inactive" in got["problems"][0]


def test_a_surge_instance_draining_after_a_restart_is_shown_but_is_no_problem():
    units = [show("shop-worker@1.service"), show("shop-worker@2.service"),
             show("shop-worker@3.service", state="deactivating", pid="103"), show("shop-web@1.service", pid="102")]
    got = status(units)
    assert got["problems"] == []
    worker = got["processes"][0]
    assert [(i["unit"], i["declared"]) for i in worker["instances"]][-1] == ("shop-worker@3.service", False)
