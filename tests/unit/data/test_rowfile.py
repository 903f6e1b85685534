"""RowFile: windows of rows written with direct I/O (or ordinary writes) give exactly the file np.save writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arcpipe.data._rowfile import ALIGN, RowFile
from arcpipe.data.build import _npy_header

ROW = 900
WINDOW = 1024  # 1024 x 900 bytes = 225 blocks


def _write(path: Path, rows: np.ndarray) -> RowFile:
    f = RowFile(path, _npy_header(rows.shape, np.uint8), row_bytes=ROW, window_rows=WINDOW)
    for k, start in enumerate(range(0, len(rows), WINDOW)):
        chunk = rows[start : start + WINDOW]
        f.buffer(k)[: len(chunk)] = chunk
        f.write(k, len(chunk))
    f.close()
    return f


@pytest.mark.parametrize("n", [0, 1, 5, WINDOW - 1, WINDOW, WINDOW + 1, 3 * WINDOW + 17])
@pytest.mark.parametrize("direct", [True, False])
def test_rows_land_exactly_as_np_save_writes_them(n, direct, tmp_path, monkeypatch):
    if not direct:  # a platform or filesystem without direct I/O: ordinary writes
        monkeypatch.setattr("arcpipe.data._rowfile.O_DIRECT", 0)
    rows = np.random.default_rng(n).integers(0, 12, size=(n, ROW), dtype=np.uint8)
    f = _write(tmp_path / "rows.npy", rows)
    np.save(tmp_path / "reference.npy", rows)
    assert (tmp_path / "rows.npy").read_bytes() == (tmp_path / "reference.npy").read_bytes()
    if not direct:
        assert not f.direct


def test_a_filesystem_refusing_direct_writes_gets_ordinary_ones(tmp_path, monkeypatch):
    import errno
    import os

    real = os.pwrite

    def refuse_direct(fd, data, offset):  # what EINVAL from a filesystem without O_DIRECT looks like
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr("arcpipe.data._rowfile.os.pwrite", refuse_direct)
    rows = np.random.default_rng(0).integers(0, 12, size=(2 * WINDOW + 3, ROW), dtype=np.uint8)
    f = _write(tmp_path / "rows.npy", rows)
    np.save(tmp_path / "reference.npy", rows)
    assert not f.direct and (tmp_path / "rows.npy").read_bytes() == (tmp_path / "reference.npy").read_bytes()


def test_windows_must_hold_whole_blocks(tmp_path):
    assert (ROW * WINDOW) % ALIGN == 0
    with pytest.raises(AssertionError):
        RowFile(tmp_path / "x.npy", b"h" * 128, row_bytes=ROW, window_rows=1000)
