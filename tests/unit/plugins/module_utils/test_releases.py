from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.releases import (
    FIND_PIP_WHEEL,
    PARTIAL_MARKER,
    Layout,
    ReleaseError,
    build_venv,
    check_slot,
    in_use,
    install,
    installed,
    prune_plan,
    release_state,
    replace_link,
    unpack,
)


def make_artifact(path, build_id="b1", extra=(), manifest=None):
    manifest = manifest if manifest is not None else {"build_id": build_id, "install": ["app==1.0"], "commit": "c0ffee"}
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind in [("MANIFEST.json", json.dumps(manifest).encode(), tarfile.REGTYPE),
                                 ("bin/app", b"#!/bin/sh\n", tarfile.REGTYPE), *extra]:
            entry = tarfile.TarInfo(name)
            entry.type = kind
            entry.mode = 0o777 if name.startswith("bin/") else 0o666
            if kind == tarfile.SYMTYPE:
                entry.linkname = data.decode()
                tar.addfile(entry)
            else:
                entry.size = len(data)
                tar.addfile(entry, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ok_runner(calls):
    def run(argv, env):
        calls.append((argv, env))
        return 0, "", ""
    return run


def test_install_writes_release_json_last_and_builds_the_venv_offline(tmp_path):
    layout = Layout(str(tmp_path / "srv"))
    artifact = tmp_path / "a.tar.gz"
    checksum = make_artifact(artifact)
    calls = []
    info = install(layout, "b1", str(artifact), checksum, "", "/usr/bin/python3", ok_runner(calls))
    release = tmp_path / "srv" / "releases" / "b1"
    assert json.loads((release / "RELEASE.json").read_text()) == info
    assert info["checksum"] == checksum and info["commit"] == "c0ffee"
    assert not (release / PARTIAL_MARKER).exists()
    assert oct((release / "bin" / "app").stat().st_mode & 0o777) == "0o755"
    assert oct((release / "MANIFEST.json").stat().st_mode & 0o777) == "0o644"
    pip = calls[-1][0]
    assert pip[-3:] == ["--find-links", str(release / "wheelhouse"), "app==1.0"]
    assert "--no-index" in pip and "--only-binary=:all:" in pip
    assert calls[-1][1]["PIP_NO_INDEX"] == "1" and calls[-1][1]["PIP_CONFIG_FILE"] == os.devnull
    assert release_state(layout, "b1") == "installed"


@pytest.mark.parametrize("wheel", ["/usr/share/python-wheels/pip-23.0.1-py3-none-any.whl", ""])
def test_the_venv_gets_no_pip_when_the_interpreter_has_a_pip_wheel_to_run(tmp_path, wheel):
    # The interpreter is asked for its ensurepip wheel; pip runs from it, and none is copied into the venv. An
    # interpreter without one (nothing printed) gets ensurepip's venv and its pip, as before.
    calls = []

    def run(argv, env):
        calls.append(argv)
        return 0, (wheel + "\n" if argv[1] == "-c" else ""), ""

    build_venv(str(tmp_path / "r"), "/usr/bin/python3", ["app==1.0"], run)
    find, venv, pip = calls
    assert find[:2] == ["/usr/bin/python3", "-c"] and "python-wheels" in find[2] and "_bundled" in find[2]
    if wheel:
        assert venv == ["/usr/bin/python3", "-m", "venv", "--without-pip", str(tmp_path / "r" / "venv")]
        assert pip[:3] == [str(tmp_path / "r" / "venv" / "bin" / "python"), f"{wheel}/pip", "install"]
    else:
        assert venv == ["/usr/bin/python3", "-m", "venv", str(tmp_path / "r" / "venv")]
        assert pip[1:4] == ["-m", "pip", "install"]


def test_the_pip_wheel_finder_names_a_wheel_this_python_has():
    # The finder itself, run by this Python (pyenv's, with ensurepip/_bundled): a pip wheel that exists.
    found = subprocess.run([sys.executable, "-c", FIND_PIP_WHEEL], capture_output=True, text=True, check=True)
    assert re.search(r"/pip-[0-9.]+-py3-none-any\.whl$", found.stdout.strip()), found.stdout
    assert pathlib.Path(found.stdout.strip()).is_file()


def test_a_failed_venv_leaves_the_partial_marker_and_shows_pip_output(tmp_path):
    layout = Layout(str(tmp_path / "srv"))
    artifact = tmp_path / "a.tar.gz"
    checksum = make_artifact(artifact)
    calls = []

    def failing(argv, env):
        calls.append(argv)
        return (0, "", "") if len(calls) < 3 else (1, "", "ERROR: No matching distribution found for app==1.0\n")

    with pytest.raises(ReleaseError, match="No matching distribution found for app==1.0"):
        install(layout, "b1", str(artifact), checksum, "", "/usr/bin/python3", failing)
    assert release_state(layout, "b1") == "partial"
    assert not (tmp_path / "srv" / "releases" / "b1" / "RELEASE.json").exists()


def test_install_refuses_a_damaged_copy_before_writing_anything(tmp_path):
    layout = Layout(str(tmp_path / "srv"))
    artifact = tmp_path / "a.tar.gz"
    make_artifact(artifact)
    with pytest.raises(ReleaseError, match="damaged"):
        install(layout, "b1", str(artifact), "0" * 64, "", "/usr/bin/python3", ok_runner([]))
    assert release_state(layout, "b1") == "absent"


@pytest.mark.parametrize("manifest, message", [
    ({"build_id": "other", "install": ["app"]}, "is build 'other', not sturdy_build_id='b1'"),
    ({"build_id": "b1"}, "needs 'install'"),
    ({"build_id": "b1", "install": ["app; rm -rf /"]}, "needs 'install'"),
])
def test_the_manifest_must_name_the_build_and_what_to_install(tmp_path, manifest, message):
    artifact = tmp_path / "a.tar.gz"
    checksum = make_artifact(artifact, manifest=manifest)
    with pytest.raises(ReleaseError, match=message):
        install(Layout(str(tmp_path / "srv")), "b1", str(artifact), checksum, "", "/usr/bin/python3", ok_runner([]))


@pytest.mark.parametrize("entry", [("../evil", b"x", tarfile.REGTYPE), ("bin/link", b"/etc/shadow", tarfile.SYMTYPE)])
def test_unpack_refuses_entries_outside_the_release_and_links(tmp_path, entry):
    artifact = tmp_path / "a.tar.gz"
    make_artifact(artifact, extra=[entry])
    with pytest.raises(ReleaseError, match="not a plain file or directory"):
        unpack(str(artifact), str(tmp_path / "dest"))
    assert not (tmp_path / "evil").exists()


def test_same_build_id_with_another_checksum_is_refused(tmp_path):
    layout = Layout(str(tmp_path))
    release = tmp_path / "releases" / "b1"
    release.mkdir(parents=True)
    (release / "RELEASE.json").write_text(json.dumps({"checksum": "aa"}))
    assert check_slot(layout, "b1", "aa") == "installed"
    with pytest.raises(ReleaseError, match="A build ID names one artifact forever"):
        check_slot(layout, "b1", "bb")


def test_a_directory_without_release_json_is_not_ours(tmp_path):
    (tmp_path / "releases" / "b1").mkdir(parents=True)
    (tmp_path / "releases" / "b1" / "app.py").write_text("")
    with pytest.raises(ReleaseError, match="not installed by sturdy.workers"):
        check_slot(Layout(str(tmp_path)), "b1", "aa")


def test_an_empty_release_directory_is_an_interrupted_install(tmp_path):
    (tmp_path / "releases" / "b1").mkdir(parents=True)
    assert release_state(Layout(str(tmp_path) + "/"), "b1") == "partial"


def test_unpack_accepts_names_that_merely_start_with_two_dots(tmp_path):
    artifact = tmp_path / "a.tar.gz"
    make_artifact(artifact, extra=[("..data/x", b"x", tarfile.REGTYPE)])
    unpack(str(artifact), str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "..data" / "x").read_bytes() == b"x"


def test_replace_link_switches_atomically_and_link_target_reads_the_build(tmp_path):
    layout = Layout(str(tmp_path))
    replace_link(layout.current, "releases/b1")
    replace_link(layout.current, "releases/b2")
    assert os.readlink(layout.current) == "releases/b2"
    assert layout.link_target(layout.current) == "b2"
    assert layout.link_target(layout.previous) is None
    assert [p.name for p in tmp_path.iterdir()] == ["current"]  # no temporary link left behind


def test_a_link_outside_the_releases_is_reported(tmp_path):
    os.symlink("/opt/somewhere", tmp_path / "current")
    with pytest.raises(ReleaseError, match="not a release under"):
        Layout(str(tmp_path)).link_target(str(tmp_path / "current"))


def test_prune_keeps_the_newest_and_every_protected_release():
    releases = [{"build_id": f"b{i}"} for i in range(1, 7)]  # oldest first
    assert prune_plan(releases, 2, set()) == ["b4", "b3", "b2", "b1"]
    assert prune_plan(releases, 2, {"b1", "b3"}) == ["b4", "b2"]
    assert prune_plan(releases, 10, set()) == []


def test_installed_orders_by_install_time_not_name(tmp_path):
    for build, when in [("b9", "2026-01-02"), ("b10", "2026-01-03"), ("a1", "2026-01-01")]:
        (tmp_path / "releases" / build).mkdir(parents=True)
        (tmp_path / "releases" / build / "RELEASE.json").write_text(json.dumps({"installed_at": when}))
    (tmp_path / "releases" / "b11").mkdir()
    (tmp_path / "releases" / "b11" / PARTIAL_MARKER).write_text("")
    assert [r["build_id"] for r in installed(Layout(str(tmp_path)))] == ["a1", "b9", "b10"]


def test_in_use_finds_a_process_running_inside_a_release(tmp_path):
    release = tmp_path / "releases" / "b1"
    release.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "30"], cwd=release)
    try:
        assert proc.pid in in_use(Layout(str(tmp_path)))[0]["b1"]
    finally:
        proc.kill()
        proc.wait()
    assert "b1" not in in_use(Layout(str(tmp_path)))[0]


