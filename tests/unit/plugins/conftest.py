"""The worker agent package (roles/release/files/sturdy_agent/) as the unit tests load it."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_package

ROOT = Path(__file__).resolve().parents[3]
MODULES = ("core", "records", "letters", "celery_gate", "celery_worker", "rq_worker", "client", "rq_client", "__main__")


def forget_agent():
    for name in [n for n in sys.modules if n == "sturdy_agent" or n.startswith("sturdy_agent.")]:
        del sys.modules[name]


@pytest.fixture(name="agent")
def fixture_agent(tmp_path, monkeypatch):
    """The package as a release's venv holds it (RELEASE.json above site-packages), imported with no STURDY_AGENT,
    every module loaded: agent.core, agent.client..."""
    release = tmp_path / "releases" / "b7"
    site = release / "venv" / "lib" / "python3.13" / "site-packages"
    (site / "sturdy_agent").mkdir(parents=True)
    (release / "RELEASE.json").write_text(json.dumps({"build_id": "b7"}))
    for name, text in agent_package(str(ROOT)).items():
        (site / "sturdy_agent" / name).write_text(text)
    monkeypatch.delenv("STURDY_AGENT", raising=False)
    monkeypatch.syspath_prepend(str(site))
    forget_agent()
    package = importlib.import_module("sturdy_agent")
    for name in MODULES:
        importlib.import_module(f"sturdy_agent.{name}")
    yield package
    forget_agent()
