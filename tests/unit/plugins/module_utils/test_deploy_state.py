from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils import deploy_state as ds

BUILD = "2026.11.29-2"
RELEASES = "/srv/shop/releases"
RELEASE = f"{RELEASES}/{BUILD}"
UNITS = ["shop-worker@1.service", "shop-worker@2.service"]
ACTIVE = {u: {"ActiveState": "active", "NeedDaemonReload": "no", "Outdated": False, "Cwd": RELEASE} for u in UNITS}


def test_the_fingerprint_follows_what_the_deploy_writes_and_ignores_what_only_steers_the_run():
    base = {"sturdy_app": "shop", "sturdy_secrets": {"BROKER_URL": "redis://a"}, "sturdy_processes": [{"name": "w"}],
            "sturdy_deploy_broker": {"host": "b", "port": 6379}, "ansible_host": "x"}
    same = ds.fingerprint(base, "code")
    # A secret value, a process, the broker the hosts must reach, the collection's code: another fingerprint.
    for changed in ({**base, "sturdy_secrets": {"BROKER_URL": "redis://b"}},
                    {**base, "sturdy_processes": [{"name": "w", "instances": 3}]},
                    {**base, "sturdy_deploy_broker": {"host": "c", "port": 6379}},
                    {**base, "sturdy_worker_stop_timeout": 900}):
        assert ds.fingerprint(changed, "code") != same
    assert ds.fingerprint(base, "other code") != same
    # How the run is steered, where the artifact lies, facts of an earlier play, other variables: the same.
    for steering in ({"sturdy_deploy_serial": [1, "50%"], "sturdy_deploy_force": True, "sturdy_deploy_break_lock": True},
                     {"sturdy_artifact": "/elsewhere/shop.tar.gz", "sturdy_smoke_test_timeout": 90},
                     {"sturdy_release_switch": {"changed": True}, "sturdy_worker_lease": {"run_id": "r"}},
                     {"ansible_port": 22}):
        assert ds.fingerprint({**base, **steering}, "code") == same
    assert len(same) == 64 and "redis" not in same


def test_code_digest_follows_every_file_of_the_roles_plugins_and_playbooks(tmp_path):
    (tmp_path / "roles" / "worker" / "templates").mkdir(parents=True)
    unit = tmp_path / "roles" / "worker" / "templates" / "unit.j2"
    unit.write_text("[Service]\n")
    (tmp_path / "docs").mkdir()
    first = ds.code_digest(str(tmp_path))
    (tmp_path / "docs" / "notes.md").write_text("not code")
    assert ds.code_digest(str(tmp_path)) == first
    unit.write_text("[Service]\nKillMode=mixed\n")
    assert ds.code_digest(str(tmp_path)) != first


def test_file_digests_walk_directories_and_see_content_mode_and_links(tmp_path):
    units = tmp_path / "units"
    (units / "shop-worker@.service.d").mkdir(parents=True)
    (units / "shop-worker@.service").write_text("unit\n")
    (units / "shop-worker@.service.d" / "10-x.conf").write_text("[Service]\n")
    (units / "other.service").write_text("not ours\n")
    secrets = tmp_path / "etc-shop"
    secrets.mkdir()
    (secrets / "shop.env").write_text('A="1"\n')
    os.chmod(secrets / "shop.env", 0o600)
    patterns = [str(units / "shop-*"), str(secrets), str(tmp_path / "absent*")]
    found = ds.file_digests(patterns)
    assert sorted(os.path.relpath(p, tmp_path) for p in found) == [
        "etc-shop/shop.env", "units/shop-worker@.service", "units/shop-worker@.service.d/10-x.conf"]
    os.chmod(secrets / "shop.env", 0o644)
    assert ds.file_digests(patterns)[str(secrets / "shop.env")] != found[str(secrets / "shop.env")]


