"""Numba kernels of the dataset builder and verifier: upstream's RNG stream, view hashing, augmentation search,
translation offsets, canvas rendering, and decoding canvases back into grids.

Every kernel is serial and releases the GIL (`nogil`); callers run them on disjoint ranges in a thread pool
(`in_threads`), so a result never depends on the number of threads and nothing pays numba's parallel compile.

Grids live in one flat uint8 array `cells` with per-grid offset/height/width. A view of a grid is a dihedral
transform id `t` and a colour table `col` (10 entries, col[0] == 0); views are compared through two 64-bit
hashes of their content, which are linear in the per-colour sums `W[g, t, c]` of random position weights, so a
candidate view of a task costs O(pairs x 10) to hash instead of O(cells).

One module per family of kernels, each importing only those above it:

    threads.py    in_threads, ranges: kernel calls on a thread pool
    mt19937.py    upstream's legacy MT19937 stream (mt_shuffled, mt_draws)
    splitmix.py   the splitmix64 mixer and the fast mode's counter-based streams (stream_key)
    dihedral.py   the 8 dihedral transforms as strided reads (view_of)
    hashing.py    the two view-hash families (SALT_A, SALT_B, colour_weights, colour_factors)
    keyset.py     the open-addressing set of 128-bit view keys (table_size)
    search.py     augmentation search (search_exact, search_fast)
    canvas.py     the 30 x 30 token canvas: a split's rows and their rendering (layout_rows, render)
    offsets.py    translation offsets on the canvas (offsets_exact, offsets_fast)
    verify.py     the verifier's kernels: decode canvases and hash them (scan_canvases, view_hashes, pair_keys)

The builder and verifier use them through this package (`from arcpipe.data import _kernels as K`).
"""

from arcpipe.data._kernels.canvas import CANVAS, COLOUR_OFFSET, EOS, PAD, layout_rows, render
from arcpipe.data._kernels.dihedral import view_of
from arcpipe.data._kernels.hashing import SALT_A, SALT_B, colour_factors, colour_weights
from arcpipe.data._kernels.keyset import table_size
from arcpipe.data._kernels.mt19937 import mt_draws, mt_shuffled
from arcpipe.data._kernels.offsets import offsets_exact, offsets_fast
from arcpipe.data._kernels.search import search_exact, search_fast
from arcpipe.data._kernels.splitmix import stream_key
from arcpipe.data._kernels.threads import in_threads, ranges
from arcpipe.data._kernels.verify import (
    BAD_CANVAS,
    BAD_OFFSET,
    BAD_TOKEN,
    pair_key,
    pair_keys,
    position_table,
    scan_canvases,
    view_hashes,
)

__all__ = [
    "BAD_CANVAS",
    "BAD_OFFSET",
    "BAD_TOKEN",
    "CANVAS",
    "COLOUR_OFFSET",
    "EOS",
    "PAD",
    "SALT_A",
    "SALT_B",
    "colour_factors",
    "colour_weights",
    "in_threads",
    "layout_rows",
    "mt_draws",
    "mt_shuffled",
    "offsets_exact",
    "offsets_fast",
    "pair_key",
    "pair_keys",
    "position_table",
    "ranges",
    "render",
    "scan_canvases",
    "search_exact",
    "search_fast",
    "stream_key",
    "table_size",
    "view_hashes",
    "view_of",
]
