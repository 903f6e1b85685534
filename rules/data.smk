# Data stage: build a dataset declared in config, then verify it; training takes only verified datasets.


rule build_dataset:
    input:
        re_arc=ask.re_arc_files,  # arcpipe.rule_inputs: RE-ARC's task files, so that a changed one rebuilds; [] without RE-ARC
    output:
        manifest=paths.DATA_MANIFEST,
        identifiers=paths.DATA_IDENTIFIERS,
        test_puzzles=paths.DATA_TEST_PUZZLES,
        train=directory(paths.DATA_TRAIN),
        test=directory(paths.DATA_TEST),
    log:
        "logs/build_dataset/{dataset}.log",
    conda:
        "../envs/arcpipe.yaml"
    threads: 8
    resources:
        mem_mb=16000,
        runtime=120,
    params:
        dataset=ask.dataset_config,  # rebuilt when, and only when, this dataset's config changes
    script:
        "../workflow/scripts/build_dataset.py"


rule verify_dataset:
    input:
        manifest=paths.DATA_MANIFEST,
        train=paths.DATA_TRAIN,
        test=paths.DATA_TEST,
    output:
        paths.DATA_VERIFIED,
    log:
        "logs/verify_dataset/{dataset}.log",
    conda:
        "../envs/arcpipe.yaml"
    resources:
        mem_mb=8000,
        runtime=30,
    script:
        "../workflow/scripts/verify_dataset.py"
