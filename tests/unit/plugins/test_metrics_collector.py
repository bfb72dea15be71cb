"""The collector as the timer runs it: the file the role installs, its module_utils copied beside it as the role
copies them, the host's python3, and systemctl/journalctl/systemd-run stand-ins on PATH (systemd cannot run here)."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan

ROOT = Path(__file__).resolve().parents[3]
SHOW = ("Id=shop-worker@1.service\nLoadState=loaded\nActiveState=active\nSubState=running\nResult=success\n"
        "NRestarts=2\nMainPID=4242\nExecMainStartTimestampMonotonic=1000000\nUnitFileState=enabled\n"
        "Environment=STURDY_BUILD_ID=b2\n")
STATS = [{"queue": "default", "depth": 2, "oldest_age": 30.0, "consumers": ["w1@h"]}]
# The module_utils the observe role copies beside the collector.
COPIED = yaml.safe_load((ROOT / "roles" / "observe" / "vars" / "main.yml").read_text())["__sturdy_observe_metrics_utils"]
PREFIX = "ansible_collections.sturdy.workers.plugins.module_utils."


def module_utils_imported(path: Path) -> set[str]:
    """The collection's module_utils a file imports."""
    return {node.module[len(PREFIX):] for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX)}


def test_the_role_copies_every_module_util_the_collector_imports_and_no_other():
    needed, todo = set(), [ROOT / "roles" / "observe" / "files" / "sturdy_metrics.py"]
    while todo:
        for name in module_utils_imported(todo.pop()) - needed:
            needed.add(name)
            todo.append(ROOT / "plugins" / "module_utils" / f"{name}.py")
    assert sorted(COPIED) == sorted(needed)


@pytest.fixture(name="host")
def fixture_host(tmp_path):
    lib = tmp_path / "lib"
    utils = lib / "ansible_collections" / "sturdy" / "workers" / "plugins" / "module_utils"
    utils.mkdir(parents=True)
    for name in COPIED:
        shutil.copy(ROOT / "plugins" / "module_utils" / f"{name}.py", utils)
    shutil.copy(ROOT / "roles" / "observe" / "files" / "sturdy_metrics.py", lib)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answers = {"systemctl": f"""case "$1" in --version) echo 'systemd 257 (257.9)';; list-units) ;;
               show) printf '%s' '{SHOW}';; esac""",
               "journalctl": "exit 1",
               "systemd-run": f"echo '{json.dumps(STATS)}'"}
    for tool, body in answers.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    root = tmp_path / "srv" / "shop"
    (root / "releases" / "b2").mkdir(parents=True)
    (root / "current").symlink_to(root / "releases" / "b2")
    (root / ".last-deploy.json").write_text(json.dumps({"build": "b2", "result": "success", "finished": 1.5e9}))
    the_plan = plan("shop", root=str(root), processes=[{"name": "worker", "command": ["bin/shop-worker"],
                                                        "adapter": "celery", "celery_app": "shop.celery",
                                                        "queues": ["default"]}])
    the_plan["state_dir"] = str(tmp_path / "state")
    counts = tmp_path / "state" / "sturdy-counts"
    counts.mkdir(parents=True)
    (counts / "shop-worker@1.service.json").write_text(json.dumps({"b2": {"succeeded": 7}}))
    config = tmp_path / "shop.metrics.json"
    textfile = tmp_path / "textfile" / "sturdy_shop.prom"
    textfile.parent.mkdir()
    config.write_text(json.dumps({"plan": the_plan, "host": "h1", "textfile": str(textfile), "queue_age_limit": 60}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    return {"argv": [python, str(lib / "sturdy_metrics.py"), str(config)], "env": env, "textfile": textfile,
            "bin": bin_dir}


def test_the_collector_writes_the_textfile_from_the_host(host):
    done = subprocess.run(host["argv"], env=host["env"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = host["textfile"].read_text().splitlines()
    assert 'sturdy_up{app="shop",process="worker",unit="shop-worker@1.service"} 1' in lines
    assert 'sturdy_restarts_total{app="shop",process="worker",unit="shop-worker@1.service"} 2' in lines
    assert 'sturdy_current_build_info{app="shop",build="b2"} 1' in lines
    assert 'sturdy_queue_depth{app="shop",queue="default"} 2' in lines
    assert 'sturdy_queue_oldest_age_seconds{app="shop",queue="default"} 30.0' in lines
    assert 'sturdy_queue_age_limit_seconds{app="shop"} 60.0' in lines
    assert ('sturdy_tasks_total{app="shop",process="worker",unit="shop-worker@1.service",build="b2",'
            'outcome="succeeded"} 7') in lines
    assert 'sturdy_last_deploy_success{app="shop"} 1' in lines
    assert not list(host["textfile"].parent.glob("*.tmp"))


def test_a_host_that_cannot_be_read_leaves_no_file_and_says_why(host):
    (host["bin"] / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    done = subprocess.run(host["argv"], env=host["env"], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and not host["textfile"].exists()
    assert "sturdy-metrics: shop: cannot read the host: systemctl --version ... failed (rc 1): Failed to connect" \
        in done.stderr
