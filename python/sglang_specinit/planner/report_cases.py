"""What ``sglang-specinit report`` shows, read from breakdown JSON (``plan --json``, benchmark
``case-*.json``, live ``memory-rank*.json``): cases, variants (a top-level value holding
``tokens`` and ``budget_bytes``), bar segments. Nothing here draws or writes files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

LIVE_FILE_GLOB = "memory-rank*.json"
CASE_FILE_GLOB = "case-*.json"
SPECINIT_KEY = "specinit"

# A note's column that names no variant: the launch's inputs, shared by every column.
_NOTE_LABELS = {"both": "both columns", "sglang-specinit": "sglang-specinit"}
_VERSIONED_KEY = re.compile(r"^(stock|upstream)_(\d+)_(\d+)_(\d+)(?:_(.+))?$")


class ReportInputError(ValueError):
    """A report input that cannot be read; the message is one line for the user."""


@dataclass(frozen=True)
class Segment:
    """One slice of a stacked bar: what it holds and its bytes (taken from the JSON)."""

    label: str
    bytes: int


# Bar slices, bottom to top; OTHER_RESIDENT and DRAFT_BUFFERS only where they hold bytes.
TARGET_WEIGHTS = "target weights"
DRAFT_WEIGHTS = "draft weights"
OTHER_RESIDENT = "other resident"
TARGET_KV = "target KV"
DRAFT_KV = "draft KV"
DRAFT_BUFFERS = "draft buffers"
UNUSED = "unused"
OVER = "over budget"


@dataclass(frozen=True)
class Variant:
    """One bar: a rule's (or a rank's) breakdown as read, with its title and provenance."""

    key: str
    title: str
    breakdown: Mapping[str, Any]
    # "measured" / "modelled" (benchmark), "planned" / "allocated" (live ranks), None (a plan).
    source: str | None = None
    source_note: str | None = None

    @property
    def budget_bytes(self) -> int:
        return int(self.breakdown["budget_bytes"])

    def segments(self) -> list[Segment]:
        """The bar's slices below ``unused``, each equal to a field of the breakdown."""
        b = self.breakdown
        target_w = int(b["target_weight_bytes"])
        draft_w = int(b["draft_weight_bytes"])
        target_kv = int(b["target_kv_pool_bytes"])
        draft_kv = int(b["draft_kv_pool_bytes"])
        resident = int(b.get("resident_bytes", target_w + draft_w))
        used = int(b.get("used_bytes", resident + target_kv + draft_kv))
        parts = [
            Segment(TARGET_WEIGHTS, target_w),
            Segment(DRAFT_WEIGHTS, draft_w),
            Segment(OTHER_RESIDENT, resident - target_w - draft_w),
            Segment(TARGET_KV, target_kv),
            Segment(DRAFT_KV, draft_kv),
            Segment(DRAFT_BUFFERS, used - resident - target_kv - draft_kv),
        ]
        return [p for p in parts if p.bytes > 0 or p.label not in (OTHER_RESIDENT, DRAFT_BUFFERS)]

    @property
    def stacked_bytes(self) -> int:
        return sum(s.bytes for s in self.segments())

    @property
    def over_bytes(self) -> int:
        """Bytes above the budget (0 when the variant fits)."""
        return max(0, self.stacked_bytes - self.budget_bytes)

    @property
    def unused_bytes(self) -> int:
        return max(0, self.budget_bytes - self.stacked_bytes)


@dataclass(frozen=True)
class ReportCase:
    """One heading of the report: one figure, one table."""

    name: str
    slug: str
    kind: str  # "plan", "benchmark" or "live"
    variants: tuple[Variant, ...]
    description: str = ""
    notes: tuple[str, ...] = ()
    source_path: str | None = None
    # What the figure's title names besides the case: model, GPU, TP and release.
    subtitle: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted({int(v.breakdown.get("tp_rank", 0)) for v in self.variants})


