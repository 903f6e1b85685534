# Evaluation: one job per checkpoint, on its own (smaller) resources, running while the next segment trains.


rule write_eval_config:
    output:
        "results/eval/{run}/evaluation.yaml",
    log:
        "logs/write_eval_config/{run}.log",
    localrule: True
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        resolved=eval_config,  # rewritten when, and only when, this run's evaluation settings change
    script:
        "../workflow/scripts/write_run_config.py"


rule evaluate_checkpoint:
    input:
        ckpt="results/runs/{run}/ckpt/epoch_{epoch}.pt",
        verified=ancient_input(verified_dataset),
        config="results/eval/{run}/evaluation.yaml",
    output:
        metrics="results/eval/{run}/epoch_{epoch}/metrics.json",
        submission="results/eval/{run}/epoch_{epoch}/submission.json",
        per_puzzle="results/eval/{run}/epoch_{epoch}/per_puzzle.csv",
        votes="results/eval/{run}/epoch_{epoch}/votes.npz",
    log:
        "logs/evaluate_checkpoint/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        gpu=eval_resource("gpu"),  # 1 when the run trains on GPUs (runs.<run>.eval_gpus)
        mem_mb=eval_resource("mem_mb"),
        shm_mb=eval_resource("shm_mb"),
        runtime=eval_resource("runtime"),  # sized from the test split (arcpipe.jobs)
    params:
        data=dataset_dir_for_run,
        device=eval_device,
        launch=eval_launch,
    shell:
        "{params.launch} arcpipe evaluate {input.ckpt} {params.data} "
        "--out results/eval/{wildcards.run}/epoch_{wildcards.epoch} "
        "--config {input.config} {params.device} > {log} 2>&1"


rule bundle_kaggle:
    input:
        ckpt="results/runs/{run}/ckpt/epoch_{epoch}.pt",
        identifiers=identifiers_for_run,
    output:
        directory("results/kaggle/{run}/epoch_{epoch}"),
    log:
        "logs/bundle_kaggle/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    script:
        "../workflow/scripts/bundle_kaggle.py"
