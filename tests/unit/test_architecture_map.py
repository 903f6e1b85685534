"""docs/architecture.md's folder map names every module of src/arcpipe by its file name (`loop.py`; the numba kernels
of data/_kernels/ as their package) and every top-level folder of the repository: a module added without a line in the
map fails here, so the map a newcomer reads matches the tree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _folder_map() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"## Folder map\n\n```text\n(.*?)```", text, re.DOTALL)
    assert match, "docs/architecture.md has no '## Folder map' text block"
    return match[1]


def _tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_every_module_is_in_the_folder_map() -> None:
    folder_map = _folder_map()
    modules = [Path(p) for p in _tracked("src/arcpipe/*.py") if Path(p).name != "__init__.py"]
    missing = [
        str(path.relative_to("src/arcpipe"))
        for path in modules
        if "_kernels" not in path.parts and not re.search(rf"(?<![\w/]){re.escape(path.name)}\b", folder_map)
    ]
    assert not missing, f"docs/architecture.md's folder map does not name: {', '.join(missing)}"


def test_every_top_level_folder_is_in_the_folder_map() -> None:
    folder_map = _folder_map()
    folders = sorted({Path(p).parts[0] for p in _tracked() if len(Path(p).parts) > 1 and not p.startswith(".")})
    missing = [name for name in folders if not re.search(rf"^{re.escape(name)}/", folder_map, re.MULTILINE)]
    assert not missing, f"docs/architecture.md's folder map does not name the folders: {', '.join(missing)}"
