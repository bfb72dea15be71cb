from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    SystemdQueryError,
    definition_paths,
    find_unit_files,
    is_outdated,
    parse_members,
    parse_show,
    parse_version,
    query,
    started_at,
    timespan_seconds,
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


def test_parse_show_keeps_every_line_of_a_repeated_property():
    # systemctl prints EnvironmentFiles= once per file.
    text = "Id=a.service\nEnvironmentFiles=/etc/a.env (ignore_errors=no)\nEnvironmentFiles=/etc/b.env (ignore_errors=yes)\n"
    props = parse_show(text)[0]
    assert props["EnvironmentFiles"] == "/etc/a.env (ignore_errors=no)\n/etc/b.env (ignore_errors=yes)"
    assert definition_paths(props) == ["/etc/a.env", "/etc/b.env"]


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
            if all(a.startswith(p) for a, p in zip(argv, prefix)) and len(argv) >= len(prefix):
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
    result = query(run, [], "shop.target", ["ActiveState", "UnitFileState"], mtime=lambda path: None)
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


RUNNING = {
    "ActiveState": "active",
    "MainPID": "812",
    "ExecMainStartTimestampMonotonic": "100000000",  # 100 s after boot
    "FragmentPath": "/etc/systemd/system/shop-worker@.service",
    "DropInPaths": "/etc/systemd/system/shop-worker@.service.d/10-x.conf",
    "EnvironmentFiles": "/etc/shop/shop.env (ignore_errors=no)\n/etc/shop/extra.env (ignore_errors=yes)",
}


def test_definition_paths_include_drop_ins_and_environment_files():
    assert definition_paths(RUNNING) == [
        "/etc/systemd/system/shop-worker@.service",
        "/etc/systemd/system/shop-worker@.service.d/10-x.conf",
        "/etc/shop/shop.env",
        "/etc/shop/extra.env",
    ]


def test_a_process_started_after_every_change_is_current():
    # offset 1000: realtime = monotonic + 1000; every file changed at monotonic 50..90
    mtimes = {p: 1050.0 + i * 10 for i, p in enumerate(definition_paths(RUNNING))}
    assert not is_outdated(RUNNING, mtimes.get, monotonic_offset=1000.0)


def test_a_changed_environment_file_makes_the_process_outdated():
    mtimes = dict.fromkeys(definition_paths(RUNNING), 1050.0)
    mtimes["/etc/shop/shop.env"] = 1100.5  # monotonic 100.5, after the start at 100
    assert is_outdated(RUNNING, mtimes.get, monotonic_offset=1000.0)


UNIT_TEXTS = {
    "/etc/systemd/system/shop-worker@.service": "[Service]\nLoadCredential=BROKER_URL:/etc/shop/credentials/BROKER_URL\n",
    "/etc/systemd/system/shop-worker@.service.d/10-x.conf": "[Service]\n  LoadCredentialEncrypted=KEY:/etc/shop/credentials/KEY.cred\n",
}


def test_definition_paths_include_the_credentials_the_unit_files_load():
    paths = definition_paths(RUNNING, lambda path: UNIT_TEXTS.get(path, ""))
    assert paths[-2:] == ["/etc/shop/credentials/BROKER_URL", "/etc/shop/credentials/KEY.cred"]


def test_a_changed_credential_makes_the_process_outdated():
    mtimes = dict.fromkeys(definition_paths(RUNNING), 1050.0)
    mtimes["/etc/shop/credentials/KEY.cred"] = 1100.5
    assert not is_outdated(RUNNING, mtimes.get, monotonic_offset=1000.0)
    assert is_outdated(RUNNING, mtimes.get, monotonic_offset=1000.0, read=lambda path: UNIT_TEXTS.get(path, ""))


@pytest.mark.parametrize("change", [{"ActiveState": "failed"}, {"MainPID": "0"}, {"ExecMainStartTimestampMonotonic": "0"}])
def test_only_a_running_process_can_be_outdated(change):
    props = dict(RUNNING, **change)
    assert not is_outdated(props, lambda path: 99999.0, monotonic_offset=0.0)


def test_started_at_puts_the_main_process_start_on_the_wall_clock():
    # ExecMainStartTimestampMonotonic 100 s, realtime = monotonic + 1000.
    assert started_at(RUNNING, monotonic_offset=1000.0) == 1100.0
    assert started_at(RUNNING, monotonic_offset=0.0) == 100.0  # on the monotonic clock itself
    for change in ({"ActiveState": "failed"}, {"MainPID": "0"}, {"ExecMainStartTimestampMonotonic": "0"}):
        assert started_at(dict(RUNNING, **change), monotonic_offset=1000.0) is None


def test_find_unit_files_takes_the_first_directory_and_reads_the_marker(tmp_path):
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    etc.mkdir()
    lib.mkdir()
    (etc / "shop-worker@.service").write_text("#\n# sturdy.workers: app=shop\n[Unit]\n")
    (lib / "shop-worker@.service").write_text("[Unit]\n")
    (etc / "shop-api-worker@.service").write_text("# sturdy.workers: app=shop-api\n")
    (lib / "shop.target").write_text("[Unit]\n")
    (lib / "other.service").write_text("[Unit]\n")
    found = find_unit_files(["shop-*@.service", "shop.target"], "# sturdy.workers: app=shop", (str(etc), str(lib)))
    assert found == {
        "shop-worker@.service": {"path": str(etc / "shop-worker@.service"), "marker": True},
        "shop-api-worker@.service": {"path": str(etc / "shop-api-worker@.service"), "marker": False},
        "shop.target": {"path": str(lib / "shop.target"), "marker": False},
    }


def test_find_unit_files_skips_missing_directories(tmp_path):
    assert find_unit_files(["*.service"], None, (str(tmp_path / "nope"),)) == {}


def test_crash_signs_tell_a_stable_unit_from_a_crash_loop():
    from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import crash_signs

    started = {"ActiveState": "active", "InvocationID": "i1", "MainPID": "10", "NRestarts": "0"}
    assert crash_signs(started, dict(started)) is None
    assert "restarted it on its own" in crash_signs(started, dict(started, InvocationID="i2", NRestarts="1"))
    assert "activating" in crash_signs(started, dict(started, ActiveState="activating", SubState="auto-restart"))
    assert "main process changed" in crash_signs(started, dict(started, MainPID="11"))


@pytest.mark.parametrize("text, seconds", [
    ("3s", 3), ("1min 30s", 90), ("500ms", 0.5), ("1h 2min 3.5s", 3723.5), ("250us", 0.00025),
    ("infinity", None), ("", None), (None, None), ("3 s", None), ("5sec", None),
])
def test_timespans_as_systemctl_show_prints_them(text, seconds):
    assert timespan_seconds(text) == seconds
