"""Loading the filter files stays cheap: ansible imports every filter file of the collection, in every task's
worker process, to find one filter by name. The module_utils a filter runs are imported when it is called."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FILTERS = sorted(p.stem for p in (Path(__file__).resolve().parents[4] / "plugins" / "filter").glob("*.py"))


def test_loading_every_filter_file_imports_no_module_utils():
    code = "; ".join(
        [f"import ansible_collections.sturdy.workers.plugins.filter.{name}" for name in FILTERS]
        + ["import sys",
           "print(' '.join(sorted(m for m in sys.modules if '.workers.plugins.module_utils.' in m)))"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(FILTERS) >= 9
    assert out.stdout.split() == [], "filter files import these at load time; import them inside the filter"
