# Evaluation: one job per checkpoint, on its own (smaller) resources, running while the next segment trains.


rule evaluate_checkpoint:
    input:
        ckpt="results/runs/{run}/ckpt/epoch_{epoch}.pt",
        verified=verified_dataset,
        config="results/runs/{run}/config.yaml",
    output:
        metrics="results/eval/{run}/epoch_{epoch}/metrics.json",
        submission="results/eval/{run}/epoch_{epoch}/submission.json",
        per_puzzle="results/eval/{run}/epoch_{epoch}/per_puzzle.csv",
        votes="results/eval/{run}/epoch_{epoch}/votes.npz",
    log:
        "logs/evaluate_checkpoint/{run}/epoch_{epoch}.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        gpu=eval_gpus,
    params:
        data=dataset_dir_for_run,
        device=eval_device,
    shell:
        "arcpipe evaluate {input.ckpt} {params.data} --out results/eval/{wildcards.run}/epoch_{wildcards.epoch} "
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
