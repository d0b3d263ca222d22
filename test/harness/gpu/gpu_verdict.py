"""The GPU suite's verdicts: pure functions of what two launches left behind."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

from harness.gpu import gpu_release, storage_identity
from harness.gpu.gpu_release import GRAPH_FAILED
from harness.reports.device_probe import (
    BOOKKEEPING_TOLERANCE_BYTES,
    STRAY_TENSOR_TOLERANCE_BYTES,
    UsageAfterPools,
)

MIB = 1 << 20
ACCEPTANCE_Z = 4.0
# A greedy choice is clear when its logprob leads the runner-up's by this much (nats, a factor
# of 1.65 in probability). bf16 logits of two runs of a nondeterministic kernel differ by a few
# hundredths; a plugin that changed the weights, the KV or the positions moves them by far more.
CLEAR_MARGIN_NATS = 0.5
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED")
# mem_get_info has page granularity; two readings of the same state may differ by one page.
READING_GRANULARITY = 2 << 20

# /server_info rounds graph_mem_usage to 2 decimals, the log prints it with 2 decimals.
GRAPH_FIGURE_TOLERANCE_GB = 0.0051


def _top2_margin(response: Mapping[str, Any], position: int) -> float | None:
    tops = (response.get("meta_info") or {}).get("output_top_logprobs") or []
    if position >= len(tops) or not tops[position] or len(tops[position]) < 2:
        return None
    first, second = sorted((float(entry[0]) for entry in tops[position]), reverse=True)[:2]
    return first - second


def _divergence(
    prompt: str, responses: tuple[Mapping[str, Any], Mapping[str, Any]], names: tuple[str, str]
) -> tuple[str, bool] | None:
    """Where two greedy answers first differ, and whether the second's top-2 margin was clear."""
    a, b = (list(r["output_ids"]) for r in responses)
    if a == b:
        return None
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    margins = [_top2_margin(r, at) for r in responses]
    margin = ", ".join(
        f"{n} margin {'n/a' if m is None else f'{m:.3f}'}"
        for n, m in zip(names, margins, strict=True)
    )
    texts = [str(r.get("text", "")) for r in responses]
    line = (
        f"prompt {prompt!r}: {names[0]} tokens differ from {names[1]} at output token "
        f"{at} ({len(a)} vs {len(b)} tokens; {margin}): "
        f"{names[0]} {texts[0]!r}, {names[1]} {texts[1]!r}"
    )
    return line, margins[1] is None or margins[1] >= CLEAR_MARGIN_NATS


def greedy_verdict(
    prompts: Sequence[str],
    plugin: Sequence[Mapping[str, Any]],
    stock: Sequence[Mapping[str, Any]],
    control: Sequence[Mapping[str, Any]] | None = None,
) -> SimpleNamespace:
    """``problems`` fail; ``ties`` (stock near-tied there) and ``control`` (stock's own repeat
    differed) are recorded; ``verify_counts`` fail: a prompt answered with stock's tokens took
    more or fewer verify steps than stock, beyond stock's own repeat's spread."""
    verdict = SimpleNamespace(problems=[], ties=[], control=[], verify_counts=[])
    counts = {len(prompts), len(plugin), len(stock), *([len(control)] if control else [])}
    if len(counts) != 1:
        got = f"{len(plugin)} plugin / {len(stock)} stock"
        got += f" / {len(control)} control" if control else ""
        verdict.problems.append(f"{len(prompts)} prompts but {got} responses")
        return verdict
    runs = (plugin, stock, control or stock)  # without a control, stock is its own repeat
    for i, prompt in enumerate(prompts):
        names = ("stock repeat", "stock")
        again = _divergence(prompt, (control[i], stock[i]), names) if control else None
        if again is not None:
            verdict.control.append(again[0])
            if again[1]:
                verdict.problems.append(
                    f"stock is not reproducible at a clear margin ({again[0]}): this case "
                    "cannot tell a plugin bug from a nondeterministic kernel"
                )
        found = _divergence(prompt, (plugin[i], stock[i]), ("plugin-on", "stock"))
        if found is not None:
            (verdict.problems if found[1] else verdict.ties).append(found[0])
            continue
        on, off, repeat = (DraftStats.from_meta_info(r[i]["meta_info"]).verify_steps for r in runs)
        slack = abs(repeat - off) if again is None else 0
        if abs(on - off) > slack:
            verdict.verify_counts.append(
                f"prompt {prompt!r}: the same {len(plugin[i]['output_ids'])} tokens took {on} "
                f"verify steps with the plugin, {off} stock (stock's own repeat moved by "
                f"{slack}): the drafts were accepted {'less' if on > off else 'more'} often"
            )
    return verdict


