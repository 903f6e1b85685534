# Training: each run is a static chain of segments; boundary k's files are declared outputs of its job.


rule write_run_config:
    output:
        paths.RUN_CONFIG,
    log:
        "logs/write_run_config/{run}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        resolved=ask.run_config,  # rewritten when, and only when, this run's training config changes
    script:
        "../workflow/scripts/write_run_config.py"


rule run_preflight:
    input:
        verified=ancient_input(ask.verified_dataset),  # re-verifying the same data re-runs nothing
        config=paths.RUN_CONFIG,
    output:
        paths.PREFLIGHT,
    log:
        "logs/preflight/{run}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 4
    resources:
        gpu=ask.preflight_resource("gpu"),  # one GPU when the run trains on GPUs: its out-of-memory shows here
        mem_mb=ask.preflight_resource("mem_mb"),
        shm_mb=ask.preflight_resource("shm_mb"),
        runtime=ask.preflight_resource("runtime"),
    params:
        data=ask.dataset_dir_for_run,
    shell:
        "arcpipe train --config {input.config} --run {wildcards.run} --data {params.data} "
        "--out results/runs/{wildcards.run} --preflight {output} > {log} 2>&1"


# runs.<run>.gate: another run's evaluation must reach a threshold before this run trains (arcpipe.gates). A
# checkpoint: the record decides which of the run's files the targets ask for (arcpipe.plan), so a gate that
# falls short is a decision, not a failed job. Local: it reads one small file.
checkpoint check_gate:
    input:
        metrics=ask.gate_metrics,  # arcpipe.rule_inputs: the gate run's metrics.json at gate.epoch, else its last
    output:
        paths.GATE,
    log:
        "logs/check_gate/{run}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        gate=ask.gate_settings,  # a changed gate (metric, min, epoch) is checked again
        epoch=ask.gate_checkpoint,
    script:
        "../workflow/scripts/check_gate.py"


# runs.<run>.stop: end a run before its last epoch once its answer is in (arcpipe.stopping). A checkpoint at the end
# of each training segment but the last: its record decides which of the run's later files the targets ask for
# (arcpipe.plan). Local: it reads a few small files.
checkpoint decide_boundary:
    input:
        unpack(ask.decision_inputs),  # the segment's evaluations; the previous decision, whose history this extends
    output:
        paths.DECISION,
    log:
        "logs/decide_boundary/{run}/epoch_{epoch}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        rule=ask.stop_rule,  # a raised target or patience decides again, and the plan may grow
        settings=ask.decision_settings,
    script:
        "../workflow/scripts/decide_boundary.py"


checkpoint decide_rung:
    input:
        unpack(ask.rung_inputs),  # the arms still training: their full evaluations at the rung; the rung before
    output:
        paths.RUNG,
    log:
        "logs/decide_rung/{sweep}/epoch_{epoch}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        halving=ask.halving_settings,  # a changed eta or metric decides again, and the plan may grow
    script:
        "../workflow/scripts/decide_rung.py"


rule train_segment:
    input:
        unpack(ask.previous_boundary),  # the previous boundary's ckpt + state; none for the first
        verified=ancient_input(ask.verified_dataset),  # the trainer checks the data's identity and verification
        config=ancient(paths.RUN_CONFIG),  # changed training fields stop the plan (arcpipe.keep)
        gate=ask.first_segment_gate,  # full runs: the preflight passed
        planned=ask.planned_boundary,  # waits for the gate and the stop decision before it; no file (arcpipe.plan)
    output:
        ckpt=paths.CKPT,  # evaluated; kept
        state=temp(paths.STATE),  # to continue; only the latest survives
        metrics=paths.TRAIN_METRICS,
    log:
        "logs/train_segment/{run}/epoch_{epoch}.log",
    group:
        ask.segment_group
    conda:
        "../envs/arcpipe.yaml"
    resources:
        gpu=ask.shape_resource("gpu"),  # GPUs of a one-node job; 0 for several nodes (slurm_extra asks per node)
        nodes=ask.shape_resource("nodes"),
        gpus_per_node=ask.shape_resource("gpus_per_node"),
        mem_mb=ask.shape_resource("mem_mb"),
        shm_mb=ask.shape_resource("shm_mb"),  # memory-backed /dev/shm on ICE
        tasks=ask.shape_resource("tasks"),
        mpi=ask.shape_resource("mpi"),
        slurm_extra=ask.shape_resource("slurm_extra"),
        runtime=ask.runtime_for_run,  # minutes; a profile's set-resources may override it
    params:
        segment=ask.segment_index,  # the launcher reads the run's shape from the config when the job starts
        data=ask.dataset_dir_for_run,
    # `>>`: on ICE every pod of a multi-node job runs this line; `>` in a late pod would truncate pod 0's log
    # (arcpipe.launch moves the other pods' output to <log>.pod<k>)
    shell:
        "python -m arcpipe.launch --config {input.config} --run {wildcards.run} --segment {params.segment} -- "
        "arcpipe train --config {input.config} --run {wildcards.run} --data {params.data} "
        "--out results/runs/{wildcards.run} --until-epoch {wildcards.epoch} "
        "--deadline {resources.runtime}m >> {log} 2>&1"


# After the plan, before any job runs (never in dry runs or inside cluster jobs): record the driver's executor
# (arcpipe.driver), and stop if a training job would re-run over an existing checkpoint (arcpipe.keep). Nothing
# has been deleted at this point.
onstart:
    on_driver_start(workflow)
