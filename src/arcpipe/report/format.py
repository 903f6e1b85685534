"""How every report table is written: the same cells as CSV, Markdown and HTML (the page `snakemake --report` shows
in place), each file atomically; and the labels the tables share.

    write_table(frame, out_dir / "passk.csv", out_dir / "passk.md", "pass@K per checkpoint", notes)  # + passk.html

Numbers are shown to 2 decimals in Markdown and HTML; the CSV keeps them whole.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from arcpipe.files import atomic_write_many

SELECTED_ON_TEST = "selected on the test set"
# inline-sized, id-scoped styles of the HTML tables (to_html): readable alone and inside Snakemake's report page
TABLE_CSS = [
    {"selector": "th, td", "props": "border: 1px solid #d0d7de; padding: 0.15rem 0.35rem"},
    {"selector": "td", "props": "white-space: nowrap"},
    {"selector": "thead th", "props": "background: #f6f8fa; text-align: left; vertical-align: bottom"},
]
HEADING_CSS = "font-size: 1.1rem; font-weight: 600; margin: 1rem 0 0.25rem"


def to_markdown(frame: pd.DataFrame, title: str = "", notes: Sequence[str] = ()) -> str:
    """A GitHub Markdown table (numbers to 2 decimals) with an optional title and notes below it."""
    columns = [str(c) for c in frame.columns]
    lines = [f"# {title}", ""] if title else []
    lines += [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if _numeric(frame[c]) else "---" for c in frame.columns) + "|",
    ]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    if notes:
        lines += [""] + [f"{note}" for note in notes]
    return "\n".join(lines) + "\n"


def to_html(frame: pd.DataFrame, title: str = "", notes: Sequence[str] = (), uid: str = "table") -> str:
    """An HTML page: the title, the table (cells as in `to_markdown`, numbers right-aligned) and the notes.

    Styles are scoped to the table's id (`uid`), so the page can also be pasted into another one (the report's
    opening summary is: workflow/report/workflow.rst). Backquoted words in the notes become code.
    """
    uid = re.sub(r"\W", "_", uid)
    numeric = [c for c in frame.columns if _numeric(frame[c])]
    styler = (
        frame.style.set_uuid(uid)
        .hide(axis="index")
        .format(_cell, escape="html")
        .format_index(escape="html", axis=1)
        .set_table_attributes('style="border-collapse: collapse; font-size: 0.75rem; margin: 0.5rem 0 1rem"')
        .set_table_styles(TABLE_CSS)
    )
    if numeric:
        styler = styler.set_table_styles(
            {c: [{"selector": "td", "props": "text-align: right"}] for c in numeric}, overwrite=False
        )
    parts = ['<meta charset="utf-8">']
    if title:
        parts += [f"<title>{html.escape(title)}</title>", f'<h2 style="{HEADING_CSS}">{html.escape(title)}</h2>']
    parts.append(f'<div style="overflow-x: auto; max-width: 100%">\n{styler.to_html()}</div>')  # wide: scrolls
    parts += [f'<p style="font-size: 0.85rem; margin: 0.25rem 0">{_inline_code(note)}</p>' for note in notes]
    return "\n".join(parts) + "\n"


def write_table(
    frame: pd.DataFrame,
    csv_path: str | Path,
    md_path: str | Path,
    title: str,
    notes: Sequence[str] = (),
    shown: pd.DataFrame | None = None,
) -> None:
    """Write a table as CSV, Markdown and HTML (md_path with the suffix .html), each atomically. `shown`: a compact
    view of the same rows for the Markdown and HTML (the CSV keeps every column)."""
    md_path = Path(md_path)
    shown = frame if shown is None else shown
    html_text = to_html(shown, title, notes, uid=md_path.stem)
    for path, text in (
        (Path(csv_path), frame.to_csv(index=False)),
        (md_path, to_markdown(shown, title, notes)),
        (md_path.with_suffix(".html"), html_text),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_many(path.parent, {path.name: text.encode()})


def table_files(out_dir: Path, *stems: str) -> list[Path]:
    """The .csv, .md and .html files `write_table` writes for each stem in out_dir."""
    return [out_dir / f"{stem}.{ext}" for stem in stems for ext in ("csv", "md", "html")]


# --------------------------------------------------------------------------------------------------------------


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column)


def _inline_code(text: str) -> str:
    """A note as HTML: backquoted words as code, Markdown links [text](relative/path) as links."""
    escaped = html.escape(text)
    linked = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", linked)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.2f}" if not value.is_integer() or abs(value) < 1000 else f"{value:.0f}"
    return str(value)
