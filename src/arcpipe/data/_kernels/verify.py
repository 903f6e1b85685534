"""Kernels of the verifier (data/verify.py): decode canvases back into grids and hash them with family A
(comparable with `view_hashes`)."""

from __future__ import annotations

import numba as nb
import numpy as np

from arcpipe.data._kernels.canvas import CANVAS, COLOUR_OFFSET, EOS, PAD
from arcpipe.data._kernels.splitmix import U64, splitmix

BAD_TOKEN, BAD_CANVAS, BAD_OFFSET = 1, 2, 3  # scan_canvases codes; 0 is a valid row


@nb.njit(cache=True, inline="always")
def _position_weight(salt: np.uint64, h: int, w: int, r: int, c: int) -> np.uint64:
    return splitmix(salt ^ splitmix(U64(((h * 32 + w) * 32 + r) * 32 + c)))


@nb.njit(cache=True, nogil=True)
def position_table(salt: np.uint64) -> np.ndarray:
    """(31, 31, 30, 30) table of `_position_weight(salt, h, w, r, c)`, so decoding need not hash per cell."""
    out = np.zeros((31, 31, 30, 30), dtype=np.uint64)
    for h in range(1, 31):
        for w in range(1, 31):
            for r in range(h):
                for c in range(w):
                    out[h, w, r, c] = _position_weight(salt, h, w, r, c)
    return out


@nb.njit(cache=True)
def _decode_canvas(row: np.ndarray, vocab: int, fa: np.ndarray, weights: np.ndarray) -> tuple[int, int, int, np.uint64]:
    """(code, r0, c0, hash) of one (900,) canvas: a colour rectangle with its EOS edges and PAD elsewhere."""
    first = -1
    for i in range(CANVAS * CANVAS):
        if row[i] >= vocab:
            return BAD_TOKEN, 0, 0, U64(0)
        if first < 0 and row[i] >= COLOUR_OFFSET:
            first = i
    if first < 0:
        return BAD_CANVAS, 0, 0, U64(0)
    r0, c0 = first // CANVAS, first % CANVAS
    w = 0
    while c0 + w < CANVAS and row[r0 * CANVAS + c0 + w] >= COLOUR_OFFSET:
        w += 1
    h = 0
    while r0 + h < CANVAS and row[(r0 + h) * CANVAS + c0] >= COLOUR_OFFSET:
        h += 1
    key = U64(0)
    for r in range(CANVAS):
        for c in range(CANVAS):
            v = row[r * CANVAS + c]
            inside_r = r0 <= r < r0 + h
            inside_c = c0 <= c < c0 + w
            if inside_r and inside_c:
                if v < COLOUR_OFFSET:
                    return BAD_CANVAS, r0, c0, U64(0)
                key += fa[v - COLOUR_OFFSET] * weights[h, w, r - r0, c - c0]
            elif (r == r0 + h and inside_c) or (c == c0 + w and inside_r):
                if v != EOS:
                    return BAD_CANVAS, r0, c0, U64(0)
            elif v != PAD:
                return BAD_CANVAS, r0, c0, U64(0)
    return 0, r0, c0, key


@nb.njit(cache=True, nogil=True)
def scan_canvases(
    inputs: np.ndarray,
    labels: np.ndarray,
    vocab: int,
    fa: np.ndarray,
    weights: np.ndarray,
    code: np.ndarray,
    offset: np.ndarray,
    in_hash: np.ndarray,
    out_hash: np.ndarray,
) -> None:
    """Per row of a chunk: validity code, the shared offset r0 * 30 + c0, and the content hash of both grids."""
    for i in range(inputs.shape[0]):
        ci, ri, ki, hi = _decode_canvas(inputs[i], vocab, fa, weights)
        co, ro, ko, ho = _decode_canvas(labels[i], vocab, fa, weights)
        code[i] = ci if ci else co
        if code[i] == 0 and (ri != ro or ki != ko):
            code[i] = BAD_OFFSET
        offset[i] = ri * CANVAS + ki
        in_hash[i] = hi
        out_hash[i] = ho


@nb.njit(cache=True, nogil=True)
def view_hashes(grids: np.ndarray, tids: np.ndarray, cols: np.ndarray, wa: np.ndarray, fa: np.ndarray) -> np.ndarray:
    """Family-A content hash of view (tids[i], cols[i]) of grid grids[i], for i in range(len(grids))."""
    out = np.zeros(grids.shape[0], dtype=np.uint64)
    for i in range(grids.shape[0]):
        key = U64(0)
        for c in range(10):
            key += fa[cols[i, c]] * wa[grids[i], tids[i], c]
        out[i] = key
    return out


@nb.njit(cache=True, inline="always")
def pair_key(a: np.uint64, b: np.uint64) -> np.uint64:
    return splitmix(a ^ splitmix(b))


@nb.njit(cache=True, nogil=True)
def pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape[0], dtype=np.uint64)
    for i in range(a.shape[0]):
        out[i] = pair_key(a[i], b[i])
    return out