def test_in_use_reports_processes_it_may_not_inspect(tmp_path):
    # Root without CAP_SYS_PTRACE gets EACCES on other users' /proc/<pid>/cwd; that cannot be set up here.
    links = {"41/cwd": "/", "41/exe": str(tmp_path / "releases" / "b1" / "venv" / "bin" / "x")}

    def readlink(path):
        key = "/".join(path.split("/")[-2:])
        if key.startswith("42/"):
            raise PermissionError(13, "Permission denied", path)
        if key not in links:
            raise FileNotFoundError(path)
        return links[key]

    for pid in ("41", "42", "43", "self"):
        (tmp_path / "proc" / pid).mkdir(parents=True)
    users, unreadable = in_use(Layout(str(tmp_path)), str(tmp_path / "proc"), readlink)
    assert users == {"b1": [41]}
    assert unreadable == [42]


def test_agent_changes_lists_only_missing_or_different_files(tmp_path):
    from ansible_collections.sturdy.workers.plugins.module_utils.files import replace_file
    from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_changes

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    package = site / "sturdy_agent"
    package.mkdir(parents=True)
    changes = agent_changes(str(tmp_path), {"__init__.py": "INIT", "core.py": "CORE\n"})
    assert changes == {str(package / "__init__.py"): "INIT\n", str(package / "core.py"): "CORE\n",
                       str(site / "sturdy_agent.pth"): "import sturdy_agent; sturdy_agent.activate()\n"}
    for path, content in changes.items():
        replace_file(path, content.encode("utf-8"))
    assert agent_changes(str(tmp_path), {"__init__.py": "INIT", "core.py": "CORE\n"}) == {}
    assert list(agent_changes(str(tmp_path), {"__init__.py": "INIT v2", "core.py": "CORE\n"})) == [
        str(package / "__init__.py")]


