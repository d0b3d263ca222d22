"""The launcher-side refusals (``sglang_specinit.launch_checks``), on plain values and files."""

from __future__ import annotations

import json
import re
import struct
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sglang_specinit import launch_checks
from sglang_specinit.dataclass_args import launch_checks as launch_checks_0513
from sglang_specinit.launch_checks import LaunchCheckError


def write_shard(path: Path) -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [32], "data_offsets": [0, 64]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)


def test_shard_problems_are_found_from_header_and_size_in_the_shards_read(tmp_path: Path) -> None:
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
    # Sharded: only the shards the index names (the loader reads) are checked.
    shard.unlink()
    write_shard(tmp_path / "model-00001-of-00002.safetensors")
    write_shard(tmp_path / "model-00002-of-00002.safetensors")
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


# One launch per row through both entry points: the keyword one (0.5.14+'s hooks) and the 0.5.13
# hook on resolved ServerArgs; a refusal is a text or a compiled pattern. Paths {target} (hidden
# 64) and {draft} (hidden 96, a truncated model.safetensors) are local directories; the defaults
# are hub ids, EAGLE3, auto format, fraction 0.5, page 1.
LOCAL = {"model_path": "{target}", "draft_path": "{draft}"}
SHARD = "draft checkpoint file {draft}/model.safetensors"
# A fraction outside the open unit interval; a token cap under one servable page, with the
# smallest cap that works (which passes).
FRACTIONS = {f: f"--mem-fraction-static {f} is outside" for f in (0.0, 1.0, -0.1)}
CAP = "--max-total-tokens {} leaves no KV pool with --page-size {}: .*Pass --max-total-tokens {} or"
LAUNCHES: dict[str, tuple[dict[str, Any], str | re.Pattern | None]] = {
    # Flags before files.
    "fraction": ({"mem_fraction_static": 1.5, **LOCAL}, "--mem-fraction-static 1.5"),
    "fraction, hub ids": ({"mem_fraction_static": 5.0}, "--mem-fraction-static 5.0"),
    **{f"fraction {f}": ({"mem_fraction_static": f}, message) for f, message in FRACTIONS.items()},
    **{f"fraction {f}": ({"mem_fraction_static": f}, None) for f in (None, 0.01, 0.88, 0.999)},
    "max tokens": ({"max_total_tokens": 3, **LOCAL}, "--max-total-tokens 3"),
    "max tokens, hub ids": ({"max_total_tokens": 1}, "--max-total-tokens 1 leaves no KV"),
    **{
        f"max tokens {tokens}, page {page}": (
            {"max_total_tokens": tokens, "page_size": page},
            re.compile(CAP.format(tokens, page, smallest)) if smallest else None,
        )
        for tokens, page, smallest in [(8, 16, 16), (15, 16, 16), (16, 16, None), (6, 1, 7)]
        + [(7, 1, None), (None, 64, None)]
    },
    "shards": (LOCAL, SHARD),
    # No draft format: the launch's --load-format (auto) reads the shards.
    "shards, no draft format": ({"draft_path": "{draft}", "draft_load_format": None}, SHARD),
    # A format that never opens .safetensors files does not care about them (the draft's own
    # format wins); the width still matters (the draft reads the target's hidden states).
    "dummy format": ({"draft_path": "{draft}", "draft_load_format": "dummy"}, None),
    "dummy format, width": ({**LOCAL, "draft_load_format": "dummy"}, "draft hidden_size 96"),
    # Only drafts fed by the target's hidden states have to match its width.
    "standalone": ({**LOCAL, "algorithm": "STANDALONE", "draft_load_format": "dummy"}, None),
    "hub ids": ({}, None),  # nothing local to read
    "no draft": ({"draft_path": None}, None),
    "not speculative": ({"algorithm": None, "mem_fraction_static": 5, "max_total_tokens": 1}, None),
}


@pytest.mark.parametrize("case", sorted(LAUNCHES))
def test_a_launch_is_refused_by_both_entry_points(tmp_path: Path, case: str) -> None:
    t, d = configs(tmp_path, {"hidden_size": 64}, {"hidden_size": 96})
    (d / "model.safetensors").write_bytes(b"\0" * 3)
    fields, refusal = LAUNCHES[case]
    kw: dict[str, Any] = dict(algorithm="EAGLE3", mem_fraction_static=0.5, max_total_tokens=None)
    kw.update(
        page_size=1, model_path="org/target", draft_path="org/draft", draft_load_format="auto"
    )
    for key, value in fields.items():
        kw[key] = value.format(target=t, draft=d) if isinstance(value, str) else value
    resolved = SimpleNamespace(**kw, speculative_algorithm=kw["algorithm"], load_format="auto")
    resolved.speculative_draft_model_path = kw["draft_path"]
    resolved.speculative_draft_load_format = kw["draft_load_format"]
    if isinstance(refusal, str):
        refusal = re.compile(re.escape(refusal.format(draft=d)))
    for check in (
        lambda: launch_checks.check_speculative_launch(**kw),
        lambda: launch_checks_0513.check_launch(resolved),
    ):
        with pytest.raises(LaunchCheckError, match=refusal) if refusal else nullcontext():
            check()
