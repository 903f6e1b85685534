"""`arcpipe doctor`: can this machine run these runs, which code paths run, and how fast. One screen, any machine.

    arcpipe doctor                                             # every full run of config/config.yaml
    arcpipe doctor --run smoke-trm                             # one run (repeat --run for more)
    arcpipe doctor --config config/config.yaml config/rehearsal.yaml   # overlays, merged as Snakemake does

Machine: torch, CUDA and driver versions, the GPUs and their memory, NCCL and gloo, whether torch.compile works,
/dev/shm, W&B mode and whether a key is present (never its value). Per run: the attention path and the AdamATan2
backend that will run and why; /dev/shm against what the run's GPU processes need; one real training step and one
evaluation step (eager) at the run's per-device micro-batch and dtype on synthetic batches of the dataset's shape,
with examples/s and peak memory (a `ttt:` run's test-time-training step too, as its jobs step it:
eval/ttt_measure.py); on CUDA, the largest micro-batch that fits this GPU and the `micro_batch_size` that reaches
the run's global batch with it. Exit status 1 when a run cannot work here, one line per reason.
`run_preflight` records the same backends (`backends`) in preflight.json.

One module per part of the check, each importing only those above it:

    shm.py        /dev/shm: what a run's GPU processes need against what this node has
    backends.py   attention path, optimizer backend, torch.compile check, optional kernels' first calls
    machine.py    the machine's facts (`environment`) and its rows
    measure.py    a training step, an evaluation pass, the largest micro-batch that fits (out of memory included)
    run.py        one run: `check_run`, its rows and problems
    report.py     the command: `doctor`
"""

from arcpipe.doctor.backends import attention_path, backends, first_calls, optimizer_path
from arcpipe.doctor.machine import environment, machine_rows
from arcpipe.doctor.measure import eval_figures, fitting_micro_batch, largest_micro_batch, step_figures
from arcpipe.doctor.report import doctor, load_configs
from arcpipe.doctor.run import RunCheck, check_run
from arcpipe.doctor.shm import SHM_MB_PER_GPU, shm_need_mb, shm_problem

__all__ = [
    "SHM_MB_PER_GPU",
    "RunCheck",
    "attention_path",
    "backends",
    "check_run",
    "doctor",
    "environment",
    "eval_figures",
    "first_calls",
    "fitting_micro_batch",
    "largest_micro_batch",
    "load_configs",
    "machine_rows",
    "optimizer_path",
    "shm_need_mb",
    "shm_problem",
    "step_figures",
]
