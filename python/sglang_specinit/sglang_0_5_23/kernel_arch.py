"""Refuse a resolved launch whose attention kernel cannot run on the planned GPU.

Two choices 0.5.23's resolution accepts fail only once the ranks run: DSA's ``trtllm``
backends off sm_100 / 103 / 107, and ``fa3`` off sm_9x (sm_8x for non-MLA). Each line relied on
is a :class:`Source` (docs/planner.md; checked by ``test_planner_0523``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_specinit.planner.inputs import PlanError


@dataclass(frozen=True)
class Source:
    """A line of a wheel the rule relies on: ``path`` from the wheel's root, and its text."""

    wheel: str
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


READ_IN = "0.5.23"

DSA_DCP_PICKS_TRTLLM = Source(
    "sglang 0.5.23", "sglang/srt/arg_groups/model_overrides/deepseek_v2.py", 28, 'name: "trtllm"'
)
DSA_FP8_DEFAULT = Source(
    "sglang 0.5.23",
    "sglang/srt/arg_groups/overrides.py",
    716,
    'default = "trtllm" if major >= 10 else "flashmla_kv"',
)
DSA_TRTLLM_KERNEL = Source(
    "sglang 0.5.23", "sglang/srt/layers/attention/dsa_backend.py", 3982, 'backend="trtllm-gen"'
)
DSA_DCP_ONLY_ON_TRTLLM = Source(
    "sglang 0.5.23",
    "sglang/srt/layers/attention/dsa_backend.py",
    3939,
    "localize_dcp_page_table(",
)
TRTLLM_GEN_ARCHS = Source(
    "flashinfer 0.7.2",
    "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh",
    37,
    "mSM == kSM_100 || mSM == kSM_103 || mSM == kSM_107",
)
FA3_ARCHS = Source(
    "sglang 0.5.23",
    "sglang/srt/layers/attention/attention_registry.py",
    243,
    "(major == 8 and not runner.use_mla_backend) or major == 9",
)
SOURCES = (
    DSA_DCP_PICKS_TRTLLM,
    DSA_FP8_DEFAULT,
    DSA_TRTLLM_KERNEL,
    DSA_DCP_ONLY_ON_TRTLLM,
    TRTLLM_GEN_ARCHS,
    FA3_ARCHS,
)

_TRTLLM_GEN_SMS = (100, 103, 107)
_DSA_BACKENDS = ("dsa", "nsa")  # nsa: 0.5.23's deprecated alias of dsa


@dataclass(frozen=True)
class KernelNeed:
    """One resolved backend and the compute capabilities its kernel runs on."""

    field: str  # the resolved ServerArgs field
    value: str
    runs_on: Callable[[int], bool]  # compute capability x 10 -> runs
    kernel: str  # the kernel that runs, with the source calling it
    needs: str  # the capabilities it runs on, with their source
    origin: str  # how the launch came to it, with its source
    change: str  # the flag to change

    def refusal(self, release: str, device_name: str, sm: int) -> str:
        read_in = "" if release == READ_IN else f" (sglang lines as of {READ_IN})"
        return (
            f"sglang {release} resolves --{self.field.replace('_', '-')} to {self.value!r} "
            f"{self.origin}, which cannot run on {device_name} (sm_{sm}): {self.kernel} runs "
            f"only on {self.needs}; change {self.change}{read_in}"
        )


def _given(launch_inputs: Mapping[str, Any], name: str) -> bool:
    return launch_inputs.get(name) is not None


def _dsa_trtllm_need(args: Any, phase: str, launch_inputs: Mapping[str, Any]) -> KernelNeed:
    field = f"dsa_{phase}_backend"
    flag = f"--{field.replace('_', '-')}"
    dcp = int(args.dcp_size)
    if _given(launch_inputs, field):
        origin, change = "as the launch asks", flag
    elif dcp > 1:
        origin = f"for --dcp-size {dcp} ({DSA_DCP_PICKS_TRTLLM})"
        change = f"--dcp-size (DSA's DCP runs only on that kernel: {DSA_DCP_ONLY_ON_TRTLLM})"
    else:
        origin = f"by default for a {args.kv_cache_dtype} KV cache ({DSA_FP8_DEFAULT})"
        change = f"{flag} or --kv-cache-dtype"
    return KernelNeed(
        field=field,
        value="trtllm",
        runs_on=lambda sm: sm in _TRTLLM_GEN_SMS,
        kernel=f"its trtllm-gen MLA kernel ({DSA_TRTLLM_KERNEL})",
        needs=(
            "/".join(f"sm_{sm}" for sm in _TRTLLM_GEN_SMS)
            + f" ({TRTLLM_GEN_ARCHS.wheel} {TRTLLM_GEN_ARCHS})"
        ),
        origin=origin,
        change=change,
    )


def _fa3_need(field: str, launch_inputs: Mapping[str, Any], mla: bool) -> KernelNeed:
    flag = field if _given(launch_inputs, field) else "attention_backend"
    return KernelNeed(
        field=field,
        value="fa3",
        runs_on=lambda sm: sm // 10 == 9 or (sm // 10 == 8 and not mla),
        kernel="FlashAttention v3",
        needs=("sm_9x" if mla else "sm_8x or sm_9x") + f" ({FA3_ARCHS})",
        origin="as the launch asks" if _given(launch_inputs, flag) else "by default",
        change=f"--{flag.replace('_', '-')}",
    )


def kernel_needs(args: Any, launch_inputs: Mapping[str, Any], *, mla: bool) -> list[KernelNeed]:
    """The kernel needs of the resolved launch, decode first."""
    from sglang.srt.arg_groups.model_override_base import attention_backends_of

    prefill, decode = attention_backends_of(args)
    needs: list[KernelNeed] = []
    for phase, backend in (("decode", decode), ("prefill", prefill)):
        if backend in _DSA_BACKENDS and getattr(args, f"dsa_{phase}_backend") == "trtllm":
            needs.append(_dsa_trtllm_need(args, phase, launch_inputs))
        if backend == "fa3":
            split = f"{phase}_attention_backend"
            field = split if getattr(args, split) else "attention_backend"
            if all(need.field != field for need in needs):
                needs.append(_fa3_need(field, launch_inputs, mla))
    return needs


def refuse_unrunnable_kernels(
    args: Any,
    launch_inputs: Mapping[str, Any],
    *,
    mla: bool,
    release: str,
    device_name: str,
    sm: int | None,
) -> None:
    """PlanError for the first backend whose kernel cannot run on ``sm`` (None: unchecked)."""
    if sm is None:
        return
    for need in kernel_needs(args, launch_inputs, mla=mla):
        if not need.runs_on(sm):
            raise PlanError(need.refusal(release, device_name, sm))