def acceptance_bound(on: DraftStats, stock: DraftStats) -> float:
    if on.proposed_drafts <= 0 or stock.proposed_drafts <= 0:
        return 0.0
    p = (on.correct_drafts + stock.correct_drafts) / (on.proposed_drafts + stock.proposed_drafts)
    spread = p * (1 - p) * (1 / on.proposed_drafts + 1 / stock.proposed_drafts)
    return ACCEPTANCE_Z * math.sqrt(spread)


def acceptance_problems(on: DraftStats, stock: DraftStats) -> list[str]:
    if stock.correct_drafts <= 0:
        return [f"stock accepted no draft token ({stock}): the case's draft does not draft"]
    if on.correct_drafts <= 0:
        return [f"the plugin-on server accepted no draft token ({on}); stock accepted {stock}"]
    bound = acceptance_bound(on, stock)
    gap = on.accept_rate - stock.accept_rate
    if abs(gap) > bound:
        return [
            f"acceptance rate {on.accept_rate:.3f} ({on.correct_drafts}/{on.proposed_drafts}) "
            f"with the plugin vs {stock.accept_rate:.3f} ({stock.correct_drafts}/"
            f"{stock.proposed_drafts}) stock: {gap:+.3f} is outside the noise bound "
            f"+-{bound:.3f} ({ACCEPTANCE_Z:g} standard errors)"
        ]
    return []


@dataclass(frozen=True)
class GraphCapture:
    """A start-up log's graph captures: capture-end GB per /server_info phase, batch lists."""

    runner_mem_gb: tuple[float, ...]
    draft: int
    draft_extend: int
    failed: int
    gb_by_phase: dict[str, tuple[float, ...]] = field(default_factory=dict)
    batch_lists: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @classmethod
    def from_log(cls, text: str, release: gpu_release.ReleaseSettings) -> GraphCapture:
        gb_by_phase: dict[str, tuple[float, ...]] = {}
        runner_gb, batch_lists = [], []
        for m in release.capture_end.finditer(text):
            phase = release.graph_phase.get(m["name"])
            if phase is not None:
                gb_by_phase[phase] = (*gb_by_phase.get(phase, ()), float(m["gb"]))
            if "draft" not in m["name"]:  # one of the target's runners
                runner_gb.append(float(m["gb"]))
            if m.groupdict().get("bs") is not None:
                bs = tuple(int(b) for b in m["bs"].split(",") if b.strip())
                batch_lists.append((m["name"], bs))
        return cls(
            runner_mem_gb=tuple(runner_gb),
            draft=text.count(release.draft_graph_end),
            draft_extend=text.count(release.draft_extend_graph_end),
            failed=text.count(GRAPH_FAILED),
            gb_by_phase=gb_by_phase,
            batch_lists=tuple(batch_lists),
        )

    @property
    def kinds(self) -> frozenset[str]:
        found = {"runner": self.runner_mem_gb, "draft": self.draft}
        return frozenset(k for k, n in {**found, "draft_extend": self.draft_extend}.items() if n)


def expected_draft_graph(args: Sequence[str]) -> str | None:
    algorithm = args[args.index("--speculative-algorithm") + 1]
    if algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
        return None  # DFLASH and NGRAM: the runners' own graphs only
    if "--enable-multi-layer-eagle" in args:
        return "draft_extend"
    steps = int(args[args.index("--speculative-num-steps") + 1])
    return "draft" if steps > 1 else None


