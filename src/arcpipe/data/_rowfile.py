"""Append fixed-size rows to an `.npy` file with direct I/O, bypassing the page cache where the filesystem allows.

The builder writes 7.3 GB of token rows for a full ARC-AGI-1 build. Through the page cache, every byte is copied
by the kernel and the dirty pages are then allocated and written back, which on the 2-core build box cost more CPU
(21 s of system time for 7.3 GB) than rendering the rows; with `O_DIRECT` the device reads the rows straight from
our buffers (0.3 s of system time, `benchmarks/RESULTS.md`).

O_DIRECT needs the buffer address, the length and the file offset aligned to the block size. Windows hold a
multiple of 4096 bytes of rows, so every window starts at the same offset modulo 4096 as the data does (the length
of the `.npy` header): each window is rendered into an aligned buffer at that offset, the bytes before it are the
previous window's last bytes (or the header), and the last `offset` bytes are carried over to the next window. The
final tail (less than one block) goes through an ordinary write. Filesystems without O_DIRECT (older tmpfs, some
network filesystems), at open or at the first write, get ordinary writes of the same bytes: the file is
byte-identical either way.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from pathlib import Path

import numpy as np

ALIGN = 4096  # bytes: a multiple of every common logical block size
O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux; elsewhere ordinary writes


class RowFile:
    """`.npy` file of `(rows, row_bytes)` uint8 written window by window; two buffers for double buffering.

    f = RowFile(path, header, row_bytes=900, window_rows=16384)
    rows = f.buffer(k)            # (window_rows, row_bytes) uint8 view to render window k into
    f.write(k, n)                 # append its first n rows (k = 0, 1, 2, ... in order; only the last short)
    f.close()
    """

    def __init__(self, path: Path, header: bytes, *, row_bytes: int, window_rows: int) -> None:
        assert (row_bytes * window_rows) % ALIGN == 0, "a window must hold whole blocks"
        assert len(header) < ALIGN
        self.offset = len(header)  # where rows start inside a buffer, and in the file modulo ALIGN
        self.row_bytes = row_bytes
        size = self.offset + row_bytes * window_rows
        self._raw = [mmap.mmap(-1, size) for _ in range(2)]  # anonymous maps are page aligned
        self._views = [
            np.frombuffer(raw, dtype=np.uint8, count=row_bytes * window_rows, offset=self.offset).reshape(
                window_rows, row_bytes
            )
            for raw in self._raw
        ]
        self._carry = bytes(header)  # bytes of the file after the last aligned position written
        self._written = 0  # bytes on disk so far (always a multiple of ALIGN)
        self._fd = _open(path)
        self.direct = bool(O_DIRECT and fcntl.fcntl(self._fd, fcntl.F_GETFL) & O_DIRECT)

    def buffer(self, k: int) -> np.ndarray:
        return self._views[k % 2]

    def write(self, k: int, n: int) -> None:
        """Append the first n rows of buffer(k): all whole blocks now, the rest carried to the next write or close."""
        raw = self._raw[k % 2]
        raw[: self.offset] = self._carry
        total = self.offset + n * self.row_bytes
        aligned = total - total % ALIGN
        self._pwrite_all(memoryview(raw)[:aligned], self._written)
        self._written += aligned
        self._carry = raw[aligned:total]  # bytes: a copy, the buffer is rendered into again

    def close(self) -> None:
        try:
            if self._carry:
                self._no_direct()  # an unaligned tail
                self._pwrite_all(memoryview(self._carry), self._written)
        finally:
            os.close(self._fd)
            self._views, self._raw = [], []  # the maps go with the last view a caller still holds

    def _pwrite_all(self, view: memoryview, position: int) -> None:
        while view:
            try:
                done = os.pwrite(self._fd, view, position)
            except OSError as err:
                if err.errno != errno.EINVAL or not self.direct:
                    raise
                self._no_direct()  # the filesystem refuses direct writes (or this alignment): ordinary writes
                continue
            view, position = view[done:], position + done
            if view and done % ALIGN:
                self._no_direct()  # a short unaligned write: finish without direct I/O

    def _no_direct(self) -> None:
        if self.direct:
            flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
            fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~O_DIRECT)
            self.direct = False


def _open(path: Path) -> int:
    """A new, empty file for writing: with O_DIRECT where the filesystem opens it so (a write it then refuses
    falls back in RowFile._pwrite_all), else without."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if O_DIRECT:
        try:
            return os.open(path, flags | O_DIRECT, 0o644)
        except OSError:  # EINVAL on filesystems without direct I/O
            pass
    return os.open(path, flags, 0o644)
