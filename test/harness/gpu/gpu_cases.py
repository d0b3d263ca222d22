"""Which servers the GPU suite launches: cases, model profiles, and the env vars changing them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from harness.gpu.gpu_release import installed_release

PROFILE_ENV = "SPECINIT_GPU_PROFILE"
MEM_FRACTION_ENV = "SPECINIT_GPU_MEM_FRACTION"
STOCK_MEM_FRACTION_ENV = "SPECINIT_GPU_STOCK_MEM_FRACTION"
MODEL_DIR_ENV = "SPECINIT_GPU_MODEL_DIR"
DETERMINISTIC_ENV = "SPECINIT_GPU_DETERMINISTIC"
DEFAULT_MEM_FRACTION = "0.9"
STOCK_FALLBACK_STEP = 0.1
SMOKE_CASE = "eagle3"
# What SGLang's DFLASH CI and the drafts' model cards launch DFLASH with.
DFLASH_ARGS = tuple(
    "--speculative-algorithm DFLASH --trust-remote-code --attention-backend flashinfer "
    "--page-size 1 --disable-overlap-schedule".split()
)
DFLASH_ENV = (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),)
CHAIN = tuple(
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4".split()
)
EAGLE3_ARGS = ("--speculative-algorithm", "EAGLE3", *CHAIN)
PRIME_PROMPT = "List the first ten prime numbers, separated by commas:"
# Greedy text that a draft model (or the n-gram matcher) can predict.
PROMPTS = (
    PRIME_PROMPT,
    "Count from one to twenty in words: one, two, three,",
    "The days of the week are Monday, Tuesday,",
    "Repeat exactly ten times: alpha beta gamma delta. alpha beta gamma delta.",
)
MAX_NEW_TOKENS = 96
# Top-2 logprobs per output token: the margin that calibrates a token difference.
TOP_LOGPROBS = 2


def generate_payload(prompt: str, *, logprobs: bool) -> dict[str, object]:
    """The ``/generate`` body of one greedy prompt; ``logprobs``: with the top-2 margins."""
    payload: dict[str, object] = {
        "text": prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS},
    }
    if logprobs:
        payload.update(return_logprob=True, top_logprobs_num=TOP_LOGPROBS)
    return payload


@dataclass(frozen=True)
class Case:
    """One case as a profile defines it; ``skip`` says why it cannot run (``target`` "")."""

    name: str
    target: str
    draft: str | None
    args: tuple[str, ...]
    tp: int = 1
    # Whether SGLang must run it with the overlap scheduler (checked on /server_info).
    overlap: bool = False
    # The draft is the target checkpoint itself (MTP layers inside it).
    self_draft: bool = False
    skip: str = ""
    # Case names whose SPECINIT_GPU_<NAME>_* overrides apply, first match wins.
    env_names: tuple[str, ...] = ()
    # Environment variables of the server's process tree (plugin on and stock alike).
    env: tuple[tuple[str, str], ...] = ()
    # The releases that run it (empty: every release the suite runs).
    releases: tuple[str, ...] = ()

    @property
    def override_prefixes(self) -> list[str]:
        return [f"SPECINIT_GPU_{n.upper()}_" for n in (self.name, *self.env_names)]

    @property
    def algorithm(self) -> str:
        return self.args[self.args.index("--speculative-algorithm") + 1]

    def launch_args(self, mem_fraction: str, deterministic_flag: str | None = None) -> list[str]:
        """``launch_server`` flags for this case (without host and port)."""
        argv = ["--model-path", self.target, "--tp", str(self.tp)]
        argv += ["--mem-fraction-static", mem_fraction, *self.args]
        if self.draft is not None:
            argv += ["--speculative-draft-model-path", self.draft]
        if deterministic_flag:
            argv.append(deterministic_flag)
        return argv


# 0.5.23's resize after graph capture (CUDA only), which the plugin caps at the pools' prices.
POST_CAPTURE_ENV = (("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "1"),)
NGRAM_ARGS = ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8")
MULTI_LAYER_ARGS = (
    *"--speculative-algorithm EAGLE --enable-multi-layer-eagle --trust-remote-code".split(),
    *CHAIN,
)
SMALL_DRAFT = "meta-llama/Llama-3.2-1B-Instruct"  # every profile's STANDALONE draft


def _profile(
    target: str, eagle3_draft: str, standalone_target: str, dflash: tuple[str, str], mtp: Case
) -> tuple[Case, ...]:
    """One profile's cases: ``target`` runs EAGLE3 (``eagle3_draft``) and NGRAM."""
    # Overlap scheduling is the EAGLE family's default; the phases differ without it: both run.
    eagle3 = Case("eagle3", target, eagle3_draft, EAGLE3_ARGS, overlap=True, env_names=("eagle3",))
    # The other eagle3 cases take eagle3's models unless told otherwise (env_names).
    no_overlap = (*EAGLE3_ARGS, "--disable-overlap-schedule")
    standalone = ("--speculative-algorithm", "STANDALONE", *CHAIN)
    return (
        eagle3,
        replace(eagle3, name="eagle3_no_overlap", args=no_overlap, overlap=False),
        replace(eagle3, name="eagle3_post_capture", env=POST_CAPTURE_ENV, releases=("0.5.23",)),
        Case("standalone", standalone_target, SMALL_DRAFT, standalone, overlap=True),
        mtp,
        Case("dflash", *dflash, DFLASH_ARGS, env=DFLASH_ENV),
        Case("ngram", target, None, NGRAM_ARGS),
    )


