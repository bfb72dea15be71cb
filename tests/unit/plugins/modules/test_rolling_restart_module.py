from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.modules import rolling_restart

SHOW = "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\nMainPID={pid}\nInvocationID={inv}\n"


def test_check_mode_names_the_units_and_restarts_nothing(run_module):
    result, calls = run_module(rolling_restart, {"units": ["a@1.service", {"name": "a@2.service"}],
                                                 "_ansible_check_mode": True})
    assert result["changed"] and [u["name"] for u in result["restarted"]] == ["a@1.service", "a@2.service"]
    assert calls == []


def test_restarts_and_reports_each_unit(run_module):
    state = {"inv": "old", "pid": 1}

    def restart(argv):
        state.update(inv="new", pid=2)
        return 0, "", ""

    result, calls = run_module(rolling_restart, {"units": ["a@1.service"], "settle": 0}, [
        (["systemctl", "show"], lambda argv: (0, SHOW.format(**state), "")),
        (["systemctl", "reset-failed"], (0, "", "")),
        (["systemctl", "restart"], restart),
    ])
    assert result["changed"] and not result.get("failed")
    (unit,) = result["restarted"]
    assert unit["before"]["InvocationID"] == "old" and unit["after"]["InvocationID"] == "new"


def test_a_unit_that_does_not_come_up_fails_with_its_journal(run_module):
    result, dummy = run_module(rolling_restart, {"units": ["a@1.service", "a@2.service"], "settle": 0}, [
        (["systemctl", "show"], (0, SHOW.format(inv="x", pid=1), "")),
        (["systemctl", "reset-failed"], (0, "", "")),
        (["systemctl", "restart"], (1, "", "Job for a@1.service failed.")),
        (["journalctl", "--sync"], (0, "", "")),
        (["journalctl"], (0, "boom\nMain process exited, code=exited, status=1/FAILURE\n", "")),
    ])
    assert result["failed"] and result["failed_unit"] == "a@1.service"
    assert "Not restarted, still on the code they ran: a@2.service" in result["msg"]
    assert result["journal"][-1].startswith("Main process exited")


def test_a_deferred_watch_is_returned_then_finished_by_a_second_call(run_module):
    state = {"inv": "old", "pid": 1}

    def restart(argv):
        state.update(inv="new", pid=2)
        return 0, "", ""

    systemd = [
        (["systemctl", "show"], lambda argv: (0, SHOW.format(**state), "")),
        (["systemctl", "reset-failed"], (0, "", "")),
        (["systemctl", "restart"], restart),
        (["journalctl", "--sync"], (0, "", "")),
        (["journalctl"], (0, "RuntimeError: gone\nMain process exited, code=killed, status=9/KILL\n", "")),
    ]
    result, dummy = run_module(rolling_restart, {"units": ["a@1.service"], "settle": 30, "defer_settle": True},
                               systemd)
    settling = result["settling"]
    assert settling["units"]["a@1.service"]["InvocationID"] == "new" and result["restarted"][0]["seconds"] < 30
    # Finished at once (its watch ended), the unit still up: nothing restarted, nothing failed.
    result, calls = run_module(rolling_restart, {"settling": {**settling, "until": 0}}, systemd)
    assert not result.get("failed") and result["changed"] is False
    assert not any(c[:2] == ["systemctl", "restart"] for c in calls)
    # Gone since it came up: the task fails naming it, with its journal, secrets masked.
    state.update(inv="newer", pid=3)
    result, dummy = run_module(rolling_restart, {"settling": {**settling, "until": 0},
                                                 "secret_directives": []}, systemd)
    assert result["failed"] and result["failed_unit"] == "a@1.service"
    assert "came up on the new code, then did not stay up" in result["msg"] and "status=9/KILL" in result["msg"]
