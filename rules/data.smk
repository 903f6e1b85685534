# Data stage: build a dataset declared in config, then verify it; training takes only verified datasets.


rule build_dataset:
    input:
        re_arc=re_arc_files,  # common.smk: RE-ARC's task files, so that a changed one rebuilds; [] without RE-ARC
    output:
        manifest="results/data/{dataset}/build.json",
        identifiers="results/data/{dataset}/identifiers.json",
        test_puzzles="results/data/{dataset}/test_puzzles.json",
        train=directory("results/data/{dataset}/train"),
        test=directory("results/data/{dataset}/test"),
    log:
        "logs/build_dataset/{dataset}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        mem_mb=16000,
        runtime=120,
    params:
        dataset=dataset_config,  # rebuilt when, and only when, this dataset's config changes
    script:
        "../workflow/scripts/build_dataset.py"


rule verify_dataset:
    input:
        manifest="results/data/{dataset}/build.json",
        train="results/data/{dataset}/train",
        test="results/data/{dataset}/test",
    output:
        "results/data/{dataset}/verify.json",
    log:
        "logs/verify_dataset/{dataset}.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=8000,
        runtime=30,
    script:
        "../workflow/scripts/verify_dataset.py"