def test_nothing_differs_only_when_build_link_fingerprint_files_and_instances_are_as_recorded():
    files = {"/etc/systemd/system/shop-worker@.service": "100644 0:0 aa"}
    rec = ds.record(BUILD, "fp", files)

    def why(**over):
        args = {"found": rec, "build_id": BUILD, "print_": "fp", "digests": dict(files), "current": BUILD,
                "declared": UNITS, "units": ACTIVE, "release": RELEASE, "releases": RELEASES, **over}
        return ds.differs(**args)

    assert why() == ""
    assert why(found=None) == "no successful deploy is recorded here"
    assert why(found={**rec, "version": 0}).startswith("the record of the last deploy is from another version")
    assert why(build_id="2026.11.29-3") == f"the last successful deploy here was build {BUILD}"
    assert why(current="2026.11.29-1") == "current names 2026.11.29-1"
    assert why(current=None) == "current names no release"
    assert why(print_="other") == "the variables, secrets or the collection changed since the last deploy"
    assert why(digests={}) == "/etc/systemd/system/shop-worker@.service is gone since the last deploy"
    assert why(digests={**files, "/etc/systemd/system/shop-worker@.service.d/x.conf": "1", "/etc/shop/a": "2"}) == (
        "/etc/shop/a appeared since the last deploy (and 1 other file(s))")
    assert why(digests={"/etc/systemd/system/shop-worker@.service": "100644 0:0 bb"}) == (
        "/etc/systemd/system/shop-worker@.service changed since the last deploy")
    stopped = {**ACTIVE, UNITS[1]: {**ACTIVE[UNITS[1]], "ActiveState": "failed"}}
    assert why(units=stopped) == "shop-worker@2.service is failed"
    assert why(units={UNITS[0]: ACTIVE[UNITS[0]]}) == "shop-worker@2.service is not loaded"
    outdated = {**ACTIVE, UNITS[0]: {**ACTIVE[UNITS[0]], "Outdated": True}}
    assert why(units=outdated) == "shop-worker@1.service runs an older definition than its unit files"
    reload = {**ACTIVE, UNITS[0]: {**ACTIVE[UNITS[0]], "NeedDaemonReload": "yes"}}
    assert why(units=reload) == "shop-worker@1.service runs an older definition than its unit files"
    old = {**ACTIVE, UNITS[0]: {**ACTIVE[UNITS[0]], "Cwd": f"{RELEASES}/2026.11.29-1"}}
    assert why(units=old) == f"shop-worker@1.service runs from {RELEASES}/2026.11.29-1"
    # A singleton placed on another host must not run here.
    beat = "shop-beat@1.service"
    assert why(elsewhere=[beat], units={**ACTIVE, beat: {"ActiveState": "inactive"}}) == ""
    assert why(elsewhere=[beat], units={**ACTIVE, beat: {"ActiveState": "active"}}) == (
        "shop-beat@1.service runs here, but its singleton process type belongs to another host")
    # A working directory outside the releases (an absolute command elsewhere) says nothing about the build.
    assert why(units={**ACTIVE, UNITS[0]: {**ACTIVE[UNITS[0]], "Cwd": "/"}}) == ""


def test_records_are_written_atomically_with_their_mode_and_unchanged_ones_are_left(tmp_path):
    path = str(tmp_path / ".deployed.json")
    assert ds.write_json(path, {"a": 1}, 0o600) is True
    assert (os.stat(path).st_mode & 0o777) == 0o600 and json.loads(open(path).read()) == {"a": 1}
    assert ds.write_json(path, {"a": 1}, 0o600) is False
    assert ds.write_json(path, {"a": 2}, 0o600) is True
    assert ds.read_record(path) == {"a": 2}
    assert ds.read_record(str(tmp_path / "absent")) is None
    (tmp_path / "broken").write_text("{")
    assert ds.read_record(str(tmp_path / "broken")) is None
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


@pytest.mark.parametrize("name", ["sturdy_deploy_broker", "sturdy_deploy_rabbitmq"])
def test_the_broker_declarations_are_fingerprinted(name):
    assert name in ds.fingerprinted({name: {}})
