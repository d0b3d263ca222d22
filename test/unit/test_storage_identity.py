"""The storage-identity check (:mod:`harness.gpu.storage_identity`) on CPU, without SGLang."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
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


def runner(model: TinyLM, draft: bool = False) -> SimpleNamespace:
    """A ``ModelRunner`` double: only what the snapshot reads."""
    return SimpleNamespace(model=model, is_draft_worker=draft, draft_model_idx=None)


def bind(draft: TinyLM, target: TinyLM, *, head: bool) -> None:
    """What SGLang's ``set_embed_and_head`` / ``set_embed`` do: the target's Parameters."""
    draft.model.embed_tokens.weight = target.model.embed_tokens.weight
    if head:
        draft.lm_head.weight = target.lm_head.weight


def snapshot(point: str, runners: list[SimpleNamespace]) -> dict[str, Any]:
    return {"point": point, "tp_rank": 0, **storage_identity.bindings(runners)}


def launch(*, bound_at_pool: bool, draft_at_pool: bool = True, head: bool = True) -> dict:
    """The two snapshots of one launch whose draft is bound by the end of init."""
    target, draft = TinyLM(), TinyLM()
    target_runner, draft_runner = runner(target), runner(draft, True)
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
    found = storage_identity.bindings([runner(target), runner(draft, True)])
    assert found["drafts"] == 1
    assert found["shared"] == {
        "draft0/model.embed_tokens.weight": "model.embed_tokens.weight",
        "draft0/lm_head.weight": "lm_head.weight",
    }
    assert found["own"] == []
    # A copy of the same values is not the same storage.
    twin = TinyLM()
    twin.model.embed_tokens.weight = torch.nn.Parameter(target.model.embed_tokens.weight.clone())
    copied = storage_identity.bindings([runner(target), runner(twin, True)])
    assert copied["shared"] == {}
    assert "draft0/model.embed_tokens.weight" in copied["own"]


BOUND, UNBOUND = {"bound_at_pool": True}, {"bound_at_pool": False}
SIZED = "when the target's KV pool was sized"
STILL_OWN = (f"{SIZED}, ", "draft0/model.embed_tokens.weight = target/model.embed_tokens.weight")
STILL_OWN += ("were still the draft's own storage",)
NO_DRAFT = (f"{SIZED} 0 of 1 draft runner(s) existed",)


# Each problem: its opening words, then words it holds.
@pytest.mark.parametrize(
    ("plugin", "stock", "problems"),
    [
        (BOUND, UNBOUND, []),
        # The blind spot of the fill floor: the duplicate is a parameter, counted as weights.
        (UNBOUND, UNBOUND, [STILL_OWN]),
        # Stock 0.5.13.post1: the target pool is sized before the draft is even loaded.
        ({**UNBOUND, "draft_at_pool": False}, UNBOUND, [NO_DRAFT, STILL_OWN]),
        (BOUND, {**UNBOUND, "head": False}, [("after init the draft shares", "lm_head")]),
        ({**BOUND, "head": False}, {**UNBOUND, "head": False}, []),
    ],
    ids=["bound", "unbound", "no-draft-at-pool", "more-than-stock", "as-stock"],
)
def test_identity_verdict_against_stocks_binding(
    plugin: dict, stock: dict, problems: list[tuple[str, ...]]
) -> None:
    stock_after = launch(**stock)[storage_identity.AFTER_INIT][0]
    found = storage_identity.identity_problems(launch(**plugin), stock_after)
    assert len(found) == len(problems), found
    for line, (start, *says) in zip(found, problems, strict=True):
        assert line.startswith(start) and all(s in line for s in says), line


def test_launch_problems_read_the_files_the_hooks_write(tmp_path: Path) -> None:
    assert storage_identity.identity_problems({}, None) == [
        "no after-init snapshot: the scheduler never finished its init"
    ]
    plugin_dir, stock_dir = tmp_path / "plugin", tmp_path / "stock"
    for directory in (plugin_dir, stock_dir):
        directory.mkdir()
        assert storage_identity.launch_problems(directory, None) == [
            f"no storage-identity records in {directory}"
        ]
        run = launch(bound_at_pool=False)
        lines = [json.dumps(r) for point in run.values() for r in point]
        (directory / "storage-identity-123.jsonl").write_text("\n".join(lines) + "\n")
    (problem,) = storage_identity.launch_problems(plugin_dir, stock_dir)
    assert problem.startswith("TP rank 0: when the target's KV pool was sized")