def test_agent_changes_remove_a_module_the_package_dropped_and_the_single_file_agent(tmp_path):
    from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_changes

    site = tmp_path / "venv" / "lib" / "python3.13" / "site-packages"
    (site / "sturdy_agent").mkdir(parents=True)
    # An older collection's agent: one module, and a .pth that imports it.
    (site / "sturdy_agent.py").write_text("OLD\n")
    (site / "sturdy_agent.pth").write_text("import sturdy_agent\n")
    (site / "sturdy_agent" / "gone.py").write_text("GONE\n")
    (site / "sturdy_agent" / "core.py").write_text("CORE\n")
    changes = agent_changes(str(tmp_path), {"core.py": "CORE\n", "__init__.py": "INIT\n", "rq_worker.py": "RQ\n"})
    assert changes == {str(site / "sturdy_agent.pth"): "import sturdy_agent; sturdy_agent.activate()\n",
                       str(site / "sturdy_agent" / "__init__.py"): "INIT\n",
                       str(site / "sturdy_agent" / "rq_worker.py"): "RQ\n",
                       str(site / "sturdy_agent" / "gone.py"): None, str(site / "sturdy_agent.py"): None}
    # Written in an order that leaves a starting interpreter a whole agent at every step: the modules, the .pth
    # (which the old single-file agent answers too), __init__.py (from then on the package is imported), removals.
    assert [pathlib.Path(p).name for p in changes] == ["rq_worker.py", "sturdy_agent.pth", "__init__.py", "gone.py",
                                                       "sturdy_agent.py"]


def test_the_agent_package_is_its_modules_and_the_collections_names():
    from ansible_collections.sturdy.workers.plugins.module_utils import names
    from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_digest, agent_package

    root = pathlib.Path(names.__file__).resolve().parents[2]
    files = agent_package(str(root))
    assert files["names.py"] == pathlib.Path(names.__file__).read_text()
    assert {"__init__.py", "__main__.py", "core.py", "celery_worker.py", "rq_worker.py"} <= set(files)
    # Every file counts in the digest the units carry.
    assert agent_digest(files) != agent_digest(dict(files, **{"letters.py": files["letters.py"] + "#"}))
    assert agent_digest(files) != agent_digest({k: v for k, v in files.items() if k != "rq_client.py"})


def test_agent_changes_refuses_a_release_without_a_venv(tmp_path):
    from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_changes

    with pytest.raises(ReleaseError, match="no venv"):
        agent_changes(str(tmp_path), {"core.py": "CORE"})
