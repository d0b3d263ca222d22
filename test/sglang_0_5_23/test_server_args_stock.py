"""Drop-in on 0.5.20 (0.5.23: test/shared/test_fidelity_matrix.py): with the plugin on, the
Llama-3.1 + EAGLE3 recipe's resolved ``ServerArgs`` equal stock's field by field."""

from __future__ import annotations

from typing import Any

import pytest
from harness.matrices import fidelity
from harness.reports.config_snapshot import snapshot_differences

ROW = next(row for row in fidelity.ROWS if row.key == "llama31-eagle3")


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    request = fidelity.probe_request((ROW,))
    return fidelity.run_probe(request, tmp_path_factory.mktemp("probe0520"))


def test_server_args_equal_stock(probe: dict[tuple[str, str], dict[str, Any]]) -> None:
    on, off = probe[(ROW.key, "on")], probe[(ROW.key, "off")]
    for result in (on, off):
        assert "error" not in result, result["error"]["traceback"]
    assert fidelity.server_args_differences(on, off) == {}
    assert fidelity.server_args_differences(on, off, "server_args_input") == {}
    assert on["env_set_by_server_args"] == off["env_set_by_server_args"]
    # What was compared includes what resolution decides (the automatic fraction).
    assert off["server_args"]["speculative_algorithm"] == "EAGLE3"
    assert 0 < off["server_args"]["mem_fraction_static"] < 1
    assert snapshot_differences(on["target_before_draft"], off["target_before_draft"]) == []
    assert snapshot_differences(on["target_after_draft"], off["target_after_draft"]) == []
