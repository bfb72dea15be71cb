from __future__ import annotations

import json

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import LockHeld, read, release, take

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


def test_a_stale_lock_is_named_stale_and_taken_over_only_when_asked(tmp_path):
    path = str(tmp_path / ".deploy.lock")
    take(path, "old", "bob@ci", "b1", now=NOW)
    with pytest.raises(LockHeld, match="is STALE.*sturdy_deploy_break_lock=true"):
        take(path, "new", stale_after=60, now=NOW + 61)
    changed, holder, warning = take(path, "new", stale_after=60, break_stale=True, now=NOW + 61)
    assert changed and holder["run_id"] == "old" and "Took over the stale deploy lock" in warning
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
