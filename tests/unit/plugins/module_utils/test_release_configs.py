"""Release configs on a host: written once beside the live one, switched with the build, gone back to exactly."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.release_configs import (
    ConfigError,
    ConfigLayout,
    activate,
    adopt,
    annotate,
    choose_generation,
    generations,
    generations_named,
    migrations_since,
    parse_name,
    prune,
    records,
    release_name,
    resolve,
    secrets_digest,
    stage,
    write_generation,
)
from ansible_collections.sturdy.workers.plugins.module_utils.releases import Layout

UNIT = "[Service]\nEnvironmentFile=/etc/shop/secrets/{gen}/shop.env\nExecStart=/srv/shop/releases/{build}/bin/w\n"


@pytest.fixture
def where(tmp_path):
    layout = ConfigLayout("shop", str(tmp_path / "etc"))
    code = Layout(str(tmp_path / "srv"))
    for build in ("b1", "b2", "b3"):
        os.makedirs(code.release(build))
    return layout, code, tmp_path / "units"


def units(build, gen=1, workers=2):
    return {"shop-worker@.service": UNIT.format(gen=gen, build=build), "shop.target": f"[Unit]\n# {workers}\n"}


def config(queues=("default",), instances=2, gen=1):
    return {"declared": [{"name": "worker", "queues": list(queues), "instances": instances}],
            "singleton_host": "app1", "secrets": {"delivery": "env_file", "names": ["BROKER_URL"], "generation": gen}}


def make(layout, name, build, gen=1, **kw):
    os.makedirs(layout.generation(gen), exist_ok=True)
    got, created = stage(layout, name, build, units(build, gen), config(gen=gen, **kw), {"run": name}, False)
    return got


def writer(unit_dir):
    def write(wanted):
        os.makedirs(unit_dir, exist_ok=True)
        written = []
        for name, text in wanted.items():
            path = unit_dir / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                written.append(name)
        return written
    return write


def test_names_are_the_build_then_a_serial_for_each_further_config():
    assert release_name("2026.12.03-1", 1) == "2026.12.03-1"
    assert release_name("2026.12.03-1", 3) == "2026.12.03-1~3"
    assert parse_name("2026.12.03-1~3") == ("2026.12.03-1", 3)
    assert parse_name("b+1.x") == ("b+1.x", 1)
    with pytest.raises(ConfigError, match="not a release name"):
        parse_name("b~0")


def test_a_config_is_installed_once_and_the_same_config_of_a_build_is_reused(where):
    layout, dummy, dummy = where
    assert make(layout, "b1", "b1") == "b1"
    rec = json.loads(open(f"{layout.release('b1')}/RELEASE.json").read())
    assert (rec["build_id"], rec["serial"], rec["units"]) == ("b1", 1, ["shop-worker@.service", "shop.target"])
    assert rec["declared"][0]["queues"] == ["default"] and rec["secrets"]["generation"] == 1
    assert open(f"{layout.release('b1')}/units/shop-worker@.service").read() == units("b1")["shop-worker@.service"]
    # The same units and declaration: the release there is reused, whatever name was proposed.
    assert stage(layout, "b1~2", "b1", units("b1"), config(), {}, False) == ("b1", False)
    # Another declaration of the same build is a release of its own.
    assert make(layout, "b1~2", "b1", queues=("orders",)) == "b1~2"
    # A name taken here by another config (the live state recorded just before, say): the build's next serial.
    assert stage(layout, "b1~2", "b1", units("b1"), config(instances=3), {}, False) == ("b1~3", True)
    assert [r["name"] for r in records(layout)] == ["b1", "b1~2", "b1~3"]


def test_a_generation_of_secrets_is_written_once_and_reused_for_the_same_values(where):
    layout, dummy, dummy = where
    digest = secrets_digest("env_file", {"BROKER_URL": "redis://:a@h/0"})
    assert choose_generation(layout, digest) == (1, True)
    assert write_generation(layout, 1, [("shop.env", b'BROKER_URL="redis://:a@h/0"\n', 0, 0o640)], digest, False)
    assert os.stat(f"{layout.generation(1)}/shop.env").st_mode & 0o777 == 0o640
    assert os.stat(f"{layout.generation(1)}/.sha256").st_mode & 0o777 == 0o600
    assert choose_generation(layout, digest) == (1, False)
    # Written once: what a deploy asks of it again is what it holds, so nothing changes.
    assert not write_generation(layout, 1, [("shop.env", b'BROKER_URL="redis://:a@h/0"\n', 0, 0o640)], digest, False)
    # A file of it changed by hand (made world-readable, edited) is given its content and mode again.
    os.chmod(f"{layout.generation(1)}/shop.env", 0o644)
    assert write_generation(layout, 1, [("shop.env", b'BROKER_URL="redis://:a@h/0"\n', 0, 0o640)], digest, False)
    assert os.stat(f"{layout.generation(1)}/shop.env").st_mode & 0o777 == 0o640
    assert open(f"{layout.generation(1)}/shop.env", "rb").read() == b'BROKER_URL="redis://:a@h/0"\n'
    rotated = secrets_digest("env_file", {"BROKER_URL": "redis://:b@h/0"})
    assert choose_generation(layout, rotated) == (2, True)
    # One an interrupted deploy left (no digest yet) is written again, and never reused meanwhile.
    os.makedirs(layout.generation(2))
    assert choose_generation(layout, rotated) == (3, True)
    assert write_generation(layout, 2, [("credentials/BROKER_URL", b"x", 0, 0o600)], rotated, False)
    assert os.stat(f"{layout.generation(2)}/credentials").st_mode & 0o777 == 0o700
    assert generations(layout) == {1: digest, 2: rotated}
    # The digest is of the values and their delivery, never a value itself.
    assert "redis" not in open(f"{layout.generation(1)}/.sha256").read()
    assert secrets_digest("credentials", {"BROKER_URL": "redis://:a@h/0"}) != digest


def test_activate_writes_the_units_and_switches_code_config_and_live_secrets_together(where):
    layout, code, unit_dir = where
    make(layout, "b1", "b1", gen=1)
    make(layout, "b2", "b2", gen=2)
    open(f"{layout.generation(2)}/shop.env", "w").write("X=2\n")
    first = activate(layout, "b1", code, None, writer(unit_dir), False)
    assert first["written"] == ["shop-worker@.service", "shop.target"] and first["from"] is None
    done = activate(layout, "b2", code, "b1", writer(unit_dir), False)
    assert done["written"] == ["shop-worker@.service"] and (done["from"], done["from_build"]) == ("b1", "b1")
    assert (unit_dir / "shop-worker@.service").read_text() == units("b2", 2)["shop-worker@.service"]
    assert os.readlink(code.current) == "releases/b2" and os.readlink(code.previous) == "releases/b1"
    assert (layout.link(layout.current), layout.link(layout.previous)) == ("b2", "b1")
    # The live secrets are links into the live release's generation; gen 1 holds no env file, so it had none.
    assert os.readlink(layout.live_env) == "secrets/2/shop.env"
    assert open(layout.live_env).read() == "X=2\n"
    # Back, clearing previous: code and config both.
    back = activate(layout, "b1", code, None, writer(unit_dir), False)
    assert back["written"] == ["shop-worker@.service"] and not os.path.lexists(layout.live_env)
    assert os.readlink(code.current) == "releases/b1" and not os.path.lexists(code.previous)
    assert layout.link(layout.previous) is None


def test_check_mode_switches_nothing(where):
    layout, code, unit_dir = where
    make(layout, "b1", "b1")
    done = activate(layout, "b1", code, None, list, True)
    assert done["changed"] and not os.path.lexists(code.current) and layout.link(layout.current) is None


def test_the_first_switch_turns_legacy_secret_files_into_links(where):
    layout, code, unit_dir = where
    os.makedirs(layout.live_credentials)
    open(f"{layout.live_credentials}/OLD", "w").write("old")
    make(layout, "b1", "b1", gen=3)
    os.makedirs(f"{layout.generation(3)}/credentials")
    open(f"{layout.generation(3)}/credentials/NEW", "w").write("new")
    activate(layout, "b1", code, None, writer(unit_dir), False)
    assert os.readlink(layout.live_credentials) == "secrets/3/credentials"
    assert os.listdir(layout.live_credentials) == ["NEW"]
    assert not os.path.lexists(f"{layout.live_credentials}.sturdy-old")


def test_rollback_resolves_the_previous_release_a_build_or_a_name_and_names_the_kept_ones(where):
    layout, code, unit_dir = where
    for name, build in (("b1", "b1"), ("b2", "b2"), ("b2~2", "b2")):
        make(layout, name, build, queues=(name,))
    with pytest.raises(ConfigError) as err:
        resolve(layout, "")
    assert "no previous release" in str(err.value) and "b2~2, b2, b1" in str(err.value)
    assert "sturdy_rollback_to" in str(err.value)
    activate(layout, "b2~2", code, "b1", writer(unit_dir), False)
    assert resolve(layout, "")["name"] == "b1"
    # previous names one release, never the newest of its build.
    activate(layout, "b2~2", code, "b2", writer(unit_dir), False)
    assert resolve(layout, "")["name"] == "b2"
    annotate(layout, "b2~2", "activated", {"at": "2026-12-02"}, False)
    assert resolve(layout, "b2")["name"] == "b2~2"  # a build: its newest release that went live
    assert resolve(layout, "b2~2")["name"] == "b2~2"
    assert resolve(layout, "b2~1")["name"] == "b2"  # the first config of b2 alone
    # Live again since: the build names it.
    annotate(layout, "b2", "activated", {"at": "2026-12-03"}, False)
    assert resolve(layout, "b2")["name"] == "b2"
    annotate(layout, "b2~2", "activated", {"at": "2026-12-04"}, False)
    # A build names its newest release that went live, never one whose deploy was refused.
    make(layout, "b2~3", "b2", queues=("refused",))
    assert resolve(layout, "b2")["name"] == "b2~2"
    assert resolve(layout, "b2~3")["name"] == "b2~3"  # named exactly, it is gone to
    with pytest.raises(ConfigError, match="build b1 has no release here that went live"):
        resolve(layout, "b1")
    with pytest.raises(ConfigError) as err:
        resolve(layout, "b0")
    assert "release b0 is not kept here" in str(err.value) and "b2~2, b2, b1" in str(err.value)


def test_prune_keeps_the_newest_the_live_previous_and_used_ones_and_drops_unused_generations(where):
    layout, code, unit_dir = where
    for n, (name, build) in enumerate((("b1", "b1"), ("b2", "b2"), ("b2~2", "b2"), ("b3", "b3"), ("b1~2", "b1")),
                                      start=1):
        make(layout, name, build, gen=n)
        if name != "b1~2":
            annotate(layout, name, "activated", {"at": f"2026-12-0{n}"}, False)
    # b2~2 was left by a rollback once, and went live again since: a release that ran.
    annotate(layout, "b2~2", "abandoned", {"at": "2026-12-02x"}, False)
    os.makedirs(layout.generation(9))
    # b1: beyond keep=2 but protected (previous); b2: beyond keep=2; b3's build is gone; b1~2 never went live (a
    # refused deploy) and goes first.
    removed = prune(layout, 2, {"b1"}, {"b1", "b2"}, {9}, False)
    assert removed == ["b1~2", "b2", "b3", "secrets/2", "secrets/4", "secrets/5"]
    assert [r["name"] for r in records(layout)] == ["b1", "b2~2"]
    # Generation 9 is named by a unit file on the host (a host not switched yet): kept.
    assert sorted(os.listdir(layout.secrets)) == ["1", "3", "9"]


def test_generations_named_by_unit_files():
    assert generations_named([UNIT.format(gen=4, build="b"), "LoadCredential=A:/etc/shop/secrets/7/credentials/A\n",
                              "EnvironmentFile=/etc/other/secrets/8/x\n"], "/etc/shop") == {4, 7}


def test_migrations_since_the_release_gone_back_to_was_live(where):
    layout, code, unit_dir = where
    make(layout, "b1", "b1")
    make(layout, "b2", "b2")
    annotate(layout, "b1", "activated", {"at": "2026-12-01T00:00:00Z"}, False)
    annotate(layout, "b1", "migrations", {"command": ["m"], "host": "a", "at": "2026-11-30T00:00:00Z"}, False)
    annotate(layout, "b2", "migrations", {"command": ["bin/m"], "host": "a", "at": "2026-12-02T00:00:00Z"}, False)
    # The same entry twice is recorded once.
    assert not annotate(layout, "b2", "migrations", {"command": ["bin/m"], "host": "a", "at": "2026-12-02T00:00:00Z"},
                        False)
    ran = migrations_since(layout, resolve(layout, "b1"))
    assert ran == [{"release": "b2", "command": ["bin/m"], "host": "a", "at": "2026-12-02T00:00:00Z"}]


def test_a_host_deployed_before_release_configs_has_its_live_state_adopted(where):
    layout, code, unit_dir = where
    os.makedirs(layout.base, exist_ok=True)
    open(layout.live_env, "w").write('BROKER_URL="old"\n')
    os.chmod(layout.live_env, 0o640)
    live_units = {"shop-worker@.service": "EnvironmentFile=/etc/shop/shop.env\n", "shop.target": "[Unit]\n"}
    # The deploy wrote the new release's generation 1 first: the copy takes the next number.
    write_generation(layout, 1, [("shop.env", b'BROKER_URL="new"\n', 0, 0o640)], "d", False)
    name = adopt(layout, "b1", live_units, config(), {"run": "r"}, False)
    assert name == "b1"
    rec = records(layout)[0]
    assert rec["adopted"] and rec["activated"] and rec["secrets"]["generation"] == 2
    assert layout.link(layout.current) == "b1"
    # A copy: the live file is untouched until the first switch.
    assert open(f"{layout.generation(2)}/shop.env").read() == 'BROKER_URL="old"\n'
    assert open(f"{layout.generation(1)}/shop.env").read() == 'BROKER_URL="new"\n'
    assert os.stat(f"{layout.generation(2)}/shop.env").st_mode & 0o777 == 0o640
    assert not os.path.islink(layout.live_env)
    # Once a config is live, there is nothing to adopt.
    assert adopt(layout, "b1", live_units, config(), {}, False) is None


def test_a_release_a_rollback_left_goes_before_those_that_ran(where):
    layout, code, unit_dir = where
    for n, name in enumerate(("b1", "b2", "b3"), start=1):
        make(layout, name, name, gen=n)
        annotate(layout, name, "activated", {"at": f"2026-12-0{n}"}, False)
    annotate(layout, "b3", "abandoned", {"at": "2026-12-04"}, False)
    assert prune(layout, 2, set(), None, set(), False) == ["b3", "secrets/3"]
    assert [r["name"] for r in records(layout)] == ["b1", "b2"]


def test_an_encrypted_credential_is_not_encrypted_again_only_its_mode_is_given_back(where):
    layout, dummy, dummy = where
    write_generation(layout, 1, [("credentials/KEY.cred", b"Wh...blob", 0, 0o600)], "d", False)
    path = f"{layout.generation(1)}/credentials/KEY.cred"
    os.chmod(path, 0o644)
    assert write_generation(layout, 1, [("credentials/KEY.cred", None, 0, 0o600)], "d", False)
    assert os.stat(path).st_mode & 0o777 == 0o600 and open(path, "rb").read() == b"Wh...blob"
    assert not write_generation(layout, 1, [("credentials/KEY.cred", None, 0, 0o600)], "d", False)
