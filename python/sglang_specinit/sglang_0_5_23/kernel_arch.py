"""Whether the attention kernels 0.5.23's resolution chose can run on the planned GPU.

Resolution on the planned device (:mod:`.planned_device`) already raises SGLang's own refusals
that read the compute capability (``trtllm_mha``, ``trtllm_mla``, ``cutedsl_mla``, TileLang FP8
KV, ...); the planner prints them in SGLang's words. Two choices it accepts fail only once the
ranks run, and :func:`refuse_unrunnable_kernels` names them before anything is priced:

* the DSA ``trtllm`` backends (``--dsa-prefill-backend`` / ``--dsa-decode-backend``, which
  0.5.23 picks for every ``--dcp-size > 1``): ``DeepseekSparseAttnBackend._forward_trtllm``
  calls flashinfer's MLA decode with ``backend="trtllm-gen"``, whose runner accepts only
  sm_100 / sm_103 / sm_107; the rank fails at its first DSA attention (the decode CUDA-graph
  capture at start);
* ``fa3`` as the attention backend: the rank asserts sm_9x, or sm_8x for a non-MLA model, when
  it creates the backend.

Each place relied on is a :class:`Source` read from the 0.5.23 wheel and the flashinfer wheel it
pins (0.7.2); ``test_planned_gpu_kernels_0523`` checks every SGLang line against the installed
release.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_specinit.planner.inputs import PlanError


@dataclass(frozen=True)
class Source:
    """A line of a wheel the rule relies on: ``path`` from the wheel's root, and what it says."""

    wheel: str
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


# The sglang release the lines below were read in.
READ_IN = "0.5.23"

# 0.5.23 declares trtllm for both DSA phases whenever --dcp-size > 1 (and the phase is unset).
DSA_DCP_PICKS_TRTLLM = Source(
    "sglang 0.5.23", "sglang/srt/arg_groups/model_overrides/deepseek_v2.py", 28, 'name: "trtllm"'
)
# Without DCP, the FP8 DSA default is trtllm on compute capability major >= 10.
DSA_FP8_DEFAULT = Source(
    "sglang 0.5.23",
    "sglang/srt/arg_groups/overrides.py",
    716,
    'default = "trtllm" if major >= 10 else "flashmla_kv"',
)
# The trtllm DSA path runs flashinfer's trtllm-gen MLA kernel (both phases).
DSA_TRTLLM_KERNEL = Source(
    "sglang 0.5.23", "sglang/srt/layers/attention/dsa_backend.py", 3982, 'backend="trtllm-gen"'
)
# DSA's decode-context-parallel page table exists only on that path.
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
        # The sglang lines cited are 0.5.23's; another release of this generation says so.
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
        # FlashAttention v3's own assertion when the rank creates the backend.
        runs_on=lambda sm: sm // 10 == 9 or (sm // 10 == 8 and not mla),
        kernel="FlashAttention v3",
        needs=("sm_9x" if mla else "sm_8x or sm_9x") + f" ({FA3_ARCHS})",
        origin="as the launch asks" if _given(launch_inputs, flag) else "by default",
        change=f"--{flag.replace('_', '-')}",
    )


def kernel_needs(args: Any, launch_inputs: Mapping[str, Any], *, mla: bool) -> list[KernelNeed]:
    """The needs of the resolved launch ``args`` (read as ``ResolvedArgs``), decode first.

    ``launch_inputs`` are the fields as the launch gave them (who chose a value); ``mla``: the
    target is an MLA model.
    """
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
    """PlanError (one line) for the first resolved backend whose kernel cannot run on compute
    capability ``sm``; nothing when ``sm`` is unknown (``--device-memory``: docs/planner.md)."""
    if sm is None:
        return
    for need in kernel_needs(args, launch_inputs, mla=mla):
        if not need.runs_on(sm):
            raise PlanError(need.refusal(release, device_name, sm))
