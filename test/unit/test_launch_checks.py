"""The launcher-side refusals (``sglang_specinit.launch_checks``), on plain values and files."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sglang_specinit import launch_checks
from sglang_specinit.dataclass_args import launch_checks as launch_checks_0513
from sglang_specinit.launch_checks import LaunchCheckError


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1, None, 0.01, 0.88, 0.999])
def test_fraction_outside_the_open_unit_interval_is_refused(fraction: float | None) -> None:
    if fraction is not None and not 0 < fraction < 1:
        with pytest.raises(LaunchCheckError, match=rf"--mem-fraction-static {fraction} is outside"):
            launch_checks.check_mem_fraction_static(fraction)
    else:
        launch_checks.check_mem_fraction_static(fraction)


@pytest.mark.parametrize(
    ("tokens", "page", "refused"),
    [
        (8, 16, True),
        (15, 16, True),
        (16, 16, False),
        (6, 1, True),
        (7, 1, False),
        (None, 64, False),
    ],
)
def test_max_total_tokens_must_leave_one_servable_page(
    tokens: int | None, page: int, refused: bool
) -> None:
    if refused:
        with pytest.raises(LaunchCheckError, match=f"--max-total-tokens {tokens} leaves no KV"):
            launch_checks.check_max_total_tokens(tokens, page)
    else:
        launch_checks.check_max_total_tokens(tokens, page)


def test_max_total_tokens_message_names_the_smallest_cap_that_works() -> None:
    with pytest.raises(LaunchCheckError, match="Pass --max-total-tokens 16 or more") as info:
        launch_checks.check_max_total_tokens(8, 16)
    launch_checks.check_max_total_tokens(16, 16)  # the value the message names passes
    assert "--page-size 16" in str(info.value)


def write_shard(path: Path, data_bytes: int = 64) -> None:
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [data_bytes // 2], "data_offsets": [0, data_bytes]}}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)


def test_shard_problems_are_found_from_header_and_size(tmp_path: Path) -> None:
    shard = tmp_path / "model.safetensors"
    write_shard(shard)
    assert launch_checks.safetensors_problem(str(shard)) is None
    # Beside model.safetensors a consolidated file is never opened by SGLang.
    (tmp_path / "consolidated.safetensors").write_bytes(b"\0" * 3)
    assert launch_checks.loaded_shards(str(tmp_path)) == ["model.safetensors"]
    launch_checks.check_draft_shards(str(tmp_path))
    full = shard.read_bytes()
    shard.write_bytes(full[:-10])
    assert "truncated" in launch_checks.safetensors_problem(str(shard))
    shard.write_bytes(full[:5])
    assert "shorter than a safetensors header" in launch_checks.safetensors_problem(str(shard))
    shard.write_bytes(full[:8] + b"\xff" * (len(full) - 8))
    assert "not readable" in launch_checks.safetensors_problem(str(shard))
    shard.write_bytes(struct.pack("<Q", 1 << 40) + full[8:])
    assert "header claims" in launch_checks.safetensors_problem(str(shard))
    with pytest.raises(LaunchCheckError, match=f"draft checkpoint file {shard} cannot be loaded"):
        launch_checks.check_draft_shards(str(tmp_path))


def test_only_the_shards_the_loader_reads_are_checked(tmp_path: Path) -> None:
    write_shard(tmp_path / "model-00001-of-00002.safetensors")
    write_shard(tmp_path / "model-00002-of-00002.safetensors")
    (tmp_path / "consolidated.safetensors").write_bytes(b"\0" * 3)  # never opened by SGLang
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (tmp_path / launch_checks.SAFETENSORS_INDEX).write_text(json.dumps(index))
    launch_checks.check_draft_shards(str(tmp_path))
    # A shard the index names is checked.
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 3)
    with pytest.raises(LaunchCheckError, match="model-00002-of-00002.safetensors cannot be"):
        launch_checks.check_draft_shards(str(tmp_path))


def configs(tmp_path: Path, target: dict, draft: dict) -> tuple[Path, Path]:
    t, d = tmp_path / "target", tmp_path / "draft"
    for directory, config in ((t, target), (d, draft)):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
    return t, d


def test_draft_input_width_must_be_the_targets_hidden_size(tmp_path: Path) -> None:
    t, d = configs(tmp_path, {"hidden_size": 64, "vocab_size": 100}, {"hidden_size": 96})
    with pytest.raises(LaunchCheckError, match=rf"draft hidden_size 96 \({d}/config.json\)"):
        launch_checks.check_draft_fits_target(str(t), str(d))
    (d / "config.json").write_text(json.dumps({"hidden_size": 64, "target_hidden_size": 32}))
    with pytest.raises(LaunchCheckError, match="draft target_hidden_size 32") as info:
        launch_checks.check_draft_fits_target(str(t), str(d))
    assert f"target's hidden_size 64 ({t}/config.json)" in str(info.value)
    # An EAGLE3 draft narrower than its target, declaring the target's width: SGLang's draft
    # model reads target_hidden_size, and stock starts it.
    (d / "config.json").write_text(json.dumps({"hidden_size": 32, "target_hidden_size": 64}))
    launch_checks.check_draft_fits_target(str(t), str(d))
    # A vocabulary of its own is not refused: SGLang binds the target's embedding to the draft.
    (d / "config.json").write_text(json.dumps({"hidden_size": 64, "vocab_size": 128}))
    launch_checks.check_draft_fits_target(str(t), str(d))
    # A VLM target keeps its text geometry under text_config.
    (t / "config.json").write_text(
        json.dumps({"text_config": {"hidden_size": 64, "vocab_size": 128}})
    )
    (d / "config.json").write_text(json.dumps({"hidden_size": 96, "draft_vocab_size": 32}))
    with pytest.raises(LaunchCheckError, match="target's hidden_size 64"):
        launch_checks.check_draft_fits_target(str(t), str(d))


def launch(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "algorithm": "EAGLE3",
        "mem_fraction_static": 0.5,
        "max_total_tokens": None,
        "page_size": 1,
        "model_path": "org/target",
        "draft_path": "org/draft",
        "draft_load_format": "auto",
    }
    return {**values, **overrides}


def test_speculative_launch_checks_flags_before_files(tmp_path: Path) -> None:
    t, d = configs(tmp_path, {"hidden_size": 64}, {"hidden_size": 96})
    (d / "model.safetensors").write_bytes(b"\0" * 3)
    paths = {"model_path": str(t), "draft_path": str(d)}
    with pytest.raises(LaunchCheckError, match="--mem-fraction-static 1.5"):
        launch_checks.check_speculative_launch(**launch(mem_fraction_static=1.5, **paths))
    with pytest.raises(LaunchCheckError, match="--max-total-tokens 3"):
        launch_checks.check_speculative_launch(**launch(max_total_tokens=3, **paths))
    with pytest.raises(LaunchCheckError, match="draft checkpoint file"):
        launch_checks.check_speculative_launch(**launch(**paths))
    # A format that never opens .safetensors files does not care about them; the width still
    # matters (the draft reads the target's hidden states whatever its weights are).
    with pytest.raises(LaunchCheckError, match="draft hidden_size 96"):
        launch_checks.check_speculative_launch(**launch(draft_load_format="dummy", **paths))
    # Only drafts fed by the target's hidden states have to match its width.
    launch_checks.check_speculative_launch(
        **launch(algorithm="STANDALONE", draft_load_format="dummy", **paths)
    )


def test_hub_ids_and_non_speculative_launches_are_not_read() -> None:
    launch_checks.check_speculative_launch(**launch())  # hub ids: nothing local to read
    launch_checks.check_speculative_launch(**launch(draft_path=None))
    launch_checks.check_speculative_launch(
        **launch(algorithm=None, mem_fraction_static=5.0, max_total_tokens=1)
    )


def test_0_5_13_hook_reads_the_resolved_fields(tmp_path: Path) -> None:
    args = SimpleNamespace(
        speculative_algorithm=None, mem_fraction_static=5.0, max_total_tokens=1, page_size=1
    )
    launch_checks_0513.check_launch(args)
    args.speculative_algorithm = "EAGLE3"
    args.speculative_draft_model_path = "org/hub-id"  # not a local directory: not read
    args.model_path = "org/target"
    with pytest.raises(LaunchCheckError, match="--mem-fraction-static 5.0"):
        launch_checks_0513.check_launch(args)
    args.mem_fraction_static = 0.5
    with pytest.raises(LaunchCheckError, match="--max-total-tokens 1 leaves no KV"):
        launch_checks_0513.check_launch(args)
    args.max_total_tokens = None
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "model.safetensors").write_bytes(b"\0" * 3)
    args.speculative_draft_model_path = str(draft)
    args.load_format = "auto"
    args.speculative_draft_load_format = "dummy"  # the draft's own format wins
    launch_checks_0513.check_launch(args)
    args.speculative_draft_load_format = None
    with pytest.raises(LaunchCheckError, match=f"draft checkpoint file {draft}/model.safetensors"):
        launch_checks_0513.check_launch(args)
