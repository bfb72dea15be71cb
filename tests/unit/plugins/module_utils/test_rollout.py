"""The rolling restart loop against a simulated systemd (the host boundary): order, readiness, crash loops."""

from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.rollout import Host, RolloutError, roll


class FakeSystemd:
    """Units that restart as told: `crash_after` polls after a restart a unit's process dies and systemd restarts it
    (NRestarts + 1, new invocation); `fail_restart` makes `systemctl restart` itself fail."""

    def __init__(self, names, crash_after=None, fail_restart=(), journal="Main process exited, code=exited\n"):
        self.units = {n: {"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0",
                          "MainPID": "100", "InvocationID": "inv0"} for n in names}
        self.crash_after, self.fail_restart, self.journal_text = dict(crash_after or {}), set(fail_restart), journal
        self.polls, self.log, self.now = {}, [], 0.0

    def run(self, argv):
        self.log.append(argv)
        names = argv[argv.index("--") + 1:] if "--" in argv else argv[-1:]
        if argv[:2] == ["systemctl", "show"]:
            name = argv[-1]
            self.polls[name] = self.polls.get(name, 0) + 1
            unit = self.units[name]
            if name in self.crash_after and self.polls[name] > self.crash_after[name]:
                unit.update(NRestarts=str(int(unit["NRestarts"]) + 1), InvocationID=unit["InvocationID"] + "x",
                            MainPID=str(int(unit["MainPID"]) + 1))
            return 0, "".join(f"{k}={v}\n" for k, v in unit.items()), ""
        if argv[:2] in (["systemctl", "restart"], ["systemctl", "start"]):
            for name in names:
                unit = self.units.setdefault(name, {"ActiveState": "inactive", "SubState": "dead", "Result": "success",
                                                    "NRestarts": "0", "MainPID": "0", "InvocationID": ""})
                if name in self.fail_restart:
                    unit.update(ActiveState="failed", SubState="failed", Result="exit-code")
                    continue
                unit.update(InvocationID=f"inv-{len(self.log)}-{name}", MainPID=str(200 + len(self.log)),
                            NRestarts="0", ActiveState="active", SubState="running",
                            ActiveExitTimestampMonotonic="5000000", InactiveEnterTimestampMonotonic="12250000")
                self.polls[name] = 0
            if self.fail_restart & set(names):
                return 1, "", "Job for x failed because the control process exited with error code."
            return 0, "", ""
        if argv[:2] == ["systemctl", "stop"]:
            for name in names:
                self.units[name].update(ActiveState="deactivating", SubState="stop-sigterm")
            return 0, "", ""
        if argv[0] == "journalctl":
            return 0, "" if "--sync" in argv else self.journal_text, ""
        return 0, "", ""

    def host(self, http=lambda url: True):
        def sleep(seconds):
            self.now += seconds
        return Host(self.run, http, clock=lambda: self.now, wall=lambda: 1000.0 + self.now, sleep=sleep)


def restarts(fake, verb="restart"):
    """The units of each `systemctl <verb>` call, in order, one call's units joined by a space."""
    return [" ".join(argv[argv.index("--") + 1:]) for argv in fake.log if argv[:2] == ["systemctl", verb]]


def test_units_restart_in_order_each_settled_before_the_next():
    fake = FakeSystemd(["a@1.service", "a@2.service"])
    done = roll(fake.host(), ["a@1.service", {"name": "a@2.service"}], settle=2, overlap_settle=False)["restarted"]
    assert [d["name"] for d in done] == ["a@1.service", "a@2.service"] == restarts(fake)
    # Each was watched for the settle window before the next restart.
    assert all(d["seconds"] >= 2 for d in done)
    assert done[0]["before"]["InvocationID"] == "inv0" and done[0]["after"]["InvocationID"] != "inv0"
    # How long each stop waited (for running tasks, under a warm shutdown), from systemd's own timestamps.
    assert done[0]["stop_seconds"] == 7.25 and done[0]["stop_timed_out"] is False
    # The start-limit counter is reset before each deliberate restart.
    resets = [i for i, argv in enumerate(fake.log) if argv[:2] == ["systemctl", "reset-failed"]]
    assert len(resets) == 2


def test_a_crash_loop_stops_the_rollout_and_names_the_untouched_units():
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@3.service"], crash_after={"a@2.service": 2},
                       journal="Traceback\nRuntimeError: broken on purpose\nMain process exited, code=exited\n")
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), ["a@1.service", "a@2.service", "a@3.service"], settle=5, overlap_settle=False)
    assert err.value.failed_unit == "a@2.service"
    assert "a@2.service did not come up on the new code: systemd restarted it on its own" in err.value.msg
    assert "Not restarted, still on the code they ran: a@3.service" in err.value.msg
    assert "RuntimeError: broken on purpose" in err.value.msg
    assert [d["name"] for d in err.value.restarted] == ["a@1.service"]
    assert restarts(fake) == ["a@1.service", "a@2.service"]


