# Evaluation: one job per checkpoint, on its own (smaller) resources, running while the next segment trains.


rule write_eval_config:
    output:
        paths.EVAL_CONFIG,
    log:
        "logs/write_eval_config/{run}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        resolved=ask.eval_config,  # rewritten when, and only when, this run's evaluation settings change
    script:
        "../workflow/scripts/write_run_config.py"


rule evaluate_checkpoint:
    input:
        ckpt=paths.CKPT,
        verified=ancient_input(ask.verified_dataset),
        config=paths.EVAL_CONFIG,
    output:
        **paths.eval_files(paths.FULL_DIR),
    log:
        "logs/evaluate_checkpoint/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        gpu=ask.eval_resource("gpu"),  # 1 when the run trains on GPUs (runs.<run>.eval_gpus)
        mem_mb=ask.eval_resource("mem_mb"),
        shm_mb=ask.eval_resource("shm_mb"),
        runtime=ask.eval_resource("runtime"),  # sized from the test split (arcpipe.jobs)
    params:
        data=ask.dataset_dir_for_run,
        device=ask.eval_device,
        launch=ask.eval_launch,
    shell:
        "{params.launch} arcpipe evaluate {input.ckpt} {params.data} "
        "--out results/eval/{wildcards.run}/epoch_{wildcards.epoch} "
        "--config {input.config} {params.device} > {log} 2>&1"


# Test-time training of a canvas model (runs.<run>.ttt, arcpipe.eval.ttt): after the run's last checkpoint, job j of
# ttt.jobs fits a copy of it to each of its test tasks (j, j + jobs, ...) and answers them; a job killed after some
# tasks redoes only the others. One collecting rule votes over every job's answers into an evaluation of its own.
rule ttt_job:
    input:
        ckpt=paths.CKPT,
        verified=ancient_input(ask.verified_ttt_dataset),
        run_config=paths.RUN_CONFIG,
        config=paths.EVAL_CONFIG,
    output:
        paths.TTT_JOB,
    log:
        "logs/ttt_job/{run}/epoch_{epoch}/job_{job}.log",
    wildcard_constraints:
        job=r"[0-9]+",
    conda:
        "../envs/arcpipe.yaml"
    # a step is 8 rows: on a CPU one thread does it in ~50 ms, eight threads on two cores took 1-2 s
    threads: 1
    resources:
        gpu=ask.ttt_resource("gpu"),  # one at most: a job fits and answers on one device
        mem_mb=ask.ttt_resource("mem_mb"),
        shm_mb=ask.ttt_resource("shm_mb"),
        runtime=ask.ttt_resource("runtime"),  # covers its share of the test-time training (arcpipe.jobs)
    params:
        data=ask.ttt_dataset_dir,
        device=ask.eval_device,
    shell:
        "arcpipe ttt job {input.ckpt} {params.data} --run-config {input.run_config} --run {wildcards.run} "
        "--job {wildcards.job} --out {output} --config {input.config} {params.device} > {log} 2>&1"


rule ttt_collect:
    input:
        jobs=ask.ttt_jobs_of_run,
        verified=ancient_input(ask.verified_ttt_dataset),
        config=paths.EVAL_CONFIG,
    output:
        **paths.eval_files(paths.TTT_DIR),
    log:
        "logs/ttt_collect/{run}/epoch_{epoch}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    params:
        data=ask.ttt_dataset_dir,
        row=ask.ttt_row,  # the run, or <run>@<dataset> when it answers another dataset's tasks
    shell:
        "arcpipe ttt collect {input.jobs} --dataset {params.data} "
        "--out results/eval/{wildcards.run}/ttt_epoch_{wildcards.epoch} --config {input.config} "
        "--run {params.row} --epoch {wildcards.epoch} > {log} 2>&1"