def graph_figures_gb(info: Mapping[str, Any]) -> dict[str, float] | None:
    """``/server_info``'s graph memory by phase (0.5.13.post1: ``{"graph": G}``)."""
    states = info.get("internal_states") or [{}]
    value = (states[0].get("memory_usage") or {}).get("graph")
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): float(v) for k, v in value.items()}
    return {"graph": float(value)}


def graph_problems(
    capture: GraphCapture, info: Mapping[str, Any], expect_draft: str | None
) -> list[str]:
    """The graphs were captured, and /server_info holds each logged phase's captured GB."""
    problems = []
    if info.get("disable_cuda_graph"):
        problems.append("the server ran with --disable-cuda-graph")
    if capture.failed:
        problems.append(f"{capture.failed} '{GRAPH_FAILED}' line(s) in the start-up log")
    if not capture.runner_mem_gb:
        problems.append("no 'Capture cuda graph end' line in the start-up log")
    figures = graph_figures_gb(info)
    if figures is None or sum(figures.values()) <= 0:
        problems.append(f"/server_info reports graph memory {figures!r} GB: no graph captured")
    else:
        for phase, gbs in capture.gb_by_phase.items():
            figure = figures.get(phase)
            if figure is None or abs(figure - sum(gbs)) > GRAPH_FIGURE_TOLERANCE_GB * len(gbs):
                problems.append(
                    f"/server_info graph memory {phase}={figure} GB matches no captured "
                    f"runner: its capture lines say {list(gbs)} GB"
                )
    if expect_draft is not None and expect_draft not in capture.kinds:
        problems.append(
            f"no draft {expect_draft} capture line: the draft's CUDA graphs were not captured"
        )
    return problems


# Every server argument that decides which batch sizes get a graph has this in its name.
GRAPH_ARG_MARKER = "cuda_graph"


def batch_list_problems(
    plugin_info: Mapping[str, Any],
    stock_info: Mapping[str, Any],
    plugin: GraphCapture,
    stock: GraphCapture,
) -> list[str]:
    """The resolved graph arguments and every logged batch list equal stock's."""
    keys = sorted(k for k in {*plugin_info, *stock_info} if GRAPH_ARG_MARKER in k)
    problems = [
        f"{key}: plugin-on {plugin_info.get(key)!r}, stock {stock_info.get(key)!r}"
        for key in keys
        if plugin_info.get(key) != stock_info.get(key)
    ]
    if plugin.batch_lists != stock.batch_lists:
        problems.append(
            f"captured batch lists differ: plugin-on {list(plugin.batch_lists)}, "
            f"stock {list(stock.batch_lists)}"
        )
    return problems


def same_graph_kinds(plugin: GraphCapture, stock: GraphCapture) -> list[str]:
    missing = sorted(stock.kinds - plugin.kinds)
    return [f"stock captured {missing} graphs, the plugin-on server did not"] if missing else []


def fill_problems(usage: UsageAfterPools, breakdown: Mapping[str, Any]) -> list[str]:
    """What may be left of the budget: a page per pool, the plugin's reserves, small tensors."""
    shortfall = usage.fill_shortfall_bytes
    if shortfall is None:
        return ["the probe has no torch counters (not a CUDA run): cannot check the fill"]
    reserved = breakdown.get("draft_request_bytes", 0) + breakdown.get("draft_fixed_pool_bytes", 0)
    allowed = usage.page_bytes + int(reserved) + STRAY_TENSOR_TOLERANCE_BYTES
    if shortfall > allowed:
        return [
            f"{shortfall / MIB:.1f} MiB of the budget hold neither weights, KV nor the "
            f"non-tensor residue (allowed: {allowed / MIB:.1f} MiB = one page per pool "
            f"{usage.page_bytes / MIB:.1f} + plugin reserves + "
            f"{STRAY_TENSOR_TOLERANCE_BYTES / MIB:.0f} small tensors): {usage.describe()}"
        ]
    return []


