"""The demo app's release artifact: reproducible, complete, and installable offline.

Downloads the pinned dependency wheels from the package index (pip's cache makes repeats fast).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import tarfile
import venv
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "build_artifact", Path(__file__).resolve().parents[2] / "apps" / "build_artifact.py"
)
build_artifact = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(build_artifact)


@pytest.fixture(scope="module")
def normal(tmp_path_factory):
    return build_artifact.build("2026.11.29-1", "normal", "abc123", tmp_path_factory.mktemp("a"))


def members(artifact: Path) -> dict[str, bytes]:
    with tarfile.open(artifact) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def baked(artifact: Path) -> str:
    import io
    import zipfile

    wheel = members(artifact)["wheelhouse/shopdemo-1.0-py3-none-any.whl"]
    return zipfile.ZipFile(io.BytesIO(wheel)).read("shopdemo/_build.py").decode()


def test_same_build_id_gives_the_same_bytes(normal, tmp_path):
    again = build_artifact.build("2026.11.29-1", "normal", "abc123", tmp_path)
    assert again.read_bytes() == normal.read_bytes()
    digest = hashlib.sha256(normal.read_bytes()).hexdigest()
    assert Path(f"{normal}.sha256").read_text() == f"{digest}  shop-2026.11.29-1.tar.gz\n"


def test_artifact_carries_manifest_commands_and_wheels(normal):
    files = members(normal)
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["build_id"] == "2026.11.29-1" and manifest["commit"] == "abc123"
    assert manifest["commands"] == {"worker": "bin/shop-worker", "web": "bin/shop-web", "migrate": "bin/shop-migrate"}
    for name, digest in manifest["wheels"].items():
        assert hashlib.sha256(files[f"wheelhouse/{name}"]).hexdigest() == digest
        assert name.endswith("-none-any.whl"), f"{name} is not pure Python"
    assert {"celery-5.7.0-py3-none-any.whl", "shopdemo-1.0-py3-none-any.whl"} <= set(manifest["wheels"])
    assert "BUILD_ID = '2026.11.29-1'" in baked(normal)


def test_variants(tmp_path):
    missing = build_artifact.build("m-1", "missing-worker", "", tmp_path)
    assert "bin/shop-worker" not in members(missing)
    assert "worker" not in json.loads(members(missing)["MANIFEST.json"])["commands"]
    assert "SCHEMA_TARGET = 2" in baked(build_artifact.build("v-2", "migration-v2", "", tmp_path))
    assert "CRASH_ON_START = True" in baked(build_artifact.build("c-1", "crash-on-start", "", tmp_path))


def test_wheelhouse_installs_offline(normal, tmp_path):
    with tarfile.open(normal) as tar:
        tar.extractall(tmp_path / "release", filter="data")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", tmp_path / "release" / "wheelhouse", "shopdemo"],
        check=True,
    )
    out = subprocess.run(
        [python, "-c", "import shopdemo.settings as s, kombu.transport.redis; print(s.BUILD_ID)"],
        check=True, capture_output=True, text=True,
    )
    assert out.stdout.strip() == "2026.11.29-1"


def test_bad_build_id_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--build-id"):
        build_artifact.build("v1; rm -rf /", "normal", "", tmp_path)


def test_a_cached_artifact_is_the_artifact_and_other_inputs_are_built_anew(normal, tmp_path):
    cache = tmp_path / "cache"
    first = build_artifact.build("2026.11.29-1", "normal", "abc123", tmp_path / "one", cache)
    again = build_artifact.build("2026.11.29-1", "normal", "abc123", tmp_path / "two", cache)
    assert first.read_bytes() == again.read_bytes() == normal.read_bytes()
    assert Path(f"{again}.sha256").read_text() == Path(f"{normal}.sha256").read_text()
    # Another variant of the same build ID is another artifact, not the cached one.
    other = build_artifact.build("2026.11.29-1", "migration-v2", "abc123", tmp_path / "three", cache)
    assert "SCHEMA_TARGET = 2" in baked(other)
    # One directory per artifact and one for the dependency wheels, nothing half-written left behind.
    kept = sorted(p.name for p in cache.iterdir())
    assert len(kept) == 3 and sum(name.startswith("deps-") for name in kept) == 1, kept
