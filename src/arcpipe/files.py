"""Files written whole or not at all, and their content hashes: the one place for both, below every stage.

atomic_write_many(out_dir, {"metrics.json": data, ...})  # readers see the old files or the new, never half
file_sha256(path)                                        # hex digest, read in 1 MiB blocks
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """The SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def process_umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, which would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def atomic_write_many(out_dir: Path, contents: Mapping[str, bytes]) -> None:
    """Write each name -> bytes to a temporary file in out_dir, then rename them in the given order."""
    temps: dict[str, str] = {}
    try:
        for name, data in contents.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            temps[name] = tmp
            os.fchmod(fd, 0o666 & ~process_umask())  # as open() would create it, not mkstemp's owner-only 0600
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        for name, tmp in temps.items():
            os.replace(tmp, out_dir / name)
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
