from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.modules import unit_health


def test_reports_members_and_never_changes(run_module):
    result, calls = run_module(
        unit_health,
        {"target": "shop.target", "_ansible_check_mode": True},
        [
            (["/usr/bin/systemctl", "--version"], (0, "systemd 252 (252.39)\n", "")),
            (["/usr/bin/systemctl", "show", "--property=Wants,ConsistsOf"], (0, "shop-w@1.service\n\n", "")),
            (["/usr/bin/systemctl", "show"], (0, "Id=shop-w@1.service\nActiveState=active\n", "")),
        ],
    )
    assert result["changed"] is False
    assert result["systemd_version"] == 252
    assert result["units"]["shop-w@1.service"]["ActiveState"] == "active"
    assert all("start" not in c and "stop" not in c for c in calls)


def test_fails_with_a_message_when_not_systemd(run_module):
    result, dummy = run_module(
        unit_health,
        {},
        [(["/usr/bin/systemctl", "--version"], (1, "", "System has not been booted with systemd"))],
    )
    assert result["failed"] and "System has not been booted with systemd" in result["msg"]
