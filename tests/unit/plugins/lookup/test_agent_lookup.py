from __future__ import annotations

from pathlib import Path

from ansible_collections.sturdy.workers.plugins.lookup.agent import LookupModule
from ansible_collections.sturdy.workers.plugins.module_utils import names


def test_the_lookup_gives_the_package_with_the_collections_names():
    files, = LookupModule().run([])
    assert files["names.py"] == Path(names.__file__).read_text()
    assert "def activate(" in files["__init__.py"]
    assert sorted(files) == sorted([p.name for p in (Path(names.__file__).parents[2] / "roles" / "release" / "files" /
                                                     "sturdy_agent").glob("*.py")] + ["names.py"])
