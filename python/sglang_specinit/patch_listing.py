"""``sglang-specinit patches``: every SGLang target a release's adapter hooks, adds or requires,
one block per SGLang module (nothing of SGLang is imported)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sglang_specinit import compat
from sglang_specinit.hooks import ModulePatch, adapter_patches
from sglang_specinit.planner.inputs import RaisingParser

EXIT_BAD_INPUT = 2


def release_patches(release: str) -> dict[str, ModulePatch]:
    decision = compat.decide_for_version(release)
    if decision.adapter is None:
        served = ", ".join(compat.supported_releases())
        raise ValueError(f"no adapter serves sglang {release}; pass --release one of {served}")
    return adapter_patches(compat.load_adapter(decision.adapter), release)


def where(fn: Callable[..., Any]) -> str:
    fn = inspect.unwrap(fn)
    return f"{fn.__module__}:{fn.__code__.co_firstlineno}"


def listing(release: str) -> list[str]:
    patches = release_patches(release)
    adapter = compat.decide_for_version(release).adapter
    hooks = [h for p in patches.values() for h in p.hooks]
    added = [m for p in patches.values() for m in p.new_methods]
    required = [r for p in patches.values() for r in p.requires]
    lines = [
        f"sglang {release}: adapter sglang_specinit.{adapter}, {len(patches)} SGLang modules, "
        f"{len(hooks)} hooks, {len(added)} added methods, {len(required)} required attributes"
    ]
    for module, patch in patches.items():
        rows = [("hook", h.kind, h.qualname, h.fn) for h in patch.hooks]
        rows += [("adds", "", f"{m.class_name}.{m.name}", m.fn) for m in patch.new_methods]
        rows += [("requires", "", r.qualname, None) for r in patch.requires]
        width = max(len(row[2]) for row in rows)
        lines.append(module)
        for entry, kind, target, fn in rows:
            line = f"  {entry:<9} {kind:<7} {target:<{width}}"
            if fn is not None:
                line += f"  <- {fn.__qualname__}  ({where(fn)})"
            lines.append(line.rstrip())
    return lines


def patches_main(argv: Sequence[str]) -> int:
    parser = RaisingParser(
        prog="sglang-specinit patches",
        description=(
            "List every SGLang target a release's adapter hooks, adds a method to, or requires, "
            "per SGLang module, with the plugin function and where it is defined."
        ),
    )
    parser.add_argument(
        "--release",
        default=None,
        help=(
            "sglang release (default: the installed one); served: "
            + ", ".join(compat.supported_releases())
        ),
    )
    try:
        options = parser.parse_args(list(argv))
        release = options.release or compat.installed_sglang_version()
        if release is None:
            raise ValueError("sglang is not installed; pass --release")
        lines = listing(release)
    except ValueError as e:
        print(f"sglang-specinit patches: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("\n".join(lines))
    return 0
