from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.app_status import UNIT_PROCESS_EXIT
from ansible_collections.sturdy.workers.plugins.module_utils.diagnose import (
    diagnosis,
    kernel_oom,
    oom_events,
    summary,
    task_words,
    traceback,
)

UNIT = "shop-worker@1.service"


def exit_record(code, status, at=1000.0, invocation="inv1"):
    return {"MESSAGE_ID": UNIT_PROCESS_EXIT, "EXIT_CODE": code, "EXIT_STATUS": status, "INVOCATION_ID": invocation,
            "__REALTIME_TIMESTAMP": str(int(at * 1e6)), "MESSAGE": f"{UNIT}: Main process exited"}


def line(text, at=999.0, invocation="inv1"):
    return {"MESSAGE": text, "_SYSTEMD_INVOCATION_ID": invocation, "__REALTIME_TIMESTAMP": str(int(at * 1e6))}


def pid1_message(text, invocation="inv1"):
    return {"MESSAGE": text, "INVOCATION_ID": invocation, "__REALTIME_TIMESTAMP": "999000000"}


CRASH = ["[2026-12-01 10:00:00] starting", "Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
         "    import shopdemo", "RuntimeError: build 4 is broken on purpose", "after the exception"]


def test_traceback_is_the_last_block_up_to_the_exception_line():
    assert traceback(CRASH) == CRASH[1:5]
    assert traceback(["no exception here"]) == []


def test_an_exception_before_the_exit_is_the_cause():
    d = diagnosis(UNIT, {"Result": "exit-code"}, [exit_record("exited", "1")], [line(t) for t in CRASH], None, [], [])
    assert d["cause"] == ("it exited (exited with status 1) after a Python exception: RuntimeError: build 4 is broken "
                          "on purpose")
    assert d["traceback"][-1] == "RuntimeError: build 4 is broken on purpose"


def test_a_sigkill_with_a_quiet_log_is_named_with_its_usual_senders():
    d = diagnosis(UNIT, {"Result": "signal"}, [exit_record("killed", "9")],
                  [line("Task shopdemo.sleep[abc] received")], None, [], [])
    assert d["cause"].startswith("it was killed by SIGKILL, and not by systemd's own stop: the OOM killer")
    assert "its log ends without an error, which fits a SIGKILL" in d["cause"]
    assert d["empty_log"] is True


def test_lines_of_another_invocation_or_after_the_death_are_not_its_last_words():
    d = diagnosis(UNIT, {}, [exit_record("killed", "9", invocation="inv1")],
                  [line("old", invocation="inv0"), line("mine"), line("later", at=1010.0)], None, [], [])
    assert d["log_tail"] == ["mine"]


def test_a_start_timeout_without_an_exit_record_reads_the_invocation_systemd_names_now():
    # A main process a SIGTERM ended leaves PID 1 no exit record: the failed start is the unit's InvocationID.
    d = diagnosis(UNIT, {"Result": "timeout", "InvocationID": "inv2"},
                  [pid1_message(f"{UNIT}: Watchdog timeout (limit 30s)!", invocation="inv1"),
                   pid1_message(f"{UNIT}: start operation timed out. Terminating.", invocation="inv2")],
                  [line("ready", invocation="inv1"), line("importing", invocation="inv2")], None, [], [])
    assert d["cause"].startswith("it did not become ready within its start timeout"), d["cause"]
    assert d["log_tail"] == ["importing"]


def test_a_start_timeout_is_found_while_systemd_already_starts_the_unit_again():
    # Restart=on-failure: the unit is activating again under inv3 when diagnose reads it; inv1 died long before.
    timed_out = {**pid1_message(f"{UNIT}: start operation timed out. Terminating.", invocation="inv2"),
                 "__REALTIME_TIMESTAMP": "950000000"}
    d = diagnosis(UNIT, {"Result": "success", "ActiveState": "activating", "InvocationID": "inv3"},
                  [exit_record("killed", "9", at=900.0, invocation="inv1"), timed_out],
                  [line("killed", at=899.0, invocation="inv1"), line("importing", at=949.0, invocation="inv2"),
                   line("importing again", at=955.0, invocation="inv3")], None, [], [])
    assert d["cause"].startswith("it did not become ready within its start timeout"), d["cause"]
    assert d["log_tail"] == ["importing"] and d["death"] is None


@pytest.mark.parametrize("props,pid1,memory,kernel,starts", [
    ({"Result": "oom-kill"}, [], None, [], "the OOM killer killed it"),
    ({}, [], "low 0\noom 1\noom_kill 1\n", [], "the OOM killer killed it"),
    ({}, [], None, ["Memory cgroup out of memory: Killed process 4242 (celery) task_memcg=/system.slice/" + UNIT],
     "the OOM killer killed it"),
    ({"Result": "watchdog"}, [pid1_message(f"{UNIT}: Watchdog timeout (limit 30s)!")], None, [],
     "it missed its watchdog"),
    ({"Result": "timeout", "TimeoutStopUSec": "1min 30s"},
     [pid1_message(f"{UNIT}: State 'stop-sigterm' timed out. Killing.")], None, [],
     "a stop waited the whole stop timeout (1min 30s)"),
    ({"Result": "timeout"}, [pid1_message(f"{UNIT}: start operation timed out. Terminating.")], None, [],
     "it did not become ready within its start timeout"),
])
def test_systemd_and_kernel_records_name_the_cause(props, pid1, memory, kernel, starts):
    d = diagnosis(UNIT, props, [*pid1, exit_record("killed", "9")], [], memory, kernel, [])
    assert d["cause"].startswith(starts), d["cause"]
    assert d["next"]


