"""The harness keeps live memory reports for CI (``SPECINIT_TEST_KEEP_LIVE_REPORTS``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness.reports import live_reports


def _launch_dir(tmp_path: Path, ranks: int) -> Path:
    source = tmp_path / "specinit"
    source.mkdir()
    for rank in range(ranks):
        (source / f"memory-rank{rank}.json").write_text(json.dumps({"tp_rank": rank}))
    (source / "unrelated.json").write_text("{}")
    return source


def test_reports_are_copied_per_launch_under_the_test_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep = tmp_path / "keep"
    monkeypatch.setenv(live_reports.KEEP_ENV, str(keep))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test/cpu/test_x.py::test_y[EAGLE3 p=1] (call)")
    env = {live_reports.PLUGIN_REPORT_DIR_ENV: str(_launch_dir(tmp_path, 2))}

    first = live_reports.keep_live_reports(env, "engine-abc")
    second = live_reports.keep_live_reports(env, "engine-abc")

    assert first == keep / "test_x.py_test_y_EAGLE3_p=1"
    assert second == keep / "test_x.py_test_y_EAGLE3_p=1-2"
    for folder in (first, second):
        assert sorted(p.name for p in folder.iterdir()) == [
            "memory-rank0.json",
            "memory-rank1.json",
        ]
        assert json.loads((folder / "memory-rank1.json").read_text()) == {"tp_rank": 1}


def test_nothing_is_kept_when_unset_or_when_the_launch_wrote_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {live_reports.PLUGIN_REPORT_DIR_ENV: str(_launch_dir(tmp_path, 1))}
    monkeypatch.delenv(live_reports.KEEP_ENV, raising=False)
    assert live_reports.keep_live_reports(env, "x") is None

    keep = tmp_path / "keep"
    monkeypatch.setenv(live_reports.KEEP_ENV, str(keep))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        live_reports.keep_live_reports({live_reports.PLUGIN_REPORT_DIR_ENV: str(empty)}, "x")
        is None
    )
    assert live_reports.keep_live_reports({}, "x") is None
    assert not keep.exists()