def _mtp(target: str, tp: int = 1, skip: str = "") -> Case:
    args = (target, None, MULTI_LAYER_ARGS)
    return Case("multi_layer_mtp", *args, tp=tp, overlap=True, self_draft=True, skip=skip)


NO_SMALL_MTP = (
    "no checkpoint for one 24-48 GB GPU has multi-layer MTP (0.5.13.post1 enables it for "
    "MiMo-V2-Flash and Step-3.5 only); set SPECINIT_GPU_MULTI_LAYER_MTP_TARGET"
)
PROFILES: dict[str, tuple[Case, ...]] = {
    "full": _profile(
        "meta-llama/Llama-3.1-8B-Instruct",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"),
        _mtp("XiaomiMiMo/MiMo-V2-Flash", tp=8),
    ),
    "small": _profile(
        "meta-llama/Llama-3.2-1B-Instruct",
        "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct",
        "meta-llama/Llama-3.2-3B-Instruct",
        ("Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16"),
        _mtp("", skip=NO_SMALL_MTP),
    ),
}


def profile_name(env: Mapping[str, str] | None = None) -> str:
    name = (os.environ if env is None else env).get(PROFILE_ENV, "full").strip() or "full"
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not one of {sorted(PROFILES)}")
    return name


def mem_fraction(env: Mapping[str, str] | None = None) -> str:
    value = (os.environ if env is None else env).get(MEM_FRACTION_ENV, DEFAULT_MEM_FRACTION)
    with contextlib.suppress(ValueError):
        if 0.0 < float(value) < 1.0:
            return value
    raise ValueError(f"{MEM_FRACTION_ENV}={value!r} must be a number between 0 and 1")


def stock_mem_fraction(env: Mapping[str, str] | None = None) -> str:
    """``--mem-fraction-static`` of a stock relaunch after an OOM at :func:`mem_fraction`."""
    env = os.environ if env is None else env
    default = f"{float(mem_fraction(env)) - STOCK_FALLBACK_STEP:.3g}"
    return mem_fraction({MEM_FRACTION_ENV: env.get(STOCK_MEM_FRACTION_ENV) or default})


def deterministic(env: Mapping[str, str] | None = None) -> bool:
    """Whether both servers run with the release's deterministic-inference flag (default 1)."""
    value = (os.environ if env is None else env).get(DETERMINISTIC_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{DETERMINISTIC_ENV}={value!r} must be 0 or 1")
    return value == "1"


def local_model(model: str, env: Mapping[str, str]) -> str:
    """``model`` as a directory under ``SPECINIT_GPU_MODEL_DIR`` when it is there, else as is."""
    root = env.get(MODEL_DIR_ENV, "").strip()
    if not root or os.path.isdir(model):
        return model
    candidates = (os.path.join(root, model), os.path.join(root, model.rsplit("/", 1)[-1]))
    return next((c for c in candidates if os.path.isdir(c)), model)


def resolve(spec: Case, env: Mapping[str, str]) -> Case:
    """Apply ``SPECINIT_GPU_<CASE>_TARGET`` / ``_DRAFT`` / ``_TP`` and the model dir."""

    def setting(key: str) -> str | None:
        return next((env[p + key] for p in spec.override_prefixes if env.get(p + key)), None)

    target = setting("TARGET") or spec.target
    draft = setting("DRAFT") or spec.draft
    tp_text = setting("TP") or str(spec.tp)
    if not tp_text.isdigit() or int(tp_text) < 1:
        raise ValueError(f"{spec.override_prefixes[0]}TP={tp_text!r} must be a positive integer")
    if not target:
        return replace(spec, tp=int(tp_text))
    if spec.self_draft and draft is None:
        draft = target
    draft = None if draft is None else local_model(draft, env)
    return replace(spec, target=local_model(target, env), draft=draft, tp=int(tp_text), skip="")


def smoke_problems(env: Mapping[str, str] | None = None) -> str:
    """Why the smoke cannot run from local checkpoints ("" when it can)."""
    env = os.environ if env is None else env
    smoke = case(SMOKE_CASE, env)
    missing = [m for m in (smoke.target, smoke.draft) if m and not os.path.isdir(m)]
    if not missing:
        return ""
    return (
        f"the GPU smoke loads its models from local directories, and {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not; set {MODEL_DIR_ENV} to a directory "
        "holding <org>/<name> (or <name>) checkpoint folders, or SPECINIT_GPU_EAGLE3_TARGET / "
        "_DRAFT to checkpoint directories"
    )


def cases(env: Mapping[str, str] | None = None, release: str | None = None) -> list[Case]:
    """Every case of the selected profile that ``release`` (default: installed) runs."""
    env = os.environ if env is None else env
    release = release or installed_release()
    specs = [s for s in PROFILES[profile_name(env)] if not s.releases or release in s.releases]
    return [resolve(spec, env) for spec in specs]


def case(name: str, env: Mapping[str, str] | None = None, release: str | None = None) -> Case:
    (found,) = [c for c in cases(env, release) if c.name == name]
    return found


if __name__ == "__main__":  # scripts/test-gpu.sh --smoke
    print(smoke_problems())
