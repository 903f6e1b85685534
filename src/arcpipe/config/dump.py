"""A validated config written out: its canonical hash, and its YAML file written atomically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel


def config_hash(model: BaseModel) -> str:
    """sha256 of a model's canonical JSON: equal configs hash equal whatever the key order in YAML."""
    text = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_yaml_atomic(path: Path, data: Any) -> None:
    """Write YAML to a temporary file beside `path`, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)
