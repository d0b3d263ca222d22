"""The SGLang releases the GPU suite runs on, and what differs between them for the suite."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

DETERMINISTIC_FLAG = "--enable-deterministic-inference"
GRAPH_FAILED = "Capture cuda graph failed"  # both releases


@dataclass(frozen=True)
class ReleaseSettings:
    version: str
    draft_graph_end: str
    draft_extend_graph_end: str
    # Capture-end lines (``name``, ``gb``, ``bs``); ``graph_phase``: name -> /server_info key.
    capture_end: re.Pattern[str]
    graph_phase: dict[str, str]
    # 0.5.13.x stock sizes the target pool before the draft exists: the draft's lands over it.
    stock_sizes_before_the_draft: bool
    # Algorithms whose requests the release refuses with ``return_logprob``.
    no_logprobs_for: tuple[str, ...] = ()


RELEASES: dict[str, ReleaseSettings] = {
    "0.5.13.post1": ReleaseSettings(
        version="0.5.13.post1",
        draft_graph_end="Capture draft cuda graph end.",
        draft_extend_graph_end="Capture draft extend cuda graph end.",
        capture_end=re.compile(
            r"Capture (?P<name>cuda|draft cuda|draft extend cuda) graph end\. .*?"
            r"mem usage=(?P<gb>-?[\d.]+) GB"
        ),
        graph_phase={"cuda": "graph"},
        stock_sizes_before_the_draft=True,
        no_logprobs_for=("DFLASH",),
    ),
    "0.5.23": ReleaseSettings(
        version="0.5.23",
        draft_graph_end="Capture draft decode CUDA graph end.",
        draft_extend_graph_end="Capture draft extend CUDA graph end.",
        capture_end=re.compile(
            r"Capture (?P<name>(?:target|draft) (?:verify|decode|prefill|extend)) CUDA graph "
            r"end\. (?:bs=\[(?P<bs>[\d, ]*)\], )?.*?mem usage=(?P<gb>-?[\d.]+) GB"
        ),
        graph_phase={
            "target verify": "target_verify",
            "target decode": "decode",
            "target prefill": "prefill",
            "draft verify": "draft_decode",
            "draft decode": "draft_decode",
            "draft prefill": "draft_prefill",
            "draft extend": "draft_extend",
        },
        stock_sizes_before_the_draft=False,
    ),
}
MATRIX = tuple(RELEASES)  # what the workflow's matrix runs, in order


def settings(release: str) -> ReleaseSettings:
    if release not in RELEASES:
        raise ValueError(
            f"the GPU suite runs on sglang {' or '.join(RELEASES)}, not {release}: install one "
            'of them (pip install "sglang==0.5.23" -e ".[test]")'
        )
    return RELEASES[release]


def installed_release() -> str | None:
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def installed_settings() -> ReleaseSettings:
    return settings(installed_release() or "none")


if __name__ == "__main__":
    import sys

    try:
        print(installed_settings().version)
    except ValueError as error:
        sys.exit(f"[test-gpu] {error}")
