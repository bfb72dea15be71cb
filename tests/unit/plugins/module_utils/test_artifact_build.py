"""The artifact builder: target markers and tags, the failure that names a package without a wheel, reproducible
bytes, and an artifact that installs with no index. The tests that build a project run pip against the package index
(the controller reaches PyPI, as a CI that builds artifacts does); the others build their wheelhouses by hand."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils import artifact_build as ab

LEDGER = Path(__file__).resolve().parents[3] / "apps" / "ledger"
PIP = [sys.executable, "-m", "pip"]


def wheel(where: Path, name: str, version: str, requires=(), tag="py3-none-any", mtime=(2020, 1, 1, 0, 0, 0)):
    dist = name.replace("-", "_")
    path = where / f"{dist}-{version}-{tag}.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(zipfile.ZipInfo(f"{dist}/__init__.py", mtime), "")
        whl.writestr(zipfile.ZipInfo(f"{dist}-{version}.dist-info/METADATA", mtime), meta)
    return path


def test_the_inputs_are_checked_naming_the_option_and_the_fix():
    with pytest.raises(ab.BuildError, match=r"build_id='b 1': use 1-128 letters"):
        ab.check_inputs("shop", "b 1", ["3.11"], ["manylinux_2_36_x86_64"])
    with pytest.raises(ab.BuildError, match=r"python_versions=\['3'\]: name each Python"):
        ab.check_inputs("shop", "b1", ["3"], ["manylinux_2_36_x86_64"])
    with pytest.raises(ab.BuildError, match=r"platforms=\['x86_64'\]: name the hosts' platform as a wheel tag"):
        ab.check_inputs("shop", "b1", ["3.11"], ["x86_64"])
    with pytest.raises(ab.BuildError, match=r"app='Shop'"):
        ab.check_inputs("Shop", "b1", ["3.11"], ["manylinux_2_36_x86_64"])


def test_a_newer_glibc_takes_the_wheels_of_every_older_one_and_pure_ones():
    expanded = ab.expand_platforms(["manylinux_2_36_x86_64"])
    assert {"manylinux_2_36_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
            "linux_x86_64"} <= set(expanded)
    assert "manylinux_2_38_x86_64" not in expanded and not any("aarch64" in p for p in expanded)
    tags = {str(t) for t in ab.target_tags("3.11", ["manylinux_2_36_x86_64"])}
    assert {"cp311-cp311-manylinux_2_17_x86_64", "cp38-abi3-manylinux2014_x86_64", "py3-none-any"} <= tags
    assert "cp313-cp313-manylinux_2_17_x86_64" not in tags


def test_the_wheelhouse_is_walked_with_the_targets_markers_and_a_missing_requirement_is_named(tmp_path):
    wheel(tmp_path, "app", "1.0", ["lib>=2", 'backport; python_full_version < "3.11.3"', "extra-only; extra == 'x'",
                                   "fast[speed]"])
    wheel(tmp_path, "lib", "1.0")
    wheel(tmp_path, "lib", "2.1")
    wheel(tmp_path, "backport", "1.0")
    wheel(tmp_path, "fast", "3.0", ['turbo; extra == "speed"'])
    wheel(tmp_path, "turbo", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    house = ab.Wheelhouse(str(tmp_path))
    # Bookworm's Python (3.11.2 is below 3.11.3): the backport, and the binary wheel built for 3.11.
    needed, missing = ab.closure(house, "app==1.0", "3.11", "manylinux_2_36_x86_64", ["manylinux_2_36_x86_64"])
    assert (sorted(needed), missing) == (sorted([
        "app-1.0-py3-none-any.whl", "lib-2.1-py3-none-any.whl", "backport-1.0-py3-none-any.whl",
        "fast-3.0-py3-none-any.whl", "turbo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"]), [])
    # 3.13 needs no backport, and no wheel of turbo installs there: named, with the extra's requirement as written.
    needed, missing = ab.closure(house, "app==1.0", "3.13", "manylinux_2_36_x86_64", ["manylinux_2_36_x86_64"])
    assert "backport-1.0-py3-none-any.whl" not in needed and missing == ["turbo"]
    # Nor on an ARM host.
    assert ab.closure(house, "app==1.0", "3.11", "manylinux_2_36_aarch64", ["manylinux_2_36_aarch64"])[1] == ["turbo"]


def test_pips_no_match_becomes_a_failure_naming_the_package_the_python_and_what_to_do():
    out = ("ERROR: Could not find a version that satisfies the requirement pyyaml==6.0.1 (from versions: none)\n"
           "ERROR: No matching distribution found for pyyaml==6.0.1\n")
    text = str(ab.no_wheel(out, "3.13", ["manylinux_2_36_x86_64"]))
    assert text.startswith("No wheel of pyyaml==6.0.1 for Python 3.13 on manylinux_2_36_x86_64: the hosts install "
                           "offline from wheels only, so the build stops here, not the deploy.")
    assert "Pin a version that publishes a wheel" in text


def test_a_wheel_is_normalized_whatever_times_the_backend_wrote(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = wheel(tmp_path / "a", "app", "1.0", mtime=(2021, 5, 1, 1, 2, 4)).read_bytes()
    two = wheel(tmp_path / "b", "app", "1.0", mtime=(2024, 9, 9, 9, 9, 8)).read_bytes()
    assert one != two and ab.normalize_wheel(one) == ab.normalize_wheel(two)
    infos = zipfile.ZipFile(io.BytesIO(ab.normalize_wheel(one))).infolist()
    assert {i.date_time for i in infos} == {ab.FIXED_ZIP_TIME} and [i.filename for i in infos] == [
        "app/__init__.py", "app-1.0.dist-info/METADATA"]


def test_a_build_id_names_one_artifact(tmp_path):
    files = {"MANIFEST.json": (b"{}\n", 0o644), "bin/x": (b"#!/bin/sh\n", 0o755)}
    first = ab.write(str(tmp_path), "ledger", "b1", files)
    assert first["changed"] and Path(first["path"]).name == "ledger-b1.tar.gz"
    assert (tmp_path / "ledger-b1.tar.gz.sha256").read_text() == f"{first['sha256']}  ledger-b1.tar.gz\n"
    assert ab.write(str(tmp_path), "ledger", "b1", dict(reversed(files.items()))) == {**first, "changed": False}
    with tarfile.open(first["path"]) as tar:
        assert [(m.name, m.mode, m.mtime, m.uname) for m in tar.getmembers()] == [
            ("MANIFEST.json", 0o644, ab.EPOCH, "root"), ("bin/x", 0o755, ab.EPOCH, "root")]
    before = Path(first["path"]).read_bytes()
    with pytest.raises(ab.BuildError, match="A build ID names one artifact: give this build its own ID"):
        ab.write(str(tmp_path), "ledger", "b1", {"MANIFEST.json": (b"{\"other\": 1}\n", 0o644)})
    assert Path(first["path"]).read_bytes() == before and sorted(os.listdir(tmp_path)) == [
        "ledger-b1.tar.gz", "ledger-b1.tar.gz.sha256"]


def run(argv, env):
    done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def project(where: Path, dependencies: list[str]) -> Path:
    where.mkdir()
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=75"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "probe"\nversion = "1.0"\ndependencies = {json.dumps(dependencies)}\n')
    (where / "probe.py").write_text("")
    return where


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger")
    built = ab.build(str(LEDGER), "ledger", "2026.12.03-1", ["3.11", "3.13"], ["manylinux_2_36_x86_64"], run, PIP,
                     commit="abc", constraints=str(LEDGER / "requirements.lock"))
    return built, ab.write(str(out), "ledger", "2026.12.03-1", built["files"])


def test_the_ledger_app_builds_into_the_documented_format(ledger):
    built, done = ledger
    manifest = built["manifest"]
    assert (manifest["format"], manifest["app"], manifest["build_id"], manifest["commit"]) == (
        1, "ledger", "2026.12.03-1", "abc")
    assert manifest["install"] == ["ledger-app==2.3.0"] and manifest["commands"] == {
        name: f"bin/{name}" for name in ("ledger-post", "ledger-sweep", "ledger-sweeper", "ledger-sweeper-smoke")}
    with tarfile.open(done["path"]) as tar:
        names = tar.getnames()
        assert json.loads(tar.extractfile("MANIFEST.json").read()) == manifest
    assert names == sorted(names) and {"bin/ledger-post", "wheelhouse/ledger_app-2.3.0-py3-none-any.whl"} <= set(names)
    # The pins of the lock file, and bookworm's backport (its marker is false on the controller's 3.13).
    assert {"celery-5.7.0-py3-none-any.whl", "async_timeout-5.0.1-py3-none-any.whl"} <= set(manifest["wheels"])


def test_the_same_inputs_give_the_same_bytes(ledger, tmp_path):
    again = ab.build(str(LEDGER), "ledger", "2026.12.03-1", ["3.11", "3.13"], ["manylinux_2_36_x86_64"], run, PIP,
                     commit="abc", constraints=str(LEDGER / "requirements.lock"))
    assert ab.write(str(tmp_path), "ledger", "2026.12.03-1", again["files"])["sha256"] == ledger[1]["sha256"]


def test_the_artifact_installs_with_no_index(ledger, tmp_path):
    with tarfile.open(ledger[1]["path"]) as tar:
        tar.extractall(tmp_path / "release", filter="data")
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    # No index and no configuration that could name one, as on a host.
    env = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_CONSTRAINT": ""}
    rc, out, err = run([python, "-m", "pip", "install", "--quiet", "--only-binary=:all:", "--find-links",
                        str(tmp_path / "release" / "wheelhouse"), *ledger[0]["manifest"]["install"]], env)
    assert rc == 0, out + err
    rc, out, err = run([python, "-c", "from ledger.worker import app; print(app.conf.task_default_queue)"], {})
    assert (rc, out.strip()) == (0, "ledger.entries"), err
    assert os.access(tmp_path / "venv" / "bin" / "ledger-post", os.X_OK)


def test_a_dependency_without_a_wheel_for_a_target_python_fails_the_build_naming_it(tmp_path):
    # PyYAML 6.0.1 published binary wheels up to CPython 3.12: Python 3.11 hosts are served, 3.13 ones are not.
    probe = project(tmp_path / "probe", ["pyyaml==6.0.1"])
    with pytest.raises(ab.BuildError) as failed:
        ab.build(str(probe), "probe", "b1", ["3.11", "3.13"], ["manylinux_2_36_x86_64"], run, PIP)
    assert str(failed.value).startswith("No wheel of pyyaml==6.0.1 for Python 3.13 on manylinux_2_36_x86_64"), failed
    # 6.0.2 has them: one binary wheel per target Python, for the target platform (not the controller's Python).
    fixed = ab.build(str(project(tmp_path / "fixed", ["pyyaml==6.0.2"])), "probe", "b1", ["3.11", "3.13"],
                     ["manylinux_2_36_x86_64"], run, PIP)
    yaml = sorted(w for w in fixed["manifest"]["wheels"] if w.lower().startswith("pyyaml"))
    assert [w.split("-")[2:4] for w in yaml] == [["cp311", "cp311"], ["cp313", "cp313"]], yaml
    assert all("manylinux" in w for w in yaml), yaml
