"""Support for the workflow/scripts/ shims: send a step's output to its Snakemake log, fail cleanly."""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arcpipe.config import ArcpipeError


@contextlib.contextmanager
def logged(snakemake: Any) -> Iterator[None]:
    """Run the body with stdout, stderr and logging going to the rule's log; ArcpipeError exits with one line, any
    other exception leaves its traceback in the log and is raised."""
    log_path = Path(snakemake.log[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(log_path, "w") as log_file,
        contextlib.redirect_stdout(log_file),
        contextlib.redirect_stderr(log_file),
    ):
        handler = logging.StreamHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield
        except ArcpipeError as err:
            print(f"arcpipe: error: {err}", file=log_file)
            log_file.flush()
            sys.exit(2)
        except Exception:  # a bug: its traceback into the log too (Python prints it after the redirect has ended)
            traceback.print_exc(file=log_file)
            log_file.flush()
            raise
        finally:
            root.removeHandler(handler)
