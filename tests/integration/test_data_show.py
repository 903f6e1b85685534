"""`arcpipe data show` prints statistics per split and subset and renders a task's views as text or PNG."""

from pathlib import Path

import numpy as np
import pytest

from arcpipe.cli import main
from arcpipe.config import DatasetConfig, KaggleSource
from arcpipe.data.build import build_dataset
from arcpipe.data.dataset import load_split
from arcpipe.data.show import decode_canvas

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    cfg = DatasetConfig(
        sources=[KaggleSource(kaggle=str(DATA / "arc-tiny"), subsets=["training", "evaluation", "concept"])],
        test_set="evaluation",
        num_aug=100,
    )
    out = tmp_path_factory.mktemp("show") / "tiny"
    build_dataset(cfg, out)
    return out


def test_statistics_per_split_and_subset(built, capsys):
    assert main(["data", "show", str(built)]) == 0
    text = capsys.readouterr().out
    assert "train: 4 groups, 375 puzzles" in text
    assert "training: 2 groups, 173 puzzles" in text  # 8be77c9e has 72 views, 0d3d703e 101
    assert "test: 1 groups, 101 puzzles, 101 examples" in text
    assert "1 groups short (smallest 72)" in text


def test_text_rendering_of_a_task(built, capsys):
    assert main(["data", "show", str(built), "66e6c45b", "--num-views", "1"]) == 0
    text = capsys.readouterr().out
    assert "== train: 66e6c45b  (t0, colours 0123456789)" in text
    assert text.count("== test: 66e6c45b") == 2  # the original and one view
    assert ".34." in text  # the original first input, 0 drawn as '.'


def test_png_rendering(built, tmp_path, capsys):
    png = tmp_path / "views.png"
    assert main(["data", "show", str(built), "66e6c45b", "--png", str(png), "--num-views", "2"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_task_is_a_one_line_error(built, capsys):
    assert main(["data", "show", str(built), "nosuchtask"]) == 2
    assert "no task 'nosuchtask' in this dataset" in capsys.readouterr().err


def test_decode_canvas_inverts_translation(built):
    split = load_split(built, "train")
    for row in range(0, len(split.inputs), 97):
        grid = decode_canvas(split.inputs[row])
        assert grid.size and grid.max() <= 9
        assert np.count_nonzero(split.inputs[row] >= 2) == grid.size
