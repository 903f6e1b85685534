"""The sparse SignSGD update under a real 2-process gloo torchrun equals the single-process update.

Each rank runs 2 micro-batches of 3 rows (its own slice of a 12-row global batch) forward and backward, then one
SignSGD step that all-gathers the rows of both ranks; the result must equal one process stepping on all 12 rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

WORKER = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    from arcpipe.models.sparse_embedding import SparseEmbedding
    from arcpipe.optim import SparseSignSGD

    out = sys.argv[1]
    torch.manual_seed(0)
    weights = torch.randn(20, 8)
    ids = torch.tensor([3, 7, 3, 11, 7, 1, 3, 19, 0, 7, 12, 12], dtype=torch.int32)
    coeff = torch.randn(12, 8)

    def step(rows, micro):
        emb = SparseEmbedding(20, 8, batch_size=micro, cast_to=torch.float32)
        with torch.no_grad():
            emb.weights.copy_(weights)
        emb.train()
        opt = SparseSignSGD(emb, lr=0.1, weight_decay=0.2)
        for start in range(rows.start, rows.stop, micro):
            sl = slice(start, start + micro)
            (emb(ids[sl]) * coeff[sl]).sum().backward()
        opt.step()
        opt.zero_grad()
        return emb.weights

    if len(sys.argv) > 2:  # single process, one batch of all rows
        torch.save(step(range(0, 12), 12), out)
    else:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        w = step(range(rank * 6, rank * 6 + 6), 3)
        if rank == 0:
            torch.save(w, out)
        dist.destroy_process_group()
    """
)


@pytest.mark.slow  # 3 torch imports on 2 busy cores
def test_two_process_gloo_update_equals_single_process(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single, multi = tmp_path / "single.pt", tmp_path / "multi.pt"
    subprocess.run([sys.executable, str(script), str(single), "single"], check=True, env=env, timeout=120)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(multi),
        ],
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    a, b = torch.load(single), torch.load(multi)
    assert torch.equal(a, b)
    torch.manual_seed(0)
    assert not torch.equal(a, torch.randn(20, 8))  # something moved
