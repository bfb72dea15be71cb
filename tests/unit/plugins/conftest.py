"""The worker agent (roles/release/files/sturdy_agent.py) as the unit tests load it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[3] / "roles" / "release" / "files" / "sturdy_agent.py"


@pytest.fixture(name="agent")
def fixture_agent(tmp_path, monkeypatch):
    """A copy of the agent inside a fake release (RELEASE.json two levels up), imported with no STURDY_AGENT."""
    release = tmp_path / "releases" / "b7"
    site = release / "venv" / "lib" / "python3.13" / "site-packages"
    site.mkdir(parents=True)
    (release / "RELEASE.json").write_text(json.dumps({"build_id": "b7"}))
    (site / "sturdy_agent.py").write_bytes(AGENT.read_bytes())
    monkeypatch.delenv("STURDY_AGENT", raising=False)
    spec = importlib.util.spec_from_file_location("sturdy_agent", site / "sturdy_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
