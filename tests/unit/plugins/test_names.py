"""One contract of names: the agent runs without the collection and keeps its own copies of the names in
plugins/module_utils/names.py; each must be the same, and the collection's own files must not spell them again."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils import names

ROOT = Path(__file__).resolve().parents[3]
AGENT = ROOT / "roles" / "release" / "files" / "sturdy_agent.py"
SHARED = [n for n in dir(names) if n.isupper()]


def load_agent():
    spec = importlib.util.spec_from_file_location("sturdy_agent_names", AGENT)
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    return agent


@pytest.mark.parametrize("name", SHARED)
def test_the_agent_keeps_the_same_value(name):
    assert getattr(load_agent(), name) == getattr(names, name)


def test_no_other_file_of_the_collection_spells_a_shared_name_again():
    spelled = {repr(getattr(names, n)).strip("'") for n in SHARED if isinstance(getattr(names, n), str)}
    found = []
    for path in [*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/*/files/*.py")]:
        if path.name == "names.py" or path == AGENT:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and any(re.search(rf"[\"']{re.escape(v)}", line) for v in spelled):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "use plugins/module_utils/names.py:\n" + "\n".join(found)
