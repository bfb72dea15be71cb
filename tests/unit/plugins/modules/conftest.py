"""Run a module's main() in-process: its arguments in, its exit_json/fail_json result out, with the commands it
runs answered from a table (the host boundary; the logic behind them is tested in module_utils)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


class Exit(Exception):
    pass


@pytest.fixture
def run_module(monkeypatch):
    def run(module, args, responses=(), bin_path="/usr/bin/systemctl"):
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: bin_path)
        calls, results, warnings = [], {}, []

        def fake_run(self, argv, **kwargs):
            calls.append(list(argv))
            for prefix, response in responses:
                if list(argv[: len(prefix)]) == list(prefix):
                    return response(argv) if callable(response) else response
            raise AssertionError(f"unexpected command {argv}")

        def exit_json(self, **kwargs):
            results.update(kwargs)
            raise Exit

        def fail_json(self, **kwargs):
            results.update(kwargs, failed=True)
            raise Exit

        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run)
        monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, w: warnings.append(w))
        with pytest.raises(Exit):
            module.main()
        results["warnings_given"] = warnings
        return results, calls

    return run