def test_a_failed_restart_job_is_reported_with_systemds_words():
    fake = FakeSystemd(["a@1.service"], fail_restart={"a@1.service"})
    with pytest.raises(RolloutError, match="the restart failed .Job for x failed"):
        roll(fake.host(), ["a@1.service"])


def test_readiness_url_is_waited_for_and_times_out():
    fake = FakeSystemd(["web@1.service"])
    answers = iter([False, False, True])
    done = roll(fake.host(http=lambda url: next(answers)), [{"name": "web@1.service", "http": "http://x/h"}],
                settle=0)["restarted"]
    assert done[0]["ready_seconds"] == 1.0  # two polls of 0.5 s
    never = FakeSystemd(["web@1.service"])
    with pytest.raises(RolloutError, match="http://x/h did not answer 2xx within 3s"):
        roll(never.host(http=lambda url: False), [{"name": "web@1.service", "http": "http://x/h"}], ready_timeout=3)


def test_the_journal_is_read_until_systemds_exit_record_is_there():
    fake = FakeSystemd(["a@1.service"], crash_after={"a@1.service": 1}, journal="only the traceback so far\n")
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), ["a@1.service"], journal_lines=1)
    # Ten reads 0.5 s apart, then it reports what there is.
    assert sum(1 for argv in fake.log if argv[0] == "journalctl" and "--sync" not in argv) == 10
    assert err.value.journal == ["only the traceback so far"]


def test_a_stop_that_used_its_whole_timeout_is_told_apart_from_a_warm_shutdown():
    # 7.25 s of stop against TimeoutStopSec=7s: systemd SIGKILLed what still ran. Against 1min 30s: a warm shutdown.
    for timeout, killed in (("7s", True), ("7250ms", True), ("1min 30s", False), ("infinity", False)):
        fake = FakeSystemd(["a@1.service"])
        fake.units["a@1.service"]["TimeoutStopUSec"] = timeout
        (done,) = roll(fake.host(), ["a@1.service"], settle=0)["restarted"]
        assert (done["stop_seconds"], done["stop_timed_out"]) == (7.25, killed), timeout


def test_surge_units_come_up_first_then_the_instances_restart_in_batches_and_the_surge_drains():
    fake = FakeSystemd([f"a@{n}.service" for n in (1, 2, 3, 4)])
    group = {"units": [f"a@{n}.service" for n in (1, 2, 3, 4)], "surge": ["a@5.service", "a@6.service"],
             "max_unavailable": 0}
    done = roll(fake.host(), groups=[group], settle=1)
    # Both surge units started (one call, side by side) before any running instance was touched.
    verbs = [argv[1] for argv in fake.log if argv[:2] in (["systemctl", "start"], ["systemctl", "restart"],
                                                          ["systemctl", "stop"])]
    assert verbs == ["start", "restart", "restart", "stop"]
    assert restarts(fake, "start") == ["a@5.service a@6.service"]
    # Batches of len(surge) + max_unavailable = 2: never fewer than four consume.
    assert restarts(fake, "restart") == ["a@1.service a@2.service", "a@3.service a@4.service"]
    # Told to stop without waiting for their running tasks, once the last batch was stable.
    assert [argv for argv in fake.log if argv[:2] == ["systemctl", "stop"]] == [
        ["systemctl", "stop", "--no-block", "--", "a@5.service", "a@6.service"]]
    assert [d["name"] for d in done["restarted"]] == group["units"]
    assert [s["name"] for s in done["surge"]] == ["a@5.service", "a@6.service"]


def test_only_restarts_the_listed_units_and_skips_a_type_with_none_surge_included():
    fake = FakeSystemd(["a@1.service", "a@2.service", "b@1.service"])
    groups = [{"units": ["a@1.service", "a@2.service"], "surge": ["a@3.service"], "max_unavailable": 0},
              {"units": ["b@1.service"], "max_unavailable": 1}]
    done = roll(fake.host(), groups=groups, only=["b@1.service"], settle=0)
    assert restarts(fake, "start") == [] and restarts(fake) == ["b@1.service"]
    assert done["surge"] == []


