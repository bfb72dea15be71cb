from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.module_utils.pause import confirmed, pause, read, resume


def test_a_pause_adds_process_types_and_all_absorbs_them(tmp_path):
    path = str(tmp_path / ".paused")
    assert read(path) is None
    assert pause(path, "alice@ci", "broker upgrade", ["mailer"], started=100.0, check=True)[0]
    assert read(path) is None
    changed, held = pause(path, "alice@ci", "broker upgrade", ["mailer"], started=100.0)
    assert changed and held["processes"] == ["mailer"] and held["started"] == "1970-01-01T00:01:40+00:00"
    assert (tmp_path / ".paused").stat().st_mode & 0o777 == 0o644
    assert pause(path, "alice@ci", "broker upgrade", ["mailer"])[0] is False
    held = pause(path, "bob@ci", "broker upgrade", ["worker"], started=200.0)[1]
    # Since when: the first pause's time.
    assert held["processes"] == ["mailer", "worker"] and held["started_epoch"] == 100.0 and held["owner"] == "bob@ci"
    assert pause(path, "bob@ci", "all of it", [])[1]["processes"] == []
    assert json.loads((tmp_path / ".paused").read_text())["message"] == "all of it"


def test_resuming_some_out_of_all_keeps_the_others_paused_and_all_removes_the_marker(tmp_path):
    path = str(tmp_path / ".paused")
    assert resume(path, [], ["worker", "mailer"]) == (False, None)
    pause(path, "alice@ci", "", [])
    changed, held = resume(path, ["mailer"], ["worker", "mailer"])
    assert changed and held["processes"] == ["worker"]
    assert resume(path, ["mailer"], ["worker", "mailer"])[0] is False
    assert resume(path, ["worker"], ["worker", "mailer"]) == (True, None)
    assert not (tmp_path / ".paused").exists()


def test_the_units_confirm_by_their_status_line_and_a_stopped_one_is_not_waited_for():
    shown = [{"Id": "shop-worker@1.service", "ActiveState": "active", "StatusText": "paused by alice since t0: ..."},
             {"Id": "shop-worker@2.service", "ActiveState": "active", "StatusText": "consuming (w2@h)"},
             {"Id": "shop-worker@3.service", "ActiveState": "inactive", "StatusText": ""}]
    units, waiting = confirmed(shown, paused=True)
    assert waiting == ["shop-worker@2.service"] and units["shop-worker@3.service"]["active"] == "inactive"
    assert confirmed(shown, paused=False)[1] == ["shop-worker@1.service"]
