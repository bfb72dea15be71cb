"""The release_config module end to end on a scratch tree: install two releases of a build, switch, roll back, and
refuse a release that is not kept; systemd's commands answered at the host boundary."""

from __future__ import annotations

import datetime
import json
import os

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.release_configs import ConfigLayout
from ansible_collections.sturdy.workers.plugins.modules import release_config

OK = (0, "", "")
RESPONSES = [(["/usr/bin/systemctl", "systemd-analyze"], OK), (["/usr/bin/systemctl", "daemon-reload"], OK),
             (["/usr/bin/systemctl"], OK)]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(release_config, "ConfigLayout", lambda app: ConfigLayout(app, str(tmp_path / "etc")))
    for build in ("b1", "b2"):
        os.makedirs(tmp_path / "srv" / "releases" / build)
        (tmp_path / "srv" / "releases" / build / "RELEASE.json").write_text(json.dumps({"build_id": build}))
    return tmp_path


def args(tree, **more):
    return {"app": "shop", "root": str(tree / "srv"), "unit_dir": str(tree / "units"), **more}


def unit(gen, build="b1"):
    return {"shop-worker@.service": f"EnvironmentFile=/etc/shop/secrets/{gen}/shop.env\nExecStart=/srv/shop/releases/"
                                    f"{build}/bin/w\n"}


def present(run_module, tree, name, gen, token, **more):
    got, calls = run_module(release_config, args(
        tree, state="present", name=name, build_id=more.pop("build_id", "b1"), generation=gen, group="root",
        secrets={"BROKER_URL": token}, units=unit(gen, more.get("build", "b1")), config={"declared": [], **more}),
        RESPONSES)
    assert not got.get("failed"), got
    return got, calls


def test_install_switch_and_roll_back_with_the_secrets_of_each_release(run_module, tree):
    (tree / "units").mkdir()
    first, calls = present(run_module, tree, "b1", 1, "one")
    assert (first["name"], first["created"]) == ("b1", True)
    # Each unit file is checked before the release is installed; nothing is written where systemd reads yet.
    assert any(c[:3] == ["/usr/bin/systemctl", "verify", "--recursive-errors=no"] for c in calls), calls
    assert not os.listdir(tree / "units")
    assert (tree / "etc" / "secrets" / "1" / "shop.env").read_text().endswith('BROKER_URL="one"\n')
    got, calls = run_module(release_config, args(tree, state="current", name="b1"), RESPONSES)
    assert got["written"] == ["shop-worker@.service"] and ["/usr/bin/systemctl", "daemon-reload"] in calls
    # When it went live: a process started before ran the units live before.
    assert got["at"] >= os.stat(tree / "units" / "shop-worker@.service").st_mtime
    b1_live = json.loads((tree / "etc" / "releases" / "b1" / "RELEASE.json").read_text())["activated"][-1]["at"]
    # The same build with a rotated secret: a release of its own, installed beside the live one.
    query, dummy = run_module(release_config, args(tree, secrets={"BROKER_URL": "two"}), RESPONSES)
    assert query["generation"] == {"number": 2, "new": True} and query["current"] == "b1"
    second, dummy = present(run_module, tree, "b1~2", 2, "two", rotated=True)
    assert second["name"] == "b1~2" and (tree / "units" / "shop-worker@.service").read_text() == unit(1)[
        "shop-worker@.service"]
    got, dummy = run_module(release_config, args(tree, state="current", name="b1~2"), RESPONSES)
    assert (got["current"], got["previous"], got["from"]) == ("b1~2", "b1", "b1")
    assert os.readlink(tree / "etc" / "shop.env") == "secrets/2/shop.env"
    # Back to the previous release: its units and its secrets.
    got, dummy = run_module(release_config, args(tree, state="rolled_back"), RESPONSES)
    assert (got["name"], got["current"], got["previous"], got["written"]) == ("b1", "b1", None,
                                                                              ["shop-worker@.service"])
    assert os.readlink(tree / "etc" / "shop.env") == "secrets/1/shop.env"
    assert got["target"]["declared"] == [] and got["migrations"] == []
    # Since when b1 was live before (an instance started between then and the switch away runs b1), and the time
    # of this rollback on both clocks.
    went = datetime.datetime.strptime(b1_live, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    assert got["live_since"] == pytest.approx(went.timestamp(), abs=1e-3)
    assert got["at"] > went.timestamp() and got["at_monotonic"] > 0
    # Nothing is recorded as previous now: a second plain rollback is refused, naming what is kept.
    got, dummy = run_module(release_config, args(tree, resolve=True), RESPONSES)
    assert got["failed"] and "no previous release is recorded here" in got["msg"] and "b1~2, b1" in got["msg"]


def test_a_secret_value_never_appears_in_the_result(run_module, tree):
    got, dummy = present(run_module, tree, "b1", 1, "s3cret-value")
    assert "s3cret-value" not in json.dumps(got)
    got, dummy = run_module(release_config, args(tree, secrets={"BROKER_URL": "s3cret-value"}), RESPONSES)
    assert "s3cret-value" not in json.dumps(got) and got["generation"] == {"number": 1, "new": False}
