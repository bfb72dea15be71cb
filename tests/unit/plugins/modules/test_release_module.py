from __future__ import annotations

import os

from ansible_collections.sturdy.workers.plugins.modules import release


def installed_release(root, build="b1", files=("bin/app",)):
    path = root / "releases" / build
    (path / "bin").mkdir(parents=True)
    os.chmod(root, 0o755)  # as the module leaves it (pytest makes it 0700)
    (path / "RELEASE.json").write_text('{"build_id": "%s", "checksum": "%s", "installed_at": "1"}' % (build, "0" * 64))
    for name in files:
        (path / name).write_text("#!/bin/sh\n")
        os.chmod(path / name, 0o755)
    return path


def test_switch_points_current_and_previous(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    installed_release(tmp_path, "b2")
    run_module(release, {"root": str(tmp_path), "state": "current", "build_id": "b1"})
    result, dummy = run_module(release, {"root": str(tmp_path), "state": "current", "build_id": "b2"})
    assert result["changed"] and (result["current"], result["previous"]) == ("b2", "b1")
    assert os.readlink(tmp_path / "current") == "releases/b2"


def test_check_mode_switches_nothing(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    result, dummy = run_module(release, {"root": str(tmp_path), "state": "current", "build_id": "b1",
                                         "_ansible_check_mode": True})
    assert result["changed"] and not (tmp_path / "current").exists()


def test_a_declared_command_missing_from_the_release_fails_naming_it(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    os.chmod(tmp_path / "releases" / "b1" / "bin" / "app", 0o700)
    result, dummy = run_module(release, {
        "root": str(tmp_path), "build_id": "b1", "checksum": "0" * 64,
        "executables": {"bin/app": "sturdy_processes[web].command[0]=bin/app",
                        "venv/bin/celery": "sturdy_processes[worker].command[0]=venv/bin/celery"}})
    assert result["failed"]
    assert "sturdy_processes[worker].command[0]=venv/bin/celery is missing in" in result["msg"]
    assert "sturdy_processes[web].command[0]=bin/app is not executable by the app's user" in result["msg"]
    assert "Nothing running was changed" in result["msg"]


def test_rollback_without_previous_is_refused_with_what_to_do(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    run_module(release, {"root": str(tmp_path), "state": "current", "build_id": "b1"})
    result, dummy = run_module(release, {"root": str(tmp_path), "state": "rolled_back"})
    assert result["failed"] and "does not name a release to go back to" in result["msg"]


def test_the_slot_check_names_the_packages_dpkg_does_not_list_as_installed(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    args = {"root": str(tmp_path), "build_id": "b1", "checksum": "0" * 64, "_ansible_check_mode": True,
            "packages": ["python3-venv", "python3-dev", "libpq5"]}
    listed = (1, "python3-venv installed\nlibpq5 config-files\n", "dpkg-query: no packages found matching python3-dev\n")
    result, calls = run_module(release, args, [(["/usr/bin/dpkg-query", "--show"], listed)], bin_path="/usr/bin/dpkg-query")
    assert result["missing_packages"] == ["python3-dev", "libpq5"] and not result["changed"]
    assert calls == [["/usr/bin/dpkg-query", "--show", "--showformat=${Package} ${db:Status-Status}\n",
                      "python3-venv", "python3-dev", "libpq5"]]
    result, calls = run_module(release, {**args, "packages": []})
    assert "missing_packages" not in result and calls == []


def test_install_makes_the_app_directories_root_owned_0755_and_removes_the_uploaded_artifact(run_module, tmp_path):
    installed_release(tmp_path, "b1")
    os.chmod(tmp_path, 0o700)
    os.chmod(tmp_path / "releases", 0o775)
    artifact = tmp_path / ".incoming" / "shop-b1.tar.gz"
    artifact.parent.mkdir(mode=0o700)
    artifact.write_bytes(b"uploaded")
    args = {"root": str(tmp_path), "build_id": "b1", "checksum": "0" * 64, "artifact": str(artifact),
            "remove_artifact": True}
    # Check mode tells and changes nothing.
    result, dummy = run_module(release, args | {"_ansible_check_mode": True})
    assert result["changed"] and artifact.exists()
    assert oct(os.stat(tmp_path).st_mode & 0o777) == "0o700"
    result, dummy = run_module(release, args)
    assert result["changed"] and not artifact.exists()
    assert [oct(os.stat(d).st_mode & 0o777) for d in (tmp_path, tmp_path / "releases")] == ["0o755", "0o755"]
    assert (os.stat(tmp_path).st_uid, os.stat(tmp_path).st_gid) == (0, 0)
    # Now nothing differs.
    result, dummy = run_module(release, args)
    assert not result["changed"]


def test_the_agent_package_replaces_an_older_agent_in_every_kept_release_and_is_compiled(run_module, tmp_path):
    sites = []
    for build in ("b1", "b2"):
        site = installed_release(tmp_path, build) / "venv" / "lib" / "python3.13" / "site-packages"
        site.mkdir(parents=True)
        (site / "sturdy_agent.py").write_text("OLD = True\n")
        (site / "sturdy_agent.pth").write_text("import sturdy_agent\n")
        sites.append(site)
    args = {"root": str(tmp_path), "build_id": "b2", "checksum": "0" * 64,
            "agent": {"__init__.py": "def activate():\n    pass\n", "core.py": "X = 1\n"}}
    result, calls = run_module(release, args | {"_ansible_check_mode": True})
    assert result["changed"] and result["agent_updated"] and calls == []
    assert (sites[0] / "sturdy_agent.py").exists() and not (sites[0] / "sturdy_agent").exists()
    compile_ok = [([str(tmp_path / "releases" / b / "venv/bin/python"), "-m", "compileall"], (0, "", ""))
                  for b in ("b1", "b2")]
    result, calls = run_module(release, args, compile_ok)
    assert result["changed"] and result["agent_updated"]
    for site in sites:
        assert sorted(p.name for p in (site / "sturdy_agent").iterdir()) == ["__init__.py", "core.py"]
        assert not (site / "sturdy_agent.py").exists()
        assert (site / "sturdy_agent.pth").read_text() == "import sturdy_agent; sturdy_agent.activate()\n"
    assert [c[-1] for c in calls] == [str(site / "sturdy_agent") for site in sites]
    result, calls = run_module(release, args)
    assert not result["changed"] and not result["agent_updated"] and calls == []
