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
        if argv[:2] == ["systemctl", "show"]:
            name = argv[-1]
            self.polls[name] = self.polls.get(name, 0) + 1
            unit = self.units[name]
            if name in self.crash_after and self.polls[name] > self.crash_after[name]:
                unit.update(NRestarts=str(int(unit["NRestarts"]) + 1), InvocationID=unit["InvocationID"] + "x",
                            MainPID=str(int(unit["MainPID"]) + 1))
            return 0, "".join(f"{k}={v}\n" for k, v in unit.items()), ""
        if argv[:2] == ["systemctl", "restart"]:
            name = argv[-1]
            if name in self.fail_restart:
                return 1, "", "Job for x failed because the control process exited with error code."
            unit = self.units[name]
            unit.update(InvocationID=f"inv-{len(self.log)}", MainPID=str(200 + len(self.log)), NRestarts="0",
                        ActiveExitTimestampMonotonic="5000000", InactiveEnterTimestampMonotonic="12250000")
            self.polls[name] = 0
            return 0, "", ""
        if argv[0] == "journalctl":
            return 0, "" if "--sync" in argv else self.journal_text, ""
        return 0, "", ""

    def host(self, http=lambda url: True):
        def sleep(seconds):
            self.now += seconds
        return Host(self.run, http, clock=lambda: self.now, wall=lambda: 1000.0 + self.now, sleep=sleep)


def restarts(fake):
    return [argv[-1] for argv in fake.log if argv[:2] == ["systemctl", "restart"]]


def test_units_restart_in_order_each_settled_before_the_next():
    fake = FakeSystemd(["a@1.service", "a@2.service"])
    done = roll(fake.host(), ["a@1.service", {"name": "a@2.service"}], settle=2)
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
        roll(fake.host(), ["a@1.service", "a@2.service", "a@3.service"], settle=5)
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
    done = roll(fake.host(http=lambda url: next(answers)), [{"name": "web@1.service", "http": "http://x/h"}], settle=0)
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
        (done,) = roll(fake.host(), ["a@1.service"], settle=0)
        assert (done["stop_seconds"], done["stop_timed_out"]) == (7.25, killed), timeout
