"""Nothing loaded runs code: a file crafted to run code when deserialised is refused by every loader, in one line
naming the file and what to do, and its code never runs (the marker file it would write never appears)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from arcpipe.config import ArcpipeError, load_config, load_evaluation_config
from arcpipe.data.dataset import load_split
from arcpipe.data.verify import verify_dataset
from arcpipe.eval.write import VOTES_FORMAT, load_votes
from arcpipe.models.io import load_weights, read_weights
from arcpipe.models.upstream_io import import_upstream
from arcpipe.safeload import check_plain
from arcpipe.train.checkpoint import STATE_FORMAT, load_state, save_atomic


class RunsCode:
    """Unpickled without restrictions, this writes `marker`: the stand-in for any code an attacker would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "marker"


def _refused(err: pytest.ExceptionInfo, path: Path, fix: str) -> None:
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: "), message
    assert fix in message, message


def test_the_crafted_payload_does_run_code_when_fully_unpickled(marker: Path) -> None:
    # the control: without this, a refusal below could be a payload that never worked
    pickle.loads(pickle.dumps(RunsCode(marker)))
    assert marker.read_text() == "ran"


def test_training_state_with_an_object_is_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "state" / "epoch_2.pt"
    path.parent.mkdir()
    torch.save({"format": STATE_FORMAT, "torch_rng": RunsCode(marker)}, path)
    with pytest.raises(ArcpipeError, match="refused: this training state holds Python objects") as err:
        load_state(path)
    _refused(err, path, "delete it and re-run the segment that wrote it")
    assert not marker.exists()


def test_raw_pickle_as_training_state_is_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "side.pt"
    path.write_bytes(pickle.dumps({"format": STATE_FORMAT, "x": RunsCode(marker)}, protocol=2))
    with pytest.raises(ArcpipeError) as err:
        load_state(path)
    _refused(err, path, "delete it and re-run the segment that wrote it")
    assert not marker.exists()


def test_training_state_of_tensors_and_plain_values_round_trips(tmp_path: Path) -> None:
    state = {
        "format": STATE_FORMAT,
        "position": {"pass_index": 1, "batch": 0, "step": 5, "wall_seconds": 1.5, "extra": {}},
        "optimizers": [{"state": {0: {"step": torch.tensor(5.0)}}, "param_groups": [{"betas": (0.9, 0.95)}]}],
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": None,
    }
    save_atomic(state, tmp_path / "s.pt")
    loaded = load_state(tmp_path / "s.pt")
    assert torch.equal(loaded["torch_rng"], state["torch_rng"])
    assert loaded["optimizers"][0]["param_groups"][0]["betas"] == (0.9, 0.95)


@pytest.mark.parametrize(
    "value",
    [np.uint64(7), np.zeros(2), np.random.get_state(), RunsCode(Path("x"))],
    ids=["numpy-scalar", "numpy-array", "numpy-legacy-rng-state", "object"],
)
def test_a_state_the_loader_would_refuse_is_not_written(tmp_path: Path, value: object) -> None:
    with pytest.raises(TypeError, match=r"state\['rng'\]\[0\].*: a .* would be refused on load"):
        save_atomic({"format": STATE_FORMAT, "rng": [value]}, tmp_path / "s.pt")
    assert not (tmp_path / "s.pt").exists()


def test_check_plain_accepts_what_torch_state_dicts_hold() -> None:
    check_plain({"w": torch.nn.Parameter(torch.ones(2)), "shape": torch.Size([2]), "t": (1, 2.0, "a", None, True)})


def test_model_checkpoint_with_an_object_is_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "epoch_2.pt"
    torch.save({"format": "arcpipe-weights/1", "model": {"w": torch.ones(1)}, "arch_config": RunsCode(marker)}, path)
    for load in (read_weights, lambda p: load_weights(p, "cpu")):
        with pytest.raises(ArcpipeError, match="refused: this checkpoint holds Python objects") as err:
            load(path)
        _refused(err, path, "copy it again or rerun the step that wrote it")
    assert not marker.exists()


def test_upstream_config_with_a_python_tag_is_refused(tmp_path: Path, marker: Path) -> None:
    ckpt, config = tmp_path / "step_7", tmp_path / "all_config.yaml"
    torch.save({"w": torch.ones(1)}, ckpt)
    config.write_text(f"arch: !!python/object/apply:exec [\"open('{marker}', 'w').write('ran')\"]\n")
    with pytest.raises(ArcpipeError, match=r"refused: only plain values are read") as err:
        import_upstream("trm", ckpt, config, tmp_path / "w.pt")
    _refused(err, config, "remove the tag")
    assert not marker.exists()


def test_workflow_config_with_a_python_tag_is_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"datasets: !!python/object/apply:exec [\"open('{marker}', 'w').write('ran')\"]\nruns: {{}}\n")
    with pytest.raises(ArcpipeError, match=r"python/object/apply:exec' at line 1, column 11 refused") as err:
        load_config(path)
    _refused(err, path, "remove the tag")
    assert not marker.exists()


def _dataset_with_a_crafted_array(tiny_dataset: Path, tmp_path: Path, marker: Path) -> Path:
    dataset = tmp_path / "tiny"
    shutil.copytree(tiny_dataset, dataset)
    crafted = np.empty(1, dtype=object)
    crafted[0] = RunsCode(marker)
    np.save(dataset / "train" / "all__puzzle_identifiers.npy", crafted, allow_pickle=True)
    return dataset


def test_dataset_array_of_objects_is_refused(tiny_dataset: Path, tmp_path: Path, marker: Path) -> None:
    dataset = _dataset_with_a_crafted_array(tiny_dataset, tmp_path, marker)
    with pytest.raises(ArcpipeError, match="Object arrays cannot be loaded") as err:
        load_split(dataset, "train")
    _refused(err, dataset / "train" / "all__puzzle_identifiers.npy", "rebuild the dataset")
    assert not marker.exists()


def test_verify_reports_a_dataset_array_of_objects(tiny_dataset: Path, tmp_path: Path, marker: Path) -> None:
    report = verify_dataset(_dataset_with_a_crafted_array(tiny_dataset, tmp_path, marker))
    assert not report["ok"]
    assert "all__puzzle_identifiers.npy: missing or unreadable" in str(report)
    assert not marker.exists()


def test_votes_with_an_object_array_are_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "votes.npz"
    crafted = np.empty(1, dtype=object)
    crafted[0] = RunsCode(marker)
    np.savez(path, format=np.array(VOTES_FORMAT), task_names=crafted)
    with pytest.raises(ArcpipeError, match="Object arrays cannot be loaded") as err:
        load_votes(path)
    _refused(err, path, "re-evaluate")
    assert not marker.exists()


def test_evaluation_config_with_a_python_tag_is_refused(tmp_path: Path, marker: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"evaluation: !!python/object/apply:exec [\"open('{marker}', 'w').write('ran')\"]\n")
    with pytest.raises(ArcpipeError, match=r"not valid YAML \(tag .*python/object/apply:exec.* refused") as err:
        load_evaluation_config(path)
    _refused(err, path, "remove the tag")
    assert not marker.exists()
