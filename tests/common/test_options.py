"""The number and path types every command's options share: what they accept, and the one line that names the fix
for what they refuse."""
import argparse
import os

import pytest

from experiments.common.options import positive, probability, threshold, writable


@pytest.mark.parametrize("text,value", [("0.05", 0.05), ("5%", 0.05), (" 3% ", 0.03), ("0", 0.0)])
def test_a_threshold_is_a_fraction_or_a_percentage(text, value):
    assert threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text,said", [("5", "would be 500%: use 0.05 or 5%"), ("abc", "is not a number"),
                                       ("nan", "is not a finite number"), ("100%", "not a change between 0 and 100%"),
                                       ("-1%", "not a change between 0 and 100%")])
def test_a_threshold_refused_names_the_fix(text, said):
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        threshold(text)


def test_a_probability_lies_strictly_between_0_and_1():
    alpha = probability("--alpha")
    assert alpha("0.01") == 0.01
    for text in ("0", "1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="--alpha .* is not between 0 and 1: e.g. --alpha 0.05"):
            alpha(text)


def test_positive_numbers_whole_or_not_above_or_at_their_least():
    pairs = positive("--pairs", "6", int)
    assert pairs("6") == 6 and isinstance(pairs("6.0"), int)
    with pytest.raises(argparse.ArgumentTypeError, match="is not a whole number: e.g. --pairs 6"):
        pairs("2.5")
    with pytest.raises(argparse.ArgumentTypeError, match="must be above 0"):
        pairs("0")
    port = positive("--port", "5000", int, least=1, strict=False)
    assert port("1") == 1
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1"):
        port("0")


def test_writable_paths_are_checked_before_anything_runs(tmp_path):
    folder, file = writable("--issue", directory=True), writable("--markdown", directory=False)
    assert folder(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"  # made later, under a writable one
    (tmp_path / "f.md").write_text("")
    assert file(str(tmp_path / "f.md")) == tmp_path / "f.md"
    with pytest.raises(argparse.ArgumentTypeError, match="is a file: name a folder"):
        folder(str(tmp_path / "f.md"))
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder: name a file"):
        file(str(tmp_path))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(argparse.ArgumentTypeError, match="is not a folder this user can write into"):
            folder(str(locked / "x"))