def test_a_surge_unit_that_does_not_come_up_stops_the_rollout_before_any_running_instance_is_touched():
    fake = FakeSystemd(["a@1.service", "a@2.service", "b@1.service"], crash_after={"a@3.service": 1})
    groups = [{"units": ["a@1.service", "a@2.service"], "surge": ["a@3.service"]}, {"units": ["b@1.service"]}]
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), groups=groups, settle=3)
    assert err.value.failed_unit == "a@3.service"
    assert "a@3.service (a surge instance, started beside the running ones before any of them was stopped) did not " \
           "come up on the new code: systemd restarted it on its own" in err.value.msg
    assert "Not restarted, still on the code they ran: a@1.service, a@2.service, b@1.service" in err.value.msg
    assert restarts(fake) == [] and restarts(fake, "stop") == ["a@3.service"]


def test_a_failing_batch_names_its_partner_stops_the_surge_and_leaves_the_rest():
    fake = FakeSystemd([f"a@{n}.service" for n in (1, 2, 3, 4)], fail_restart={"a@2.service"})
    group = {"units": [f"a@{n}.service" for n in (1, 2, 3, 4)], "surge": ["a@5.service"], "max_unavailable": 1}
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), groups=[group], settle=0)
    assert err.value.failed_unit == "a@2.service"
    assert "a@2.service did not come up on the new code: the restart failed" in err.value.msg
    assert "(restarted together with a@1.service)" in err.value.msg
    assert "Not restarted, still on the code they ran: a@3.service, a@4.service" in err.value.msg
    assert restarts(fake, "stop") == ["a@5.service"]


def test_a_deferred_settle_leaves_the_last_batch_to_the_caller_and_still_catches_its_crash():
    from ansible_collections.sturdy.workers.plugins.module_utils.rollout import finish_settle

    fake = FakeSystemd(["a@1.service", "a@2.service"])
    done = roll(fake.host(), ["a@1.service", "a@2.service"], settle=5, defer_settle=True)
    first, last = done["restarted"]
    # The first batch is watched before the next restart as always; the last returns once ready.
    assert first["seconds"] >= 5 and last["seconds"] < 5
    settling = done["settling"]
    assert list(settling["units"]) == ["a@2.service"] and settling["until"] == pytest.approx(fake.now + 5)
    assert settling["units"]["a@2.service"]["InvocationID"] == fake.units["a@2.service"]["InvocationID"]
    # The caller's other work takes 2 s; the watch then runs only to `until`, 3 s more.
    fake.now += 2
    finish_settle(fake.host(), settling)
    assert fake.now == pytest.approx(settling["until"], abs=0.5)
    # An instance that crashes after coming up fails there, with its journal.
    fake = FakeSystemd(["a@1.service", "a@2.service"], crash_after={"a@2.service": 3},
                       journal="RuntimeError: broken on purpose\nMain process exited, code=exited\n")
    settling = roll(fake.host(), ["a@1.service", "a@2.service"], settle=5, defer_settle=True)["settling"]
    with pytest.raises(RolloutError) as caught:
        finish_settle(fake.host(), settling)
    assert caught.value.failed_unit == "a@2.service" and "came up on the new code, then did not stay up" in str(caught.value)
    assert "crash loop" in caught.value.msg and "RuntimeError: broken on purpose" in caught.value.msg
    # Without defer_settle every batch is watched, and nothing is left.
    assert roll(FakeSystemd(["a@1.service"]).host(), ["a@1.service"], settle=1)["settling"] == {}


def test_a_deferred_settle_is_not_taken_where_surge_instances_wait_for_the_last_batch():
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@s1.service"])
    done = roll(fake.host(), groups=[{"units": ["a@1.service", "a@2.service"], "surge": ["a@s1.service"],
                                      "max_unavailable": 1}], settle=3, defer_settle=True, overlap_settle=False)
    assert done["settling"] == {} and all(d["seconds"] >= 3 for d in done["restarted"])


def test_overlapped_settle_restarts_the_next_batch_once_ready_and_watches_every_window_to_its_end():
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@3.service"])
    done = roll(fake.host(), ["a@1.service", "a@2.service", "a@3.service"], settle=5, overlap_settle=True)
    assert restarts(fake) == ["a@1.service", "a@2.service", "a@3.service"]
    # The first was watched to the end of its window before the second restarted; the others back to back: no
    # batch after the first waited for the window of the one before.
    assert done["restarted"][0]["seconds"] >= 5 and all(d["seconds"] < 5 for d in done["restarted"][1:])
    # Every window was watched to its end before the loop returned, and nothing is left to the caller: one window
    # for the first, one for the rest together.
    assert 10 <= fake.now < 15 and done["settling"] == {}
    # Each unit was looked at again after every later restart while its window ran.
    assert fake.polls["a@1.service"] >= 3


