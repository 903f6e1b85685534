"""The README and the guides under docs/ say only commands that work: every fenced command is run.

    pytest tests/workflow/test_docs.py

Every line of a fenced block of README.md or docs/*.md that starts with `snakemake` or `arcpipe` (after an
optional `$ `; a line ending in a backslash continues on the next) is run with bash, in document order, in a
scratch directory per file that holds a copy of config/ and links to the workflow, so the repository's own
results/ and .snakemake/ are never touched and a later command can read what an earlier one of the same file
built. A `snakemake` command runs as a dry run: `-n` is added unless it already only plans (`-n`, `--dag`,
`--lint`, ...). An `arcpipe` command runs with its real arguments. Each must exit 0.

A block that cannot run on a CPU in CI carries a marker on the line right above its opening fence:

    <!-- cluster-only -->            a Kubernetes or SLURM cluster (or the root-only SLURM lab)
    <!-- gpu-only -->                a CUDA GPU, or a GPU machine's install
    <!-- not-in-ci: REASON -->       anything else (a trained checkpoint, the internet, upstream files), said in words

The convention is also described in docs/architecture.md, "How the guides are tested".
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
MARKER = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
KNOWN_MARKER = re.compile(r"^(cluster-only|gpu-only|not-in-ci: \S.*)$")
# arguments with which snakemake only plans or inspects, never runs a job
PLANS_ONLY = {"-n", "--dry-run", "--dryrun", "--dag", "--rulegraph", "--filegraph", "--lint", "--list", "-l"}
PLANS_ONLY |= {"--summary", "-S", "--detailed-summary", "-D", "--version", "-v", "--help", "-h"}
# the workflow as a scratch directory sees it; config/ is copied, since commands may write there (schema.json)
LINKED = ("Snakefile", "rules", "workflow", "profiles", "cluster")
# a dry run's outcome does not depend on what earlier commands built: each distinct one runs once per session
_dry_runs: dict[str, subprocess.CompletedProcess] = {}


@dataclass(frozen=True)
class Command:
    doc: Path
    line: int  # 1-based line of the command's first line
    text: str
    marker: str | None  # the block's marker, None when the block runs in CI

    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def commands(doc: Path) -> list[Command]:
    """The `snakemake`/`arcpipe` lines of every fenced block of `doc`, with their block's marker."""
    found: list[Command] = []
    lines = doc.read_text().splitlines()
    in_block, marker, pending, start = False, None, "", 0
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_block = not in_block
            previous = MARKER.match(lines[number - 2]) if in_block and number > 1 else None
            marker = previous.group(1) if previous else None
            continue
        if not in_block:
            continue
        text = line.strip().removeprefix("$ ")
        if pending:
            pending += " " + text
        elif text.split(" ", 1)[0] in ("snakemake", "arcpipe"):
            pending, start = text, number
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        if pending:
            found.append(Command(doc, start, pending, marker))
            pending = ""
    return found


def as_run(command: str) -> str:
    """The command as the test runs it: `snakemake` as a dry run unless it already only plans."""
    if not command.startswith("snakemake"):
        return command
    arguments = shlex.split(command, comments=True)[1:]
    short_n = any(re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", a) for a in arguments)
    if short_n or PLANS_ONLY & set(arguments):
        return command
    return "snakemake -n" + command.removeprefix("snakemake")


def scratch(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "config", work / "config")
    return work


def run(command: str, work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "disabled"}
    return subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_fenced_command_runs(doc: Path, tmp_path: Path) -> None:
    """Each unmarked `snakemake`/`arcpipe` command of the file exits 0 (snakemake as a dry run)."""
    work = scratch(tmp_path)
    failures = []
    for command in commands(doc):
        if command.marker is not None:
            continue
        text = as_run(command.text)
        if text.startswith("snakemake"):
            done = _dry_runs.get(text) or _dry_runs.setdefault(text, run(text, work))
        else:
            done = run(text, work)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            failures.append(f"{command.where()}: `{text}` exited {done.returncode}:\n{tail}")
    assert not failures, "\n\n".join(failures)


def test_markers_are_known_and_commands_are_found() -> None:
    """A typo in a marker would run a cluster block in CI, or hide a block from the test."""
    bad = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            marker = MARKER.match(line)
            if not marker:
                continue
            follows_fence = number < len(lines) and FENCE.match(lines[number])
            if not KNOWN_MARKER.match(marker.group(1)) or not follows_fence:
                bad.append(f"{doc.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "markers must be one of cluster-only, gpu-only, not-in-ci: REASON, right above a fence:\n" + (
        "\n".join(bad)
    )
    found = [c for doc in DOCS for c in commands(doc)]
    assert any(c.marker is None and c.text.startswith("snakemake") for c in found)
    assert any(c.marker is None and c.text.startswith("arcpipe") for c in found)


def test_dry_run_rewrite() -> None:
    assert as_run("snakemake smoke") == "snakemake -n smoke"
    assert as_run("snakemake --profile profiles/slurm -n -p full") == "snakemake --profile profiles/slurm -n -p full"
    assert as_run("snakemake -np full") == "snakemake -np full"
    assert as_run("snakemake full --dag > dag.dot") == "snakemake full --dag > dag.dot"
    assert as_run("arcpipe models") == "arcpipe models"


def test_readme_is_a_front_page_linking_every_guide() -> None:
    """At most 250 lines, the two commands first (.ci/run runs the second), and a link to each guide."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line for line in first_block.splitlines() if line and not line.startswith("#")] == [
        "bash setup.sh && source .venv/bin/activate && snakemake smoke",
        "bash setup.sh && source .venv/bin/activate && bash tests/run.sh",
    ]
    assert "bash setup.sh && source .venv/bin/activate && bash tests/run.sh" in (ROOT / ".ci/run").read_text()
    missing = [d.name for d in DOCS[1:] if f"](docs/{d.name})" not in readme]
    assert not missing, f"README.md links to no {missing}"


def test_relative_links_resolve() -> None:
    """Every relative link of the README and the guides names a file that exists, and a heading of it."""
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and anchor not in _anchors(file):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def _anchors(doc: Path) -> set[str]:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens
    headings = re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
