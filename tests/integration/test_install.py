"""Installing arcpipe where torch already is, as on a GPU image with its own CUDA torch: offline, keeping that torch.

arcpipe's wheel is built from this checkout; a new virtual environment sees this venv's packages (torch among
them) through a .pth file, as a GPU image's Python sees its own; pip installs the wheel with no package index, no
find-links and no pip configuration, so it can take nothing from anywhere but what is installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]

# what the new environment finds: its torch (located, not imported: that takes seconds), its arcpipe, and the
# requirements pip recorded for that arcpipe
PROBE = """
import importlib.metadata, importlib.util, json, arcpipe.cli
print(json.dumps({"torch": importlib.metadata.version("torch"), "torch_file": importlib.util.find_spec("torch").origin,
                  "arcpipe_file": arcpipe.__file__, "requires": importlib.metadata.requires("arcpipe")}))
"""
TORCH = importlib.metadata.distribution("torch")  # this venv's
ARCPIPE = importlib.metadata.distribution("arcpipe")  # this venv's (setup.sh: editable)


def test_pyproject_asks_for_a_torch_range_that_admits_the_torch_we_test_with() -> None:
    torch_req = _torch_requirement()
    assert not any(spec.operator in ("==", "===") for spec in torch_req.specifier), torch_req
    pinned = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if line.startswith("torch==")]
    assert len(pinned) == 1, "constraints.txt pins torch for setup.sh and CI"
    for version in (TORCH.version, pinned[0].removeprefix("torch==")):
        assert torch_req.specifier.contains(version), f"{torch_req} excludes torch {version}"
    assert not torch_req.specifier.contains("2.4.1"), "nn.Buffer (models/) needs torch 2.5"
    assert not torch_req.specifier.contains("3.0.0")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """arcpipe's wheel, built offline from a copy of the checkout (a build in place would leave build/ there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
    done = _run([*pip, "--wheel-dir", str(tmp / "dist"), str(source)], cwd=tmp)
    assert done.returncode == 0, done.stdout
    (built,) = (tmp / "dist").glob("arcpipe-*.whl")
    return built


def test_install_over_an_installed_torch_is_offline_and_keeps_that_torch(wheel, tmp_path) -> None:
    python = _env_with_this_venvs_packages(tmp_path / "env")
    # pip never uninstalls outside the environment it installs into, so this venv's packages stay as they are
    records = [Path(d.locate_file(next(f for f in d.files if f.name == "RECORD"))) for d in (TORCH, ARCPIPE)]
    before = [(r.stat().st_mtime_ns, r.stat().st_size) for r in records]

    done = _run([str(python), "-m", "pip", "install", "--no-index", "--no-cache-dir", str(wheel)], cwd=tmp_path)

    assert done.returncode == 0, done.stdout
    torch_req = _torch_requirement()
    assert f"Requirement already satisfied: torch{torch_req.specifier}" in done.stdout, done.stdout
    assert "Collecting torch" not in done.stdout and "Downloading" not in done.stdout
    installed = [line for line in done.stdout.splitlines() if line.startswith("Successfully installed")]
    assert installed == [f"Successfully installed arcpipe-{wheel.name.split('-')[1]}"], done.stdout
    assert [(r.stat().st_mtime_ns, r.stat().st_size) for r in records] == before

    probe = _run([str(python), "-c", PROBE], cwd=tmp_path)
    assert probe.returncode == 0, probe.stdout
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert (seen["torch"], seen["torch_file"]) == (TORCH.version, importlib.util.find_spec("torch").origin)
    assert Path(seen["arcpipe_file"]).is_relative_to(tmp_path / "env")
    (installed_req,) = [Requirement(r) for r in seen["requires"] if Requirement(r).name == "torch"]
    assert installed_req.specifier == torch_req.specifier and not installed_req.marker
    cli = _run([str(python.parent / "arcpipe"), "--help"], cwd=tmp_path)
    assert cli.returncode == 0 and cli.stdout.startswith("usage: arcpipe"), cli.stdout


@pytest.mark.parametrize(
    ("version", "accepted"),
    [
        ("2.4.1", False),  # the release before nn.Buffer
        ("2.6.0a0+ecf3bae40a", True),  # NVIDIA's containers ship pre-releases built from main
    ],
)
def test_the_installed_torch_version_decides_offline(wheel, tmp_path, version: str, accepted: bool) -> None:
    # pip reads the version from the installed metadata: a dist-info of that version in front of the real torch
    torch_req = _torch_requirement()
    assert torch_req.specifier.contains(version, prereleases=True) == accepted
    python = _env_with_this_venvs_packages(tmp_path / "env")
    site = _site_packages(python)
    dist_info = site / f"torch-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (dist_info / "RECORD").write_text("")

    done = _run([str(python), "-m", "pip", "install", "--no-index", "--no-cache-dir", str(wheel)], cwd=tmp_path)

    if accepted:
        assert done.returncode == 0, done.stdout
        assert f"Requirement already satisfied: torch{torch_req.specifier}" in done.stdout
        assert f"({version})" in done.stdout
    else:
        assert done.returncode != 0
        assert f"No matching distribution found for torch{torch_req.specifier}" in done.stdout, done.stdout
        assert not (site / "arcpipe").exists()


def _torch_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_req,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    return torch_req


def _env_with_this_venvs_packages(path: Path) -> Path:
    """A new venv whose Python also sees this venv's site-packages (after its own); its pip is this venv's."""
    venv.create(path, with_pip=False, symlinks=True)
    python = path / "bin" / "python"
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (_site_packages(python) / "this-venv.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


def _site_packages(python: Path) -> Path:
    done = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=python.parent)
    return Path(done.stdout.strip())


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # no PIP_* variables and no pip configuration files: no machine-wide index, find-links or constraints
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    return subprocess.run(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