def test_oom_helpers():
    assert oom_events("oom 2\noom_kill 2\n") == 2 and oom_events(None) == 0
    # Another unit's (or another container's) OOM kill in the window does not explain this one's death.
    other = ["x", "oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/a/other.service,task=python3,pid=7",
             "Memory cgroup out of memory: Killed process 7 (python3) total-vm:218580kB"]
    assert kernel_oom(other, UNIT) == []
    # Its own, as a container's systemd on a cgroup v1 host sees it (the host's path ends in the unit).
    own = f"oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/libpod_parent/libpod-1f/system.slice/{UNIT},task=celery"
    assert kernel_oom([*other, own], UNIT) == [own]


@pytest.mark.parametrize("task,words", [
    ({"state": "SUCCESS"}, "it ran again and succeeded"),
    ({"state": "PENDING", "unacked": True}, "not acknowledged: the broker holds it"),
    ({"state": "PENDING", "unacked": False}, "no result, not in its queue and not held unacknowledged: lost"),
    ({"error": "boom"}, "its state could not be read (boom)"),
    # Its message went to the dead-letter queue after its delivery ceiling: said so, whatever its state.
    ({"state": "FAILURE", "dead_lettered": "sturdy.dead.default"},
     "dead-lettered: the agent moved it to sturdy.dead.default after its delivery ceiling"),
    # RQ: a job whose work horse died is not run again by RQ; the operator requeues it.
    ({"id": "j1", "rq_status": "failed", "queue": "parcel.scales"},
     "RQ put it in the failed job registry (a job whose work horse was killed is not run again). Next: once the cause "
     "is fixed, rq requeue --queue parcel.scales j1"),
    ({"id": "j1", "rq_status": "started", "queue": "parcel.scales"}, "RQ still lists it as started"),
    ({"id": "j1", "rq_status": "finished"}, "it ran to its end"),
    ({"id": "j1", "rq_status": None}, "RQ has no record of it any more"),
    ({"id": "j1", "rq_status": None, "error": "boom"}, "its state could not be read (boom)"),
])
def test_what_became_of_an_interrupted_task(task, words):
    assert task_words(task).startswith(words)


def test_running_tasks_of_the_dead_invocation_are_reported_with_their_fate():
    tasks = [{"id": "t1", "name": "shopdemo.sleep", "invocation": "inv1", "ran": 4.2, "state": "PENDING",
              "unacked": True},
             {"id": "t0", "name": "shopdemo.sleep", "invocation": "inv0"}]
    d = diagnosis(UNIT, {"ActiveState": "active", "NRestarts": "1"}, [exit_record("killed", "9")], [], None, [], tasks)
    assert [t["id"] for t in d["running_tasks"]] == ["t1"]
    text = "\n".join(summary("h1", d))
    assert "h1 shop-worker@1.service: active (Result=-, NRestarts=1)" in text
    assert "it was running shopdemo.sleep[t1], started 4.2s before: not acknowledged" in text


def test_a_live_instance_is_said_to_run_its_tasks_not_to_have_lost_them():
    # The unit was never killed: its task records are those of the invocation running now.
    tasks = [{"id": "t1", "name": "thumbs.render", "invocation": "inv9", "running_for": 5.3, "state": "PENDING",
              "unacked": True}]
    props = {"ActiveState": "active", "NRestarts": "0", "InvocationID": "inv9", "Result": "success"}
    d = diagnosis(UNIT, props, [], [], None, [], tasks)
    assert d["running_tasks"] == [] and [t["id"] for t in d["current_tasks"]] == ["t1"]
    text = "\n".join(summary("h2", d))
    assert "it is running thumbs.render[t1] now, for 5.3s" in text and "it was running" not in text
    assert "why: it has not died" in text and "hands it out again" not in text
    # Stopped (not active), the same records are what it was running when it went down.
    d = diagnosis(UNIT, dict(props, ActiveState="failed", Result="timeout"), [], [], None, [], tasks)
    assert [t["id"] for t in d["running_tasks"]] == ["t1"] and d["current_tasks"] == []


def test_a_unit_refused_by_its_start_limit_is_told_so_with_the_reset():
    d = diagnosis(UNIT, {"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "0"}, [], [], None, [], [])
    assert d["cause"].startswith("systemd refused to start it again: it hit its start limit"), d["cause"]
    assert "systemctl reset-failed <unit> && systemctl start <unit>" in d["next"]


def test_a_start_refused_for_its_listening_socket_names_the_socket_and_what_it_said():
    # The restart stopped the old process (a clean exit), then its socket could not bind: the cause is the socket.
    refused = {**pid1_message("Dependency failed for shop web (instance 1).", invocation=None),
               "__REALTIME_TIMESTAMP": "1001000000"}
    # As systemd 257's sd-listen says it (the unit first), then PID 1.
    socket_said = ["shop-web@1.socket: Failed to create listening socket (127.0.0.1:8000): Address already in use",
                   "Failed to listen on shop-web@1.socket - shop web listening socket (instance 1)."]
    d = diagnosis("shop-web@1.service", {"ActiveState": "inactive"}, [exit_record("exited", "0"), refused], [], None,
                  [], [], required=socket_said)
    assert d["cause"] == ("systemd did not start it: a unit it requires failed to start (its listening socket: Failed "
                          "to create listening socket (127.0.0.1:8000): Address already in use)"), d["cause"]
    assert "sturdy_processes[].listen" in d["next"] and "systemctl start shop-web@1.service" in d["next"]
    # A refusal before the last death is history: the death is the cause.
    older = {**refused, "__REALTIME_TIMESTAMP": "900000000"}
    d = diagnosis("shop-web@1.service", {}, [exit_record("killed", "9"), older], [], None, [], [])
    assert d["cause"].startswith("it was killed"), d["cause"]
