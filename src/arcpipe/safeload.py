"""Reading torch files without running code: tensors and plain values only, and one line when a file holds more.

Every torch file arcpipe reads (training states, weights checkpoints, upstream checkpoints to import) goes through
`torch_load`, which unpickles with `weights_only=True`: tensors, dicts, lists, tuples, numbers, strings, None and a
few torch types (dtypes, devices, OrderedDict) are built; any other global a pickle names is refused before it is
called, so a file crafted to run code on load runs none. arcpipe writes nothing else into these files
(`check_plain` holds training states to that when they are written), so no safe globals are registered and there
is no fallback to full unpickling.

The other readers load data, never objects: numpy with `allow_pickle=False`, YAML with `yaml.safe_load`, JSON
into dicts and lists that pydantic then validates.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from arcpipe.config import ArcpipeError

_SCALARS = (str, int, float, bool, type(None))  # exactly these types: an IntEnum pickles its class


def torch_load(path: str | Path, *, what: str, fix: str) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU; an unreadable or refused file is one ArcpipeError line
    naming `path` and ending in `fix` (what to do)."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=False)
    except pickle.UnpicklingError as err:
        message = str(err)
        named = re.search(r"Unsupported global: GLOBAL (\S+)", message)
        if named:
            raise ArcpipeError(
                f"{path}: refused: this {what} holds Python objects beyond tensors and plain values "
                f"({named.group(1)}), and loading them could run code; arcpipe never writes such a file: {fix}"
            ) from None
        # anything else the restricted unpickler stops at: a raw pickle, garbage, an opcode torch.save never writes
        problem = re.search(r"WeightsUnpickler error:\s*([^\n]+)", message)
        detail = problem.group(1).strip() if problem else _first_line(err)
        raise ArcpipeError(f"{path}: cannot read the {what} (not a torch file? {detail}); {fix}") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise ArcpipeError(
            f"{path}: cannot read the {what} (truncated or corrupt? {_first_line(err)}); {fix}"
        ) from None


def check_plain(obj: Any, where: str = "state") -> None:
    """Raise TypeError naming the first value in `obj` that `torch_load` would refuse (anything but tensors, plain
    scalars and dict/list/tuple of them): such a file would be written fine and refused when read back."""
    if type(obj) in (dict, OrderedDict):
        for key, value in obj.items():
            check_plain(key, f"{where} key")
            check_plain(value, f"{where}[{key!r}]")
    elif type(obj) in (list, tuple, torch.Size):
        for i, value in enumerate(obj):
            check_plain(value, f"{where}[{i}]")
    elif type(obj) not in _SCALARS and not isinstance(obj, torch.Tensor):
        raise TypeError(
            f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} would be refused on load; "
            "store tensors and plain values (convert it when saving, back when loading)"
        )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:160]}" if text else type(err).__name__
