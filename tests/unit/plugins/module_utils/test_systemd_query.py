from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    SystemdQueryError,
    parse_members,
    parse_show,
    parse_version,
    query,
)

# Captured from systemd 257 (trixie) and 252 (bookworm) test hosts.
VERSION_257 = "systemd 257 (257.13-1~deb13u1)\n+PAM +AUDIT +SELINUX +APPARMOR\n"
VERSION_252 = "systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT\n"
SHOW_TWO = (
    "Id=shop-worker@1.service\nActiveState=active\nUnitFileState=enabled\n\n"
    "Id=shop-worker@2.service\nActiveState=failed\nUnitFileState=disabled\n"
)


def test_parse_version():
    assert parse_version(VERSION_257) == 257
    assert parse_version(VERSION_252) == 252


def test_parse_version_refuses_other_output():
    with pytest.raises(SystemdQueryError, match="cannot read the systemd version"):
        parse_version("System has not been booted with systemd")


def test_parse_show_splits_units():
    assert parse_show(SHOW_TWO) == [
        {"Id": "shop-worker@1.service", "ActiveState": "active", "UnitFileState": "enabled"},
        {"Id": "shop-worker@2.service", "ActiveState": "failed", "UnitFileState": "disabled"},
    ]


def test_parse_show_keeps_values_with_equals_signs_and_empty_values():
    assert parse_show("Id=a.service\nEnvironment=A=1 B=2\nResult=\n") == [
        {"Id": "a.service", "Environment": "A=1 B=2", "Result": ""}
    ]


def test_parse_members_keeps_services_only():
    text = "shop-worker@2.service shop-worker@1.service\nshop-worker@1.service shop-web@1.service foo.socket\n"
    assert parse_members(text) == ["shop-web@1.service", "shop-worker@1.service", "shop-worker@2.service"]


class FakeSystemctl:
    """The boundary that cannot run in a unit test: systemctl talking to PID 1."""

    def __init__(self, responses):
        self.responses = responses
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        for prefix, response in self.responses:
            if argv[: len(prefix)] == prefix:
                return response
        raise AssertionError(f"unexpected call {argv}")


def test_query_reads_version_members_and_their_state():
    run = FakeSystemctl(
        [
            (["systemctl", "--version"], (0, VERSION_252, "")),
            (["systemctl", "show", "--property=Wants,ConsistsOf"], (0, "shop-worker@1.service\nshop-worker@2.service\n", "")),
            (["systemctl", "show", "--property=Id,ActiveState,UnitFileState"], (0, SHOW_TWO, "")),
        ]
    )
    result = query(run, [], "shop.target", ["ActiveState", "UnitFileState"])
    assert result["systemd_version"] == 252
    assert result["members"] == ["shop-worker@1.service", "shop-worker@2.service"]
    assert result["units"]["shop-worker@2.service"]["ActiveState"] == "failed"
    assert run.calls[-1][-3:] == ["--", "shop-worker@1.service", "shop-worker@2.service"]


def test_query_without_units_or_target_only_reads_the_version():
    run = FakeSystemctl([(["systemctl", "--version"], (0, VERSION_257, ""))])
    assert query(run, [], None) == {"systemd_version": 257, "members": [], "units": {}}
    assert len(run.calls) == 1


def test_query_reports_a_failing_systemctl():
    run = FakeSystemctl([(["systemctl", "--version"], (1, "", "Failed to connect to bus"))])
    with pytest.raises(SystemdQueryError, match="Failed to connect to bus"):
        query(run, [], None)


def test_query_refuses_mismatched_output():
    run = FakeSystemctl(
        [
            (["systemctl", "--version"], (0, VERSION_257, "")),
            (["systemctl", "show"], (0, "Id=a.service\n", "")),
        ]
    )
    with pytest.raises(SystemdQueryError, match="returned 1 units for 2"):
        query(run, ["a.service", "b.service"], None)
