from __future__ import annotations

import json

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import (
    LeaseKeeper, LockHeld, controller_identity, judge, read, release, renew, take, verdicts)

NOW = 1_800_000_000.0


def test_take_writes_who_and_when_and_keeps_a_lock_of_the_same_run(tmp_path):
    path = str(tmp_path / "app" / ".deploy.lock")
    changed, holder, warning = take(path, "run-1", "alice@ci", "2026.11.29-2", now=NOW)
    assert changed and holder == {} and warning is None
    data = json.loads(open(path).read())
    assert data["run_id"] == "run-1" and data["owner"] == "alice@ci" and data["build_id"] == "2026.11.29-2"
    assert data["started_epoch"] == NOW
    assert take(path, "run-1", now=NOW + 5)[0] is False


def test_another_run_is_refused_with_owner_build_and_age(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    take(path, "run-1", "alice@ci", "b2", now=NOW)
    with pytest.raises(LockHeld) as err:
        take(path, "run-2", now=NOW + 125)
    assert "Another deploy is running" in str(err.value)
    assert "alice@ci (run run-1) for build b2" in str(err.value) and "2 min 5 s ago" in str(err.value)
    assert err.value.holder["run_id"] == "run-1"


def test_a_lock_past_its_lease_is_dead_and_taken_over_only_when_asked(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    take(path, "old", "bob@ci", "b1", now=NOW)
    # Renewed 50 s later: its lease runs from there.
    assert renew(path, "old", now=NOW + 50) and not renew(path, "other", now=NOW + 50)
    with pytest.raises(LockHeld, match="Another deploy is running.*last sign of life 60 s ago"):
        take(path, "new", stale_after=60, break_stale=True, now=NOW + 110)
    with pytest.raises(LockHeld, match="held by a DEAD deploy.*no sign of life for 1 min 1 s.*"
                                       "sturdy_deploy_break_lock=true"):
        take(path, "new", stale_after=60, now=NOW + 111)
    changed, holder, warning = take(path, "new", stale_after=60, break_stale=True, now=NOW + 111)
    assert changed and holder["run_id"] == "old" and "Took over the deploy lock" in warning
    assert read(path)["run_id"] == "new"


def test_check_mode_takes_nothing(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    assert take(path, "run-1", check=True, now=NOW)[0] is True
    assert read(path) is None


def test_release_removes_only_its_own_lock(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    take(path, "run-1", now=NOW)
    assert release(path, "run-2") == (False, read(path))
    assert release(path, "run-1")[0] is True and read(path) is None


def test_an_unreadable_lock_is_held_by_an_unknown_owner(tmp_path):
    path = tmp_path / ".deploy.lock"
    path.write_text("not json")
    with pytest.raises(LockHeld, match="an unknown owner"):
        take(str(path), "run-1")


def fake_proc(tmp_path, processes, boot="boot-1"):
    """A /proc with processes {pid: (parent, start ticks, cmdline)}."""
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    for pid, (parent, start, cmdline) in processes.items():
        (proc / str(pid)).mkdir()
        fields = ["S", str(parent)] + ["0"] * 17 + [str(start)] + ["0"] * 5
        (proc / str(pid) / "stat").write_text(f"{pid} (py) (x) " + " ".join(fields) + "\n")
        (proc / str(pid) / "cmdline").write_bytes(cmdline)
    return str(proc)


def test_the_controller_is_the_ansible_playbook_process_its_workers_were_forked_from(tmp_path, monkeypatch):
    playbook = b"python\0/usr/bin/ansible-playbook\0deploy.yml\0"
    proc = fake_proc(tmp_path, {1: (0, 1, b"init"), 40: (1, 100, b"bash"), 50: (40, 200, playbook),
                                60: (50, 300, playbook)})
    monkeypatch.setattr("os.getpid", lambda: 60)
    assert controller_identity("ctl", proc) == {"host": "ctl", "boot_id": "boot-1", "pid": 50, "pid_start": "200"}
    # A worker that renamed itself still finds the ansible-playbook process it was forked from.
    proc = fake_proc(tmp_path / "2", {1: (0, 1, b"init"), 40: (1, 100, b"bash\0run-ansible-playbook.sh\0"),
                                      50: (40, 200, playbook), 60: (50, 300, b"ansible: worker\0")})
    assert controller_identity("ctl", proc)["pid"] == 50


def test_a_lock_from_this_controller_lives_exactly_as_long_as_its_process(tmp_path):
    proc = fake_proc(tmp_path, {50: (1, 200, b"x")})
    me = {"host": "ctl", "boot_id": "boot-1"}
    holder = {"run_id": "r1", "controller": {"host": "ctl", "boot_id": "boot-1", "pid": 50, "pid_start": "200"},
              "started_epoch": NOW, "renewed_epoch": NOW}
    # Alive even past its lease (a long restart elsewhere), dead at once when the process is gone or is another one.
    assert judge(holder, me, 60, NOW + 3600, proc)["alive"] is True
    reused = {**holder, "controller": {**holder["controller"], "pid_start": "199"}}
    assert judge(reused, me, 60, NOW + 1, proc) == {
        "alive": False, "why": "its ansible-playbook process 50 on ctl is gone (killed, or its terminal closed)"}
    rebooted = {**holder, "controller": {**holder["controller"], "boot_id": "boot-0"}}
    assert "ctl rebooted since" in judge(rebooted, me, 60, NOW + 1, proc)["why"]
    # From another controller only the lease tells, the freshest renewal across the hosts.
    elsewhere = {**holder, "controller": {**holder["controller"], "host": "ci-7"}}
    got = verdicts([{**elsewhere, "renewed_epoch": NOW}, {**elsewhere, "renewed_epoch": NOW + 100}, {}],
                   me, 60, NOW + 130, proc)
    assert got["r1"]["alive"] is True and got["r1"]["locks"] == 2 and "started from ci-7" in got["r1"]["why"]
    assert verdicts([elsewhere], me, 60, NOW + 130, proc)["r1"]["alive"] is False


def test_the_lease_is_renewed_while_a_long_step_runs(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    take(path, "r1", now=1000.0)
    with LeaseKeeper(path, "r1", every=0.05):
        import time  # pylint: disable=import-outside-toplevel
        time.sleep(0.3)
    assert read(path)["renewed_epoch"] > 1000.0


def test_the_maintenance_lock_refuses_the_next_run_but_not_the_one_holding_the_deploy_lock(tmp_path):
    from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import (
        hold_maintenance, maintenance_path, release_maintenance)

    lock = str(tmp_path / ".deploy.lock")
    take(lock, "running-deploy", now=NOW)
    maintenance = maintenance_path(lock)
    assert hold_maintenance(maintenance, "alice@ci-7", "Postgres upgrade until 02:00", now=NOW) == (True, {})
    assert oct(__import__("os").stat(maintenance).st_mode & 0o777) == "0o644"
    # The run that holds the deploy lock goes on; the next one is refused with who, when and why.
    assert take(lock, "running-deploy", now=NOW + 60)[0] is False
    release(lock, "running-deploy")
    with pytest.raises(LockHeld) as refused:
        take(lock, "next", "bob@ci", now=NOW + 3700, kind="rollback")
    assert str(refused.value) == (
        'Rollback refused: locked for maintenance by alice@ci-7 since 2027-01-15T08:00:00+00:00 (1 h 1 min ago): '
        '"Postgres upgrade until 02:00". Nothing was changed. When the maintenance is over, release it '
        '(ansible-playbook sturdy.workers.unlock) and run this again')
    assert read(lock) is None
    # The same owner and message again: kept. Someone else, or another message: refused, naming the holder.
    assert hold_maintenance(maintenance, "alice@ci-7", "Postgres upgrade until 02:00", now=NOW + 5)[0] is False
    with pytest.raises(LockHeld, match="Already locked for maintenance by alice@ci-7 since"):
        hold_maintenance(maintenance, "bob@ci", "other", now=NOW + 5)
    assert json.loads(open(maintenance).read())["message"] == "Postgres upgrade until 02:00"
    changed, holder = release_maintenance(maintenance)
    assert changed and holder["owner"] == "alice@ci-7" and read(maintenance) is None
    assert release_maintenance(maintenance) == (False, {})
    assert take(lock, "next", now=NOW + 3800)[0] is True


def test_check_mode_holds_and_releases_nothing(tmp_path):
    from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import hold_maintenance, release_maintenance

    path = str(tmp_path / ".maintenance.lock")
    assert hold_maintenance(path, "a", "m", check=True, now=NOW) == (True, {}) and read(path) is None
    hold_maintenance(path, "a", "m", now=NOW)
    assert release_maintenance(path, check=True)[0] is True and read(path) is not None