def memory_problems(
    breakdown: Mapping[str, Any], usage: UsageAfterPools, *, fill: bool
) -> list[str]:
    """One plugin-on rank: planned = allocated, inside (and, ``fill``, using up) the budget."""
    b, problems = breakdown, []
    for pool in ("target", "draft"):
        allocated, planned = b[f"allocated_{pool}_kv_pool_bytes"], b[f"{pool}_kv_pool_bytes"]
        page = b["page_size"] * max(b[f"{pool}_kv_bytes_per_token"], 1)
        if abs(allocated - planned) > page:
            problems.append(f"{pool} KV pool: allocated {allocated} B, planned {planned} B")
    if usage.pre_load_free_bytes != b["pre_load_free_bytes"]:
        problems.append(
            f"pre-load free memory: probe {usage.pre_load_free_bytes}, plugin "
            f"{b['pre_load_free_bytes']}"
        )
    if usage.budget_bytes != b["budget_bytes"]:
        problems.append(f"budget: probe {usage.budget_bytes}, plugin {b['budget_bytes']}")
    if usage.over_budget_bytes > BOOKKEEPING_TOLERANCE_BYTES:
        problems.append(f"over budget: {usage.describe()}")
    if fill:
        problems += fill_problems(usage, b)
    # The plugin's own after-pools reading sits between the last pool and the graphs.
    after_pools = b["cuda_free_bytes_after_pools"]
    probe_free_after_last_pool = usage.pre_load_free_bytes - usage.used_bytes
    if after_pools > probe_free_after_last_pool + READING_GRANULARITY:
        problems.append(
            f"plugin's after-pools reading {after_pools} B is above the probe's "
            f"{probe_free_after_last_pool} B"
        )
    after_init = b.get("cuda_free_bytes_after_init")  # 0.5.13.x only
    if after_init is not None and after_init > after_pools + READING_GRANULARITY:
        problems.append("free memory grew between the pools and the end of init")
    return problems


def oom_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(m in line for m in OOM_MARKERS)]


# The checks, in the order a reader follows a case.
CHECKS = (
    *("breakdown", "memory", "storage_identity", "tokens", "graphs", "batch_lists"),
    *("greedy", "verify_counts", "acceptance"),
)


@dataclass
class Launch:
    """What one launch left (stock: no breakdowns, and a ``control`` repeat of its answers)."""

    info: Mapping[str, Any]
    responses: Sequence[Mapping[str, Any]]
    capture: GraphCapture
    usages: Sequence[UsageAfterPools]
    breakdowns: Sequence[Mapping[str, Any]] = ()
    control: Sequence[Mapping[str, Any]] | None = None


@dataclass
class CaseEvidence:
    """One case: both launches, the plugin launch's storage-identity snapshots per process."""

    prompts: Sequence[str]
    tp: int
    expect_draft: str | None
    plugin: Launch
    stock: Launch
    identity: Sequence[Mapping[str, list[Mapping[str, Any]]]] = ()
    stock_after_init: Mapping[str, Any] | None = None
    # 0.5.23's post-capture KV sizing: the server may serve fewer tokens than planned.
    resized_after_capture: bool = False
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def stock_fits(self) -> bool:
        return all(u.over_budget_bytes <= BOOKKEEPING_TOLERANCE_BYTES for u in self.stock.usages)


def breakdown_problems(launch: Launch, tp: int, *, resized: bool = False) -> list[str]:
    """One breakdown per rank, serving the count it planned (``resized``: at most that)."""
    ranks = [b["tp_rank"] for b in launch.breakdowns]
    if ranks != list(range(tp)):
        return [
            f"plugin breakdowns for TP ranks {ranks}, expected {list(range(tp))}: the plugin did "
            "not size this launch (stepped aside without a warning, or never loaded)"
        ]
    if len(launch.usages) != tp:
        return [f"{len(launch.usages)} probed schedulers for TP {tp}"]
    planned, served = launch.breakdowns[0]["tokens"], launch.info["max_total_num_tokens"]
    if served == planned or (resized and served < planned):
        return []
    return [f"planned {planned} tokens, the server serves {served}"]


