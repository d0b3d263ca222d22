"""The storage-identity check (:mod:`harness.gpu.storage_identity`) on CPU, without SGLang."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.gpu import storage_identity

torch = pytest.importorskip("torch")
VOCAB, HIDDEN = 64, 8


class TinyLM(torch.nn.Module):
    """A model with the parameter names SGLang's Llama family uses."""

    def __init__(self, head: bool = True) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.model.norm = torch.nn.LayerNorm(HIDDEN)
        if head:
            self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)


@dataclass
class RunnerDouble:
    """Test double of a ``ModelRunner``: only what the snapshot reads."""

    model: Any
    is_draft_worker: bool = False
    draft_model_idx: int | None = None


def bind(draft: TinyLM, target: TinyLM, *, head: bool) -> None:
    """What SGLang's ``set_embed_and_head`` / ``set_embed`` do: the target's Parameters."""
    draft.model.embed_tokens.weight = target.model.embed_tokens.weight
    if head:
        draft.lm_head.weight = target.lm_head.weight


def snapshot(point: str, runners: list[RunnerDouble]) -> dict[str, Any]:
    return {"point": point, "tp_rank": 0, **storage_identity.bindings(runners)}


def launch(*, bound_at_pool: bool, draft_at_pool: bool = True, head: bool = True) -> dict:
    """The two snapshots of one launch whose draft is bound by the end of init."""
    target, draft = TinyLM(), TinyLM()
    target_runner = RunnerDouble(target)
    draft_runner = RunnerDouble(draft, is_draft_worker=True)
    if bound_at_pool:
        bind(draft, target, head=head)
    at_pool = snapshot(
        storage_identity.POOL, [target_runner, *([draft_runner] if draft_at_pool else [])]
    )
    if not bound_at_pool:
        bind(draft, target, head=head)
    after = snapshot(storage_identity.AFTER_INIT, [target_runner, draft_runner])
    return {storage_identity.POOL: [at_pool], storage_identity.AFTER_INIT: [after]}


def test_bindings_name_the_target_tensor_each_draft_tensor_shares() -> None:
    target, draft = TinyLM(), TinyLM()
    bind(draft, target, head=True)
    found = storage_identity.bindings([RunnerDouble(target), RunnerDouble(draft, True)])
    assert found["drafts"] == 1
    assert found["shared"] == {
        "draft0/model.embed_tokens.weight": "model.embed_tokens.weight",
        "draft0/lm_head.weight": "lm_head.weight",
    }
    assert found["own"] == []
    # A copy of the same values is not the same storage.
    twin = TinyLM()
    twin.model.embed_tokens.weight = torch.nn.Parameter(target.model.embed_tokens.weight.clone())
    copied = storage_identity.bindings([RunnerDouble(target), RunnerDouble(twin, True)])
    assert copied["shared"] == {}
    assert "draft0/model.embed_tokens.weight" in copied["own"]


def test_a_draft_bound_before_the_pool_passes() -> None:
    plugin = launch(bound_at_pool=True)
    stock_after = launch(bound_at_pool=False)[storage_identity.AFTER_INIT][0]
    assert storage_identity.identity_problems(plugin, stock_after) == []


def test_a_draft_embed_still_its_own_at_pool_time_fails() -> None:
    """The blind spot of the fill floor: the duplicate is a parameter, counted as weights."""
    broken = launch(bound_at_pool=False)
    stock_after = broken[storage_identity.AFTER_INIT][0]
    (problem,) = storage_identity.identity_problems(broken, stock_after)
    assert "draft0/model.embed_tokens.weight = target/model.embed_tokens.weight" in problem
    assert "were still the draft's own storage" in problem


def test_a_pool_sized_before_the_draft_existed_fails() -> None:
    """Stock 0.5.13.post1: the target pool is sized before the draft is even loaded."""
    stock = launch(bound_at_pool=False, draft_at_pool=False)
    problems = storage_identity.identity_problems(stock, stock[storage_identity.AFTER_INIT][0])
    assert any("0 of 1 draft runner(s) existed" in p for p in problems), problems


def test_a_binding_other_than_stocks_fails() -> None:
    stock_after = launch(bound_at_pool=False, head=False)[storage_identity.AFTER_INIT][0]
    too_much = launch(bound_at_pool=True, head=True)
    (problem,) = storage_identity.identity_problems(too_much, stock_after)
    assert problem.startswith("after init the draft shares") and "lm_head" in problem
    assert (
        storage_identity.identity_problems(launch(bound_at_pool=True, head=False), stock_after)
        == []
    )


def test_missing_snapshots_are_failures(tmp_path: Path) -> None:
    assert storage_identity.identity_problems({}, None) == [
        "no after-init snapshot: the scheduler never finished its init"
    ]
    assert storage_identity.launch_problems(tmp_path, None) == [
        f"no storage-identity records in {tmp_path}"
    ]


def test_launch_problems_read_the_files_the_hooks_write(tmp_path: Path) -> None:
    plugin_dir, stock_dir = tmp_path / "plugin", tmp_path / "stock"
    for directory, run in (
        (plugin_dir, launch(bound_at_pool=False)),
        (stock_dir, launch(bound_at_pool=False)),
    ):
        directory.mkdir()
        lines = [json.dumps(r) for point in run.values() for r in point]
        (directory / "storage-identity-123.jsonl").write_text("\n".join(lines) + "\n")
    (problem,) = storage_identity.launch_problems(plugin_dir, stock_dir)
    assert problem.startswith("TP rank 0: when the target's KV pool was sized")


def test_the_pool_hook_follows_the_installed_release() -> None:
    from harness.launch.sglang_release import sglang_release

    expected = "init_memory_pool" if sglang_release()[:3] == (0, 5, 13) else "alloc_memory_pool"
    assert storage_identity.pool_method() == expected
