"""One contract of names: plugins/module_utils/names.py, which the agent package imports as its own names.py (the
release module writes it there); no other file of the collection or the agent spells one of them again."""
from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.sturdy.workers.plugins.module_utils import names

ROOT = Path(__file__).resolve().parents[3]
SHARED = [n for n in dir(names) if n.isupper()]


def spellings(line: str, values: list[str]) -> list[str]:
    # A string literal starting with a shared value; the variables sturdy_dead_letters_* are not the header prefix.
    return [v for v in values if re.search(rf"[\"']{re.escape(v)}(?!letters_)", line)]


def test_no_other_file_of_the_collection_or_the_agent_spells_a_shared_name_again():
    values = [getattr(names, n) for n in SHARED if isinstance(getattr(names, n), str)]
    found = []
    for path in [*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/*/files/**/*.py")]:
        if path.name == "names.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and spellings(line, values):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "use plugins/module_utils/names.py:\n" + "\n".join(found)


def test_the_check_finds_a_name_spelled_again():
    assert spellings('queue = f"sturdy.smoke.{app}"', [names.SMOKE_PREFIX]) == [names.SMOKE_PREFIX]
    assert spellings('headers["sturdy_dead_reason"]', [names.DEAD_HEADER]) == [names.DEAD_HEADER]
    assert spellings('"sturdy_dead_letters_action"', [names.DEAD_HEADER]) == []


def test_the_agent_imports_its_names_from_the_contract(agent):
    for name in SHARED:
        assert getattr(agent.names, name) == getattr(names, name)
    assert agent.core.SMOKE_PREFIX is agent.names.SMOKE_PREFIX