def slugify(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return slug or "case"


BAR_KEYS = ("tokens", "budget_bytes", "target_weight_bytes", "draft_weight_bytes")
BAR_KEYS += ("target_kv_pool_bytes", "draft_kv_pool_bytes")  # what a bar reads (segments)


def is_breakdown(value: Any) -> bool:
    return isinstance(value, Mapping) and all(key in value for key in BAR_KEYS)


def variant_title(key: str, data: Mapping[str, Any]) -> str:
    """A plan's stock column (one with a ``release``) -> ``stock <release>``; a benchmark's
    ``upstream_<release>`` key -> ``upstream <release>``; this package's -> ``sglang-specinit``."""
    if key == SPECINIT_KEY:
        return "sglang-specinit"
    if data.get("release"):
        return f"stock {data['release']}"
    match = _VERSIONED_KEY.match(key)
    if match:
        kind, major, minor, patch, rest = match.groups()
        title = f"{kind} {major}.{minor}.{patch}"
        return f"{title} ({rest.replace('_', ' ')})" if rest else title
    return key.replace("_", " ")


def _order(variant: Variant) -> tuple[int, tuple[int, ...], bool, str]:
    """Stock columns first by release (this environment's before another's of the same),
    then upstream releases by version, anything else, this package last."""
    key = variant.key
    if key == SPECINIT_KEY:
        return (3, (), False, key)
    if variant.breakdown.get("release"):
        release = tuple(int(x) for x in re.findall(r"\d+", str(variant.breakdown["release"])))
        return (0, release, key != "stock", key)
    match = _VERSIONED_KEY.match(key)
    if match:
        version = tuple(int(x) for x in match.group(2, 3, 4))
        return (0 if match.group(1) == "stock" else 1, version, False, key)
    return (2, (), False, key)


def _variant(key: str, data: Mapping[str, Any]) -> Variant:
    title = str(data.get("title") or variant_title(key, data))
    return Variant(key, title, data, data.get("source"), data.get("source_note"))


def _basename(path: Any) -> str:
    return Path(str(path)).name if path else "-"


def _device_tp(data: Mapping[str, Any]) -> list[str]:
    device = data.get("device")
    named = [str(device["name"])] if isinstance(device, Mapping) and device.get("name") else []
    return [*named, f"TP {data.get('tp_size', 1)}"]


def _plan_description(data: Mapping[str, Any]) -> str:
    parts = [
        f"target `{_basename(data.get('model_path'))}`",
        f"draft `{_basename(data.get('speculative_draft_model_path'))}`",
        f"`--speculative-algorithm {data.get('speculative_algorithm')}`",
    ]
    return ", ".join([*parts, *_device_tp(data)])


def case_from_plan_json(
    data: Mapping[str, Any],
    name: str | None = None,
    description: str | None = None,
    source_path: str | None = None,
) -> ReportCase:
    """A plan- or benchmark-shaped breakdown: the top level and every breakdown sub-object."""
    if not is_breakdown(data):
        raise ReportInputError(
            f"{source_path or 'input'}: not a sglang-specinit breakdown (it needs "
            f"{', '.join(BAR_KEYS)}); pass plan --json output, a benchmark case-*.json "
            "or a server's memory-rank*.json"
        )
    variants = [_variant(SPECINIT_KEY, data)]
    variants += [_variant(k, v) for k, v in data.items() if is_breakdown(v)]
    variants.sort(key=_order)
    name = name or str(data.get("case_name") or "")
    if not name:
        name = f"{_basename(data.get('model_path'))} + {data.get('speculative_algorithm')}"
    kind = "benchmark" if any(v.source for v in variants) else "plan"
    # A benchmark's ``plan_notes`` as they are; a plan's ``notes`` led by their column's title.
    titles = {v.key: v.title for v in variants}
    notes = [str(n) for n in data.get("plan_notes", ()) or ()]
    for note in data.get("notes", ()) or ():
        column = str(note["column"])
        notes.append(f"{titles.get(column) or _NOTE_LABELS.get(column, column)}: {note['text']}")
    return ReportCase(
        name=name,
        slug=slugify(name),
        kind=kind,
        variants=tuple(variants),
        description=description or str(data.get("description") or _plan_description(data)),
        notes=tuple(notes),
        source_path=source_path,
        subtitle=_plan_subtitle(data),
    )


def _plan_subtitle(data: Mapping[str, Any]) -> str:
    model = _basename(data.get("model_path"))
    if model == "target" and data.get("model_path"):
        # A shipped example keeps its target in <example>/target/.
        model = Path(str(data["model_path"])).parent.name
    parts = [f"model {model}"] if model not in ("", "-") else []
    if data.get("speculative_algorithm"):
        parts.append(f"{data['speculative_algorithm']} draft")
    parts += _device_tp(data)
    if data.get("sglang_version"):
        parts.append(f"sglang {data['sglang_version']}")
    return ", ".join(p for p in parts if p)


def allocated_breakdown(rank: Mapping[str, Any]) -> dict[str, Any]:
    """A live rank's breakdown with the pools SGLang really allocated in place of the plan's."""
    allocated = dict(rank)
    pools = ("target_kv_pool_bytes", "draft_kv_pool_bytes")
    for key in pools:
        allocated[key] = int(rank.get(f"allocated_{key}", 0))
    # The planned bytes that are neither resident nor a pool (draft buffers) stay as planned.
    allocated["used_bytes"] = int(rank["used_bytes"]) + sum(
        allocated[key] - int(rank[key]) for key in pools
    )
    allocated["headroom_bytes"] = int(rank["budget_bytes"]) - allocated["used_bytes"]
    return allocated


def live_case(
    ranks: Sequence[Mapping[str, Any]], name: str, source_path: str | None = None
) -> ReportCase:
    """One live server: per rank, the planned breakdown next to what was allocated."""
    variants: list[Variant] = []
    for data in sorted(ranks, key=lambda r: int(r.get("tp_rank", 0))):
        if not is_breakdown(data) or "allocated_target_kv_pool_bytes" not in data:
            raise ReportInputError(
                f"{source_path or name}: a memory-rank file without the live breakdown keys "
                "(tokens, budget_bytes, allocated_target_kv_pool_bytes)"
            )
        rank = int(data.get("tp_rank", 0))
        allocated = {**allocated_breakdown(data), "tp_rank": rank}
        for source, b in (("planned", data), ("allocated", allocated)):
            variants.append(Variant(f"rank{rank}-{source}", f"rank {rank} {source}", b, source))
    first = ranks[0]
    description = "live server"
    if first.get("model_path") or first.get("speculative_algorithm"):
        description += ": " + _plan_description({**first, "device": None})
    return ReportCase(
        name=name,
        slug=slugify(name),
        kind="live",
        variants=tuple(variants),
        description=description,
        source_path=source_path,
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ReportInputError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from e


def cases_from_paths(paths: Iterable[str | Path]) -> list[ReportCase]:
    """Cases from ``--from-json`` files, or directories searched recursively: each folder's
    ``memory-rank*.json`` files are one live case and every ``case-*.json`` is a case."""
    cases: list[ReportCase] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            by_dir: dict[Path, list[Path]] = {}
            for live in sorted(path.rglob(LIVE_FILE_GLOB)):
                by_dir.setdefault(live.parent, []).append(live)
            found = []
            for directory, files in sorted(by_dir.items()):
                rel = str(directory.relative_to(path))
                name = rel if rel != "." else (path.name or str(path))
                found.append(live_case([_read_json(f) for f in files], name, str(directory)))
            found += [
                case_from_plan_json(_read_json(p), source_path=str(p))
                for p in sorted(path.rglob(CASE_FILE_GLOB))
            ]
            if not found:
                raise ReportInputError(
                    f"{path} holds no {LIVE_FILE_GLOB} or {CASE_FILE_GLOB} file "
                    "(set SGLANG_SPECINIT_REPORT_DIR on the server to write them)"
                )
            cases += found
        elif path.is_file():
            data = _read_json(path)
            if not isinstance(data, Mapping):
                data = {}
            if "allocated_target_kv_pool_bytes" in data:
                cases.append(live_case([data], path.stem, str(path)))
            else:
                cases.append(case_from_plan_json(data, source_path=str(path)))
        else:
            raise ReportInputError(f"--from-json {path}: no such file or directory")
    return unique_slugs(cases)


def unique_slugs(cases: Sequence[ReportCase]) -> list[ReportCase]:
    """The same cases, with ``-2``, ``-3``... appended to repeated file stems."""
    seen: dict[str, int] = {}
    out = []
    for case in cases:
        seen[case.slug] = count = seen.get(case.slug, 0) + 1
        out.append(replace(case, slug=f"{case.slug}-{count}") if count > 1 else case)
    return out