def case_problems(e: CaseEvidence) -> dict[str, list[str]]:
    plugin, stock = e.plugin, e.stock
    breakdown = breakdown_problems(plugin, e.tp, resized=e.resized_after_capture)
    memory: list[str] = []
    if not breakdown:
        for b, usage in zip(plugin.breakdowns, plugin.usages, strict=True):
            # TP > 1 ranks are measured against the smallest rank's reading: fill at TP 1 only.
            memory += memory_problems(b, usage, fill=e.tp == 1)
    identity = [] if e.identity else ["no storage-identity records"]
    for snapshots in e.identity:
        identity += storage_identity.identity_problems(snapshots, e.stock_after_init)
    graphs = graph_problems(plugin.capture, plugin.info, e.expect_draft)
    graphs += [f"stock: {p}" for p in graph_problems(stock.capture, stock.info, e.expect_draft)]
    graphs += same_graph_kinds(plugin.capture, stock.capture)
    greedy = greedy_verdict(e.prompts, plugin.responses, stock.responses, stock.control)
    e.notes.update(greedy_ties=greedy.ties, stock_control_differences=greedy.control)
    on, off = summed(plugin.responses), summed(stock.responses)
    tokens = [int(x.info["max_total_num_tokens"]) for x in (plugin, stock)]
    worse = []
    if e.stock_fits and tokens[0] < tokens[1]:
        worse.append(
            f"plugin-on serves {tokens[0]} tokens, stock {tokens[1]} within the same budget "
            f"({tokens[0] / tokens[1]:.3f} x): worse than stock"
        )
    return {
        "breakdown": breakdown,
        "memory": memory,
        "storage_identity": identity,
        "tokens": worse,
        "graphs": graphs,
        "batch_lists": batch_list_problems(plugin.info, stock.info, plugin.capture, stock.capture),
        "greedy": greedy.problems,
        "verify_counts": greedy.verify_counts,
        "acceptance": acceptance_problems(on, off),
    }


@dataclass(frozen=True)
class DraftStats:
    completion_tokens: int
    verify_steps: int
    correct_drafts: int
    proposed_drafts: int

    @classmethod
    def from_meta_info(cls, meta: Mapping[str, Any]) -> DraftStats:
        missing = [k for k in ("spec_verify_ct", "spec_num_correct_drafts") if k not in meta]
        if missing:
            raise ValueError(
                f"meta_info has no {', '.join(missing)}: SGLang ran no speculative verify step "
                f"for this request (or the server is not speculative). meta_info: {dict(meta)}"
            )
        return cls(
            completion_tokens=int(meta["completion_tokens"]),
            verify_steps=int(meta["spec_verify_ct"]),
            correct_drafts=int(meta["spec_num_correct_drafts"]),
            proposed_drafts=int(meta.get("spec_num_proposed_drafts", 0)),
        )

    @property
    def accept_rate(self) -> float:
        return self.correct_drafts / self.proposed_drafts if self.proposed_drafts else 0.0


def summed(responses: Iterable[Mapping[str, Any]]) -> DraftStats:
    stats = [astuple(DraftStats.from_meta_info(r["meta_info"])) for r in responses]
    return DraftStats(*(sum(column) for column in zip((0, 0, 0, 0), *stats, strict=True)))


def sglang_meta_info(
    completion_tokens: int, verify_ct: int, correct: int, num_draft_tokens: int
) -> dict[str, Any]:
    """One finished speculative request's ``meta_info``, by SGLang's own TokenizerManager."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    manager = SimpleNamespace(
        server_args=SimpleNamespace(speculative_num_draft_tokens=num_draft_tokens)
    )
    batch_output = SimpleNamespace(
        spec_verify_ct=[verify_ct],
        spec_num_correct_drafts=[correct],
        completion_tokens=[completion_tokens],
        spec_correct_drafts_histogram=[[verify_ct - correct, correct]] if verify_ct else [[]],
    )
    meta: dict[str, Any] = {"completion_tokens": completion_tokens}
    # 0.5.23 reads the draft-token count from runtime_context's get_spec.
    module = sys.modules[TokenizerManager.__module__]
    with mock.patch.object(module, "get_spec", lambda: manager.server_args, create=True):
        TokenizerManager._calculate_spec_decoding_metrics(manager, meta, batch_output, 0)
    return meta
