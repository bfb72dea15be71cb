"""The YAML duplicate check of `make lint` finds a rule written twice and lets wiring and references pass."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "yaml_duplicates.py"
spec = importlib.util.spec_from_file_location("yaml_duplicates", TOOL)
yaml_duplicates = importlib.util.module_from_spec(spec)
spec.loader.exec_module(yaml_duplicates)


@pytest.fixture
def tree(tmp_path):
    def write(files: dict[str, str]) -> list[Path]:
        paths = []
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            paths.append(path)
        return paths
    return write


RULE = "sturdy_processes | selectattr('adapter', 'defined') | selectattr('adapter', 'in', ['celery', 'command'])"


def test_the_same_expression_in_two_roles_is_reported(tree):
    paths = tree({"roles/a/vars/main.yml": f"---\nx: \"{{{{ {RULE} }}}}\"\n",
                  "roles/b/tasks/main.yml": f"---\n- name: T\n  ansible.builtin.debug:\n    msg: \"{{{{ {RULE} | list }}}}\"\n"})
    found = yaml_duplicates.scan(paths)
    assert len(found) == 1 and "roles/a/vars/main.yml" in found[0] and "roles/b/tasks/main.yml" in found[0]


def test_the_same_task_twice_is_reported_whatever_its_name(tree):
    task = ("  ansible.builtin.set_fact:\n    failure: \"{{ inventory_hostname }}: {{ ansible_failed_task.name }}: "
            "{{ ansible_failed_result.msg | default('failed') }} (later batches are skipped)\"\n"
            "  when: __sturdy_deploy_failures | length == 0\n")
    paths = tree({"roles/a/tasks/one.yml": f"---\n- name: One\n{task}", "playbooks/p.yml":
                  "---\n- name: Play\n  hosts: all\n  tasks:\n    - name: Two\n      block:\n        - name: Three\n"
                  + "".join("        " + line + "\n" for line in task.splitlines())})
    found = yaml_duplicates.scan(paths)
    assert any(f.startswith("the same task 2 times") and "(One)" in f and "(Three)" in f for f in found), found


def test_references_and_handed_on_inputs_are_not_rules(tree):
    call = ("{{ sturdy_app | sturdy.workers.app_plan(root=sturdy_release_root, processes=sturdy_processes, "
            "secrets=sturdy_secrets, delivery=sturdy_secrets_delivery, user=sturdy_worker_user) }}")
    paths = tree({"roles/a/vars/main.yml": f"---\nx: \"{call}\"\ny: \"{{{{ sturdy_app }}}}\"\n",
                  "roles/b/vars/main.yml": f"---\nx: \"{call.replace('user=sturdy_worker_user', 'user=sturdy_x')}\"\n"
                  "y: \"{{ sturdy_app }}\"\n"})
    assert yaml_duplicates.scan(paths) == []


def test_the_collection_is_clean():
    assert yaml_duplicates.scan(yaml_duplicates.tree()) == []
