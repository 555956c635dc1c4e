"""The two package sets install: the locks hold their requirements files, and the GPU set resolves.

The GPU set is never installed on the project's CPU machines, so nothing else would notice a pin bump that
makes it unsatisfiable (issue 16: vllm 0.31.0 needs fastapi<0.137 while the file pinned 0.165.0). Here uv
resolves requirements-gpu.txt for Linux x86_64 / Python 3.12 from the registry's metadata alone (no builds,
no wheel downloads: seconds), and a conflict fails with uv's explanation. Without the registry it skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
CPU_REQS, CPU_LOCK = REPO / "requirements.txt", REPO / "requirements.lock"
GPU_REQS, GPU_LOCK = REPO / "requirements-gpu.txt", REPO / "requirements-gpu.lock"
# the GPU target, as `make lock` resolves it (Makefile: GPU_PY; glibc 2.31: llguidance has no older wheel)
GPU_PLATFORM = "x86_64-manylinux_2_31"
REGISTRY_TIMEOUT_S = 10
RESOLVE_TIMEOUT_S = 300
# uv's words for "could not reach the index" (as opposed to "No solution found")
NETWORK_ERRORS = ("error sending request", "failed to fetch", "dns error", "connection refused",
                  "could not connect", "network is unreachable", "operation timed out", "timed out")


def makefile_var(name: str) -> str:
    m = re.search(rf"^{name}\s*:?=\s*(\S+)", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert m, f"Makefile sets no {name}"
    return m.group(1)


def requirements(path: Path) -> list[Requirement]:
    """The requirement lines of a requirements file (comments and blank lines skipped)."""
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith(("#", "-"))]


def lock_entries(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """A uv/pip-tools lock as {normalised name: (version, sha256 hashes)}."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            name = canonicalize_name(m.group(1))
            entries[name] = (Version(m.group(2)), [])
        elif name and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            entries[name][1].append(h.group(1))
    return entries


@pytest.mark.parametrize("reqs,lock", [(CPU_REQS, CPU_LOCK), (GPU_REQS, GPU_LOCK)], ids=["cpu", "gpu"])
def test_lock_holds_its_requirements(reqs, lock):
    locked = lock_entries(lock)
    assert len(locked) > 100, f"{lock.name} holds {len(locked)} packages: not a full resolution"
    unhashed = [n for n, (_, hashes) in locked.items() if not hashes]
    assert not unhashed, f"{lock.name}: packages without hashes: {unhashed}"
    stale = []
    for req in requirements(reqs):
        name = canonicalize_name(req.name)
        if name not in locked:
            stale.append(f"{req} (not in the lock)")
        elif not req.specifier.contains(locked[name][0], prereleases=True):
            stale.append(f"{req} (locked {locked[name][0]})")
    assert not stale, f"{lock.name} is out of date with {reqs.name}: {stale}; run `make lock`"


def test_cpu_lock_is_the_cpu_build():
    locked = lock_entries(CPU_LOCK)
    assert locked["torch"][0].local == "cpu", f"requirements.lock has torch {locked['torch'][0]}, not the CPU build"
    cuda = sorted(n for n in locked if n.startswith(("nvidia-", "cuda-")) or n in {"triton", "vllm", "unsloth"})
    assert not cuda, f"requirements.lock pulls CUDA/GPU packages: {cuda}"


def test_gpu_lock_is_the_cuda_build():
    locked = lock_entries(GPU_LOCK)
    assert locked["torch"][0].local is None, "requirements-gpu.lock must hold PyPI's (CUDA) torch"
    assert {"vllm", "unsloth", "unsloth-zoo", "xformers", "bitsandbytes"} <= set(locked)


# ----------------------------------------------------------------------------------- the resolver check

def uv_binary() -> str:
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            pytest.fail("uv is not installed: requirements.txt pins it (make setup installs it)")
        return found


def index_url() -> str:
    return (os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def require_registry() -> None:
    """Skip, saying why, when the package index cannot be reached (one small request: one project's page)."""
    url = f"{index_url()}/vllm/"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=REGISTRY_TIMEOUT_S).close()
    except (urllib.error.URLError, OSError) as e:
        pytest.skip(f"package registry unreachable ({url}: {e}); the GPU-set resolution check did not run")


def resolve(path: Path, python: str, platform: str) -> subprocess.CompletedProcess:
    """uv pip compile, metadata only: wheels' metadata (no sdist builds, no downloads of whole wheels)."""
    cmd = [uv_binary(), "pip", "compile", str(path), "--python-version", python, "--python-platform", platform,
           "--no-build", "--quiet", "--no-header", "--output-file", os.devnull]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RESOLVE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the registry did not answer the resolution within {RESOLVE_TIMEOUT_S} s")


def check_resolves(path: Path, python: str, platform: str) -> None:
    """Fail with uv's explanation when `path` cannot be resolved; skip when the registry drops out mid-way."""
    done = resolve(path, python, platform)
    if done.returncode == 0:
        return
    out = (done.stdout + done.stderr).strip()
    if "No solution found" not in out and any(e in out.lower() for e in NETWORK_ERRORS):
        pytest.skip(f"package registry unreachable while resolving {path.name}:\n{out}")
    pytest.fail(f"{path.name} does not resolve for Python {python} on {platform}:\n{out}", pytrace=False)


def test_gpu_set_resolves():
    require_registry()
    check_resolves(GPU_REQS, makefile_var("GPU_PY"), GPU_PLATFORM)


def test_resolver_check_catches_the_fastapi_conflict(tmp_path):
    """The check fails on the GPU set as it was before issue 16 (fastapi==0.165.0 beside vllm 0.31.0)."""
    require_registry()
    old = re.sub(r"(?m)^fastapi==\S+", "fastapi==0.165.0", GPU_REQS.read_text())
    assert "fastapi==0.165.0" in old
    (tmp_path / "requirements-gpu.txt").write_text(old)
    with pytest.raises(pytest.fail.Exception) as failed:
        check_resolves(tmp_path / "requirements-gpu.txt", makefile_var("GPU_PY"), GPU_PLATFORM)
    assert "No solution found" in str(failed.value)
    assert "vllm==0.31.0 depends on fastapi" in str(failed.value)
