"""The SGLang releases the GPU suite runs on, and what differs between them for the suite."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

DETERMINISTIC_FLAG = "--enable-deterministic-inference"


@dataclass(frozen=True)
class ReleaseSettings:
    """What the GPU suite reads and passes differently on one SGLang release."""

    version: str
    deterministic_flag: str | None
    target_graph_end: re.Pattern[str]
    draft_graph_end: str
    draft_extend_graph_end: str
    graph_failed: str
    # Every capture-end line: ``name`` (which runner captured), ``gb`` and, where the release
    # logs it, ``bs`` (the batch list); ``graph_phase`` maps a name to its key in
    # ``/server_info``'s graph memory (absent: the figure does not count that runner).
    capture_end: re.Pattern[str]
    graph_phase: dict[str, str]
    # Stock sizes the target pool before the draft exists (0.5.13.x), so the draft's pools land
    # over f x free; from 0.5.14 stock sizes both pools inside the budget (an EAGLE3 draft of
    # the target's geometry fits; the duplicates resident at profiling only shrink it).
    stock_sizes_before_the_draft: bool
    # Algorithms whose requests the release refuses with ``return_logprob`` (0.5.13.post1's
    # DFLASH: speculative/dflash_utils.py validate_dflash_request, a 400): their greedy
    # comparison runs without logprobs, so every difference counts as clear.
    no_logprobs_for: tuple[str, ...] = ()

    def returns_logprobs(self, algorithm: str) -> bool:
        """Whether the suite asks ``algorithm``'s servers for top-2 logprobs on this release."""
        return algorithm not in self.no_logprobs_for


RELEASES: dict[str, ReleaseSettings] = {
    "0.5.13.post1": ReleaseSettings(
        version="0.5.13.post1",
        deterministic_flag=DETERMINISTIC_FLAG,
        target_graph_end=re.compile(
            r"Capture cuda graph end\. Time elapsed: [-\d.]+ s\. mem usage=(?P<gb>-?[\d.]+) GB\."
        ),
        draft_graph_end="Capture draft cuda graph end.",
        draft_extend_graph_end="Capture draft extend cuda graph end.",
        graph_failed="Capture cuda graph failed",
        capture_end=re.compile(
            r"Capture (?P<name>cuda|draft cuda|draft extend cuda) graph end\. .*?"
            r"mem usage=(?P<gb>-?[\d.]+) GB"
        ),
        # get_internal_state reports the target runner's graph_mem_usage, one figure.
        graph_phase={"cuda": "graph"},
        stock_sizes_before_the_draft=True,
        no_logprobs_for=("DFLASH",),
    ),
    "0.5.23": ReleaseSettings(
        version="0.5.23",
        deterministic_flag=DETERMINISTIC_FLAG,
        target_graph_end=re.compile(
            r"Capture target (?:verify|decode|prefill) CUDA graph end\. .*?"
            r"mem usage=(?P<gb>-?[\d.]+) GB"
        ),
        draft_graph_end="Capture draft decode CUDA graph end.",
        draft_extend_graph_end="Capture draft extend CUDA graph end.",
        graph_failed="Capture cuda graph failed",  # runner/decode_cuda_graph_runner.py:603
        capture_end=re.compile(
            r"Capture (?P<name>(?:target|draft) (?:verify|decode|prefill|extend)) CUDA graph "
            r"end\. (?:bs=\[(?P<bs>[\d, ]*)\], )?.*?mem usage=(?P<gb>-?[\d.]+) GB"
        ),
        # Each runner's memory phase (cuda_graph_setup.py capture_decode_graph and the prefill
        # capture; eagle_worker_v2.py's draft decode / extend), merged by phase into
        # /server_info (graph_memory_usage.py merge_graph_memory_usage).
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
    """The settings of ``release``; any other is an error naming the releases the suite runs."""
    if release not in RELEASES:
        raise ValueError(
            f"the GPU suite runs on sglang {' or '.join(RELEASES)}, not {release}: install one "
            'of them (pip install "sglang==0.5.23" -e ".[test]")'
        )
    return RELEASES[release]


def installed_release() -> str | None:
    """The installed ``sglang`` distribution's version (None: not installed)."""
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def installed_settings() -> ReleaseSettings:
    """The settings of the installed release (raises :func:`settings`'s error otherwise)."""
    return settings(installed_release() or "none")


if __name__ == "__main__":
    # ``python -m harness.gpu.gpu_release``: the installed release, or one line saying why not.
    import sys

    try:
        print(installed_settings().version)
    except ValueError as error:
        sys.exit(f"[test-gpu] {error}")
