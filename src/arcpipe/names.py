"""Names that come from a user's data or config and become part of a path, a command line or a job name.

    check_name("trm-arc1-s0", "run name")          # the name, or ValueError saying what is wrong and the fix
    case_collisions(["a1", "A1"], "task id")        # ["task ids 'A1' and 'a1' differ only by case ..."]

Run and dataset names (config keys) and task ids (keys of a challenges file, file names in a directory source)
are checked where they enter, so every later `results/runs/{run}/`, `results/data/{dataset}/`, job name and
submission key can use them as they are: one path component that stays in its folder, never read as an option,
and the same file on a filesystem that folds case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_LEN = 100  # under every filesystem's 255, with room for a prefix and a suffix
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RULE = f"1 to {MAX_LEN} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_name(value: object, what: str) -> str:
    """`value` if it is a safe name (see RULE); else ValueError naming it, the rule and the fix."""
    if not isinstance(value, str):
        raise ValueError(f"{what} {value!r} is not a string ({type(value).__name__}); give it as text: {RULE}")
    if len(value) > MAX_LEN:
        raise ValueError(f"{what} {value[:20]!r}... is {len(value)} characters long; shorten it to {RULE}")
    if not _NAME.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not a safe name; rename it to {RULE}")
    return value


def case_collisions(names: Iterable[str], what: str) -> list[str]:
    """One problem per group of `names` that differ only by case (one file on a case-folding filesystem)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.lower(), []).append(name)
    return [
        f"{what}s {' and '.join(map(repr, sorted(group)))} differ only by case (one file where the filesystem folds "
        "case); rename one of them"
        for group in groups.values()
        if len(group) > 1
    ]
