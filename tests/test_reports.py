"""All-or-nothing output directories."""
import pytest

from simulator.reports import atomic_directory


def test_atomic_directory_replaces_only_on_success(tmp_path):
    target = tmp_path / "run"
    with atomic_directory(target) as staging:
        (staging / "a.txt").write_text("first")
    assert (target / "a.txt").read_text() == "first"
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target) as staging:
            (staging / "a.txt").write_text("half")
            raise KeyboardInterrupt
    assert (target / "a.txt").read_text() == "first"
    with atomic_directory(target) as staging:
        (staging / "b.txt").write_text("second")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
