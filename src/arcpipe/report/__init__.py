"""The report: pass@K tables and learning-curve plots across runs and checkpoints (results/report/).

One module per part, each importing only those above it in this list:

    format.py     every table written as CSV, Markdown and HTML (write_table); labels the tables share
    load.py       everything the report reads, each file once (load_report_inputs -> ReportInputs); RunInfo
    plots.py      the PNGs
    tables.py     pass@K per checkpoint, the run comparison, datasets, learning, pass@K per ACT step, pooled votes
    seeds.py      pass@K over seeds
    selection.py  checkpoint selection on held-out test tasks
    summary.py    the page the HTML report opens on, from the comparison and selection tables
    answers.py    what each evaluation answered: a page per task, the task-by-run index, the folder's front page
    render.py     reads once, builds each table once, writes every file: the rules' and the CLI's entry points
"""