# evaluation.quick (arcpipe.stopping): every boundary's quick evaluation on a fixed subset of the test tasks, and the
# schedule that decides where the full one (evaluate_checkpoint) is due. Local: draw_quick_tasks reads one file.
rule draw_quick_tasks:
    input:
        verified=ancient_input(ask.verified_dataset),
    output:
        paths.QUICK_TASKS,
    log:
        "logs/draw_quick_tasks/{run}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        data=ask.dataset_dir_for_run,
        settings=ask.quick_settings,  # arcpipe.rule_inputs: share, held-out tasks and seed; a changed share draws again
    script:
        "../workflow/scripts/draw_quick_tasks.py"


rule evaluate_quick:
    input:
        ckpt=paths.CKPT,
        verified=ancient_input(ask.verified_dataset),
        config=paths.EVAL_CONFIG,
        tasks=paths.QUICK_TASKS,
    output:
        **paths.eval_files(paths.QUICK_DIR),
    log:
        "logs/evaluate_quick/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        gpu=ask.eval_resource("gpu"),
        mem_mb=ask.eval_resource("mem_mb"),
        shm_mb=ask.eval_resource("shm_mb"),
        runtime=ask.eval_resource("runtime", quick=True),
    params:
        data=ask.dataset_dir_for_run,
        device=ask.eval_device,
        launch=ask.eval_launch,
    shell:
        "{params.launch} arcpipe evaluate {input.ckpt} {params.data} "
        "--out results/eval/{wildcards.run}/epoch_{wildcards.epoch}/quick "
        "--config {input.config} --quick-tasks {input.tasks} {params.device} > {log} 2>&1"


# a checkpoint: its record decides whether the targets and the report ask for the boundary's full evaluation
# (arcpipe.plan). Local: it reads a few small files.
checkpoint schedule_full:
    input:
        unpack(ask.schedule_inputs),  # the quick evaluations up to {epoch}; a stop rule's decision there
    output:
        paths.SCHEDULE,
    log:
        "logs/schedule_full/{run}/epoch_{epoch}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        settings=ask.schedule_settings,  # a changed full_every schedules again
    script:
        "../workflow/scripts/schedule_full.py"


# evaluation.ensemble_last: K (eval/ensemble.py): the parameter average of a run's last K checkpoints, written as a
# checkpoint of its own and evaluated like the others
rule average_checkpoints:
    input:
        ckpts=ask.last_checkpoints,  # arcpipe.rule_inputs: the run's last {k} epoch checkpoints, oldest first
    output:
        paths.AVERAGED_CKPT,
    log:
        "logs/average_checkpoints/{run}/avg_last{k}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 1
    resources:
        mem_mb=16000,  # a float64 sum of the model and two checkpoints, puzzle embeddings included
        runtime=30,
    script:
        "../workflow/scripts/average_checkpoints.py"


rule evaluate_average:
    input:
        ckpt=paths.AVERAGED_CKPT,
        verified=ancient_input(ask.verified_dataset),
        config=paths.EVAL_CONFIG,
    output:
        **paths.eval_files(paths.AVERAGED_DIR),
    log:
        "logs/evaluate_average/{run}/avg_last{k}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        gpu=ask.eval_resource("gpu"),
        mem_mb=ask.eval_resource("mem_mb"),
        shm_mb=ask.eval_resource("shm_mb"),
        runtime=ask.eval_resource("runtime"),
    params:
        data=ask.dataset_dir_for_run,
        device=ask.eval_device,
        launch=ask.eval_launch,
    shell:
        "{params.launch} arcpipe evaluate {input.ckpt} {params.data} "
        "--out results/eval/{wildcards.run}/avg_last{wildcards.k} "
        "--config {input.config} {params.device} > {log} 2>&1"


rule bundle_kaggle:
    input:
        ckpt=paths.CKPT,
        identifiers=ask.identifiers_for_run,
    output:
        directory(paths.KAGGLE),
    log:
        "logs/bundle_kaggle/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    params:
        settings=CFG.kaggle.model_dump(mode="json"),  # rebuilt when the `kaggle:` settings change
    script:
        "../workflow/scripts/bundle_kaggle.py"