def test_an_overlapped_window_that_catches_a_crash_stops_the_rollout_naming_the_unit_and_the_rest():
    units = ["a@1.service", "a@2.service", "a@3.service", "a@4.service"]
    fake = FakeSystemd(units, crash_after={"a@2.service": 2},
                       journal="RuntimeError: broken on purpose\nMain process exited, code=exited\n")
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), units, settle=5, overlap_settle=True)
    assert err.value.failed_unit == "a@2.service"
    assert "a@2.service came up on the new code, then did not stay up" in err.value.msg
    assert "the units restarted after it while it was watched run the new code too" in err.value.msg
    assert "Not restarted, still on the code they ran: a@4.service" in err.value.msg
    assert [d["name"] for d in err.value.restarted] == ["a@1.service", "a@2.service", "a@3.service"]
    assert restarts(fake) == ["a@1.service", "a@2.service", "a@3.service"]


def test_an_overlapped_rollout_catches_a_build_dying_in_the_first_window_before_the_rest_restart():
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@3.service"], crash_after={"a@1.service": 2},
                       journal="RuntimeError: broken on purpose\nMain process exited, code=exited\n")
    with pytest.raises(RolloutError) as err:
        roll(fake.host(), ["a@1.service", "a@2.service", "a@3.service"], settle=5, overlap_settle=True)
    assert err.value.failed_unit == "a@1.service"
    assert "the units restarted after it" not in err.value.msg
    assert "Not restarted, still on the code they ran: a@2.service, a@3.service" in err.value.msg
    assert restarts(fake) == ["a@1.service"]


def test_overlapped_and_deferred_windows_go_to_the_caller_together_and_surge_waits_for_all_of_them():
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@3.service"])
    done = roll(fake.host(), ["a@1.service", "a@2.service", "a@3.service"], settle=5, overlap_settle=True,
                defer_settle=True)
    # The first was watched to its end; the later ones go to the caller together.
    assert 5 <= fake.now < 10 and sorted(done["settling"]["units"]) == ["a@2.service", "a@3.service"]
    assert done["settling"]["until"] == pytest.approx(fake.now + 5, abs=0.6)
    # One instance: its window goes to the caller.
    fake = FakeSystemd(["a@1.service"])
    done = roll(fake.host(), ["a@1.service"], settle=5, overlap_settle=True, defer_settle=True)
    assert fake.now < 5 and list(done["settling"]["units"]) == ["a@1.service"]
    # With surge instances, they are told to stop only once every window of their type has ended.
    fake = FakeSystemd(["a@1.service", "a@2.service", "a@s1.service"])
    done = roll(fake.host(), groups=[{"units": ["a@1.service", "a@2.service"], "surge": ["a@s1.service"],
                                      "max_unavailable": 0}], settle=3, overlap_settle=True, defer_settle=True)
    stop = next(i for i, argv in enumerate(fake.log) if argv[:2] == ["systemctl", "stop"])
    assert done["settling"] == {} and fake.now >= 3 + 3
    last_show = max(i for i, argv in enumerate(fake.log) if argv[:2] == ["systemctl", "show"])
    assert stop > last_show


def test_a_watch_looks_at_every_unit_once_more_at_or_after_the_end_of_its_window():
    from ansible_collections.sturdy.workers.plugins.module_utils.rollout import watch

    fake = FakeSystemd(["a@1.service", "a@2.service"])
    seen = []
    run = fake.run

    def recording(argv):
        if argv[:2] == ["systemctl", "show"]:
            seen.append((argv[-1], fake.now))
            fake.now += 0.1  # a look takes time on a busy host
        return run(argv)

    fake.run = recording
    state = {"InvocationID": "inv0", "MainPID": "100", "NRestarts": "0", "ActiveState": "active"}
    assert watch(fake.host(), {"a@1.service": state, "a@2.service": state}, until=1.5) == (None, None)
    assert all(max(t for n, t in seen if n == name) >= 1.5 for name in ("a@1.service", "a@2.service")), seen


def test_the_journal_of_a_service_that_did_not_start_has_its_sockets_lines_too():
    # A socket that could not bind: the service's own journal says only "Dependency failed"; the socket's says why.
    calls = []

    def run(argv):
        calls.append(argv)
        if "--sync" in argv:
            return 0, "", ""
        return 0, ("shop-web@1.socket: Failed to create listening socket (127.0.0.1:8001): Address already in use\n"
                   "shop-web@1.service: Job shop-web@1.service/start failed with result 'dependency'.\n"), ""

    lines = Host(run, lambda url: True, clock=lambda: 0.0, wall=lambda: 1000.0, sleep=lambda s: None).journal(
        "shop-web@1.service", 990.0, 20)
    assert "Address already in use" in lines[0]
    asked = [argv for argv in calls if "--sync" not in argv]
    assert len(asked) == 1 and asked[0][asked[0].index("-u") + 1:asked[0].index("-u") + 4] == [
        "shop-web@1.service", "-u", "shop-web@1.socket"]
