from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.sturdy.workers.plugins.modules import unit_health


class Exit(Exception):
    pass


def run_module(monkeypatch, args, responses):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/systemctl")
    calls = []

    def fake_run(self, argv, **kwargs):
        calls.append(argv)
        for prefix, response in responses:
            if argv[: len(prefix)] == prefix:
                return response
        raise AssertionError(argv)

    results = {}

    def exit_json(self, **kwargs):
        results.update(kwargs)
        raise Exit

    def fail_json(self, **kwargs):
        results.update(kwargs, failed=True)
        raise Exit

    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with pytest.raises(Exit):
        unit_health.main()
    return results, calls


def test_reports_members_and_never_changes(monkeypatch):
    result, calls = run_module(
        monkeypatch,
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


def test_fails_with_a_message_when_not_systemd(monkeypatch):
    result, dummy = run_module(
        monkeypatch,
        {},
        [(["/usr/bin/systemctl", "--version"], (1, "", "System has not been booted with systemd"))],
    )
    assert result["failed"] and "System has not been booted with systemd" in result["msg"]
