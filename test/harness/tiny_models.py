"""Tiny random HF checkpoints (Llama target, EAGLE draft, EAGLE3 draft) for CPU tests.

Why: the init-path tests need checkpoints that SGLang 0.5.13.post1's real loader accepts
(``config.json`` + ``model.safetensors`` + a tokenizer), but no hub access and no real weights.
Everything here is generated locally from a seed, in seconds, and is a few MiB at most.

Weight names follow what the SGLang model files load:

- target: ``transformers.LlamaForCausalLM.save_pretrained`` names (``model.layers.N...``);
- EAGLE (``models/llama_eagle.py``): no ``model.`` prefix (its ``load_weights`` adds it), an
  ``fc`` of shape ``[H, 2H]`` with bias, layer 0 without ``input_layernorm``, no final norm, and
  no ``lm_head`` (the draft gets the target's embedding and head via ``set_embed_and_head``);
- EAGLE3 (``models/llama_eagle3.py``): the layer stored under the legacy ``midlayer.`` prefix as
  published EAGLE3 checkpoints do, ``q/k/v_proj`` reading ``2H`` inputs, ``hidden_norm``, ``fc``
  of shape ``[H, 3 * target_hidden]`` without bias, ``norm``, its own ``lm_head`` of
  ``draft_vocab_size`` rows, no embedding (shared from the target via ``set_embed``), and
  ``d2t``/``t2d`` maps only when the draft vocabulary is smaller than the target's.

Generated checkpoints are cached under ``<repo>/.cache/tiny-models/<kind>-<hash>`` (gitignored),
keyed by a hash of every parameter plus :data:`GENERATOR_VERSION`, and written atomically (to a
temporary directory, then renamed) so an interrupted run never leaves a half-written model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

# Bump when the generated files change, so stale cache entries are not reused.
GENERATOR_VERSION = 1

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_ROOT = REPO_ROOT / ".cache" / "tiny-models"

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


@dataclass(frozen=True)
class TinyLlamaShape:
    """Geometry of one tiny Llama-family checkpoint.

    The KV cell of such a model is ``layers * kv_heads * head_dim * 2 * dtype_bytes`` per
    token, which is what the pool-size tests reason about.
    """

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    vocab: int = 32000
    dtype: str = "bfloat16"
    intermediate: int = 128
    max_position_embeddings: int = 2048

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of :attr:`dtype` (bf16/fp16 = 2, fp32 = 4)."""
        return {"bfloat16": 2, "float16": 2, "float32": 4}[self.dtype]

    def kv_bytes_per_token(self) -> int:
        """K plus V bytes one token occupies across all layers of this model."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


# The EAGLE3 default deliberately differs from the target's KV geometry: 1 KV head of dim 48
# (192 B/token over its 1 layer) against the target's 2 heads of dim 16 (128 B/token/layer), so
# neither "same as the target" nor "target cell * draft layers / target layers" prices it right.
DEFAULT_TARGET = TinyLlamaShape()
DEFAULT_EAGLE_DRAFT = replace(DEFAULT_TARGET, layers=1)
DEFAULT_EAGLE3_DRAFT = replace(DEFAULT_TARGET, layers=1, kv_heads=1, head_dim=48)
# For TP 2: 2 KV heads of dim 48, so that (like the target's 2 heads of dim 16) its KV heads are
# split across two ranks instead of replicated; still a geometry unlike the target's.
TP2_EAGLE3_DRAFT = replace(DEFAULT_EAGLE3_DRAFT, kv_heads=2)


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def _llama_config(
    shape: TinyLlamaShape, architecture: str, config_class: Any = None, **extra: Any
) -> Any:
    """A transformers config of ``shape`` (``LlamaConfig`` unless another Llama-shaped class,
    such as ``Qwen2Config``, is passed)."""
    if config_class is None:
        from transformers import LlamaConfig as config_class

    config = config_class(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        vocab_size=shape.vocab,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        dtype=shape.dtype,
    )
    config.architectures = [architecture]
    for key, value in extra.items():
        setattr(config, key, value)
    return config


def vocab_words(vocab: int) -> list[str]:
    """The tokenizer's vocabulary: three special tokens, then ``w3 .. w{vocab-1}``."""
    return [*SPECIAL_TOKENS, *(f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab))]


def prompt_text(num_words: int, start: int = 10) -> str:
    """A prompt made only of in-vocabulary words, so every word is exactly one token."""
    return " ".join(f"w{i}" for i in range(start, start + num_words))


def write_tokenizer(directory: Path, vocab: int) -> None:
    """Write a whitespace WordLevel tokenizer of exactly ``vocab`` tokens (``tokenizers`` lib).

    Why WordLevel: it needs no training data, one word is one token (prompt lengths are exact),
    and ``AutoTokenizer`` loads it as a ``PreTrainedTokenizerFast`` with no extra files.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = vocab_words(vocab)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins word tokens with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=1 << 20,
    )
    fast.save_pretrained(str(directory))


def _randn(generator: Any, *size: int, dtype: Any, std: float = 0.02) -> Any:
    import torch

    return (torch.randn(*size, generator=generator) * std).to(dtype)


def _save_safetensors(directory: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )


def _layer_tensors(
    generator: Any,
    prefix: str,
    shape: TinyLlamaShape,
    *,
    qkv_in: int,
    input_layernorm: bool,
    hidden_norm: bool = False,
) -> dict[str, Any]:
    import torch

    dt = _torch_dtype(shape.dtype)
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = {
        f"{prefix}.self_attn.q_proj.weight": _randn(generator, q, qkv_in, dtype=dt),
        f"{prefix}.self_attn.k_proj.weight": _randn(generator, kv, qkv_in, dtype=dt),
        f"{prefix}.self_attn.v_proj.weight": _randn(generator, kv, qkv_in, dtype=dt),
        f"{prefix}.self_attn.o_proj.weight": _randn(generator, h, q, dtype=dt),
        f"{prefix}.mlp.gate_proj.weight": _randn(generator, shape.intermediate, h, dtype=dt),
        f"{prefix}.mlp.up_proj.weight": _randn(generator, shape.intermediate, h, dtype=dt),
        f"{prefix}.mlp.down_proj.weight": _randn(generator, h, shape.intermediate, dtype=dt),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(h, dtype=dt),
    }
    if input_layernorm:
        out[f"{prefix}.input_layernorm.weight"] = torch.ones(h, dtype=dt)
    if hidden_norm:
        out[f"{prefix}.hidden_norm.weight"] = torch.ones(h, dtype=dt)
    return out


def write_llama_target(
    directory: Path, shape: TinyLlamaShape = DEFAULT_TARGET, seed: int = 0
) -> Path:
    """Write a random ``LlamaForCausalLM`` (weights via ``save_pretrained``) plus its tokenizer."""
    import torch
    from transformers import LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(shape, "LlamaForCausalLM"))
    model.to(_torch_dtype(shape.dtype)).save_pretrained(str(directory))
    write_tokenizer(directory, shape.vocab)
    return directory


def write_eagle_draft(
    directory: Path, shape: TinyLlamaShape = DEFAULT_EAGLE_DRAFT, seed: int = 0
) -> Path:
    """Write a random ``LlamaForCausalLMEagle`` draft (EAGLE-1/2 layout; usually 1 layer).

    ``shape.hidden`` and ``shape.vocab`` must equal the target's: the draft's ``fc`` reads
    ``[embedding, target hidden state]`` and it borrows the target's embedding and head.
    """
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    dt = _torch_dtype(shape.dtype)
    tensors = {
        "embed_tokens.weight": _randn(gen, shape.vocab, shape.hidden, dtype=dt),
        "fc.weight": _randn(gen, shape.hidden, 2 * shape.hidden, dtype=dt),
        "fc.bias": torch.zeros(shape.hidden, dtype=dt),
    }
    for i in range(shape.layers):
        # SGLang deletes layer 0's input_layernorm (EAGLE feeds fc output straight in).
        tensors.update(
            _layer_tensors(gen, f"layers.{i}", shape, qkv_in=shape.hidden, input_layernorm=i > 0)
        )
    _llama_config(shape, "LlamaForCausalLMEagle").save_pretrained(str(directory))
    _save_safetensors(directory, tensors)
    return directory


def write_eagle3_draft(
    directory: Path,
    shape: TinyLlamaShape = DEFAULT_EAGLE3_DRAFT,
    seed: int = 0,
    *,
    target_hidden: int | None = None,
    draft_vocab: int | None = None,
    num_nextn_predict_layers: int | None = None,
) -> Path:
    """Write a random ``LlamaForCausalLMEagle3`` draft (usually 1 layer).

    Its KV geometry (``kv_heads``, ``head_dim``) is free to differ from the target's, which is
    the case the budget must price separately. ``num_nextn_predict_layers=0`` reproduces drafts
    whose config carries that key (SGLang then counts ``num_hidden_layers`` for the pool).
    """
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    dt = _torch_dtype(shape.dtype)
    th = target_hidden or shape.hidden
    dv = draft_vocab or shape.vocab
    tensors = {
        "fc.weight": _randn(gen, shape.hidden, 3 * th, dtype=dt),
        "norm.weight": torch.ones(shape.hidden, dtype=dt),
        "lm_head.weight": _randn(gen, dv, shape.hidden, dtype=dt),
    }
    for i in range(shape.layers):
        # Layer 0 reads [embeds, fc(target hidden)] (2H wide); published 1-layer checkpoints
        # name it "midlayer", which SGLang maps to "layers.0".
        prefix = "midlayer" if shape.layers == 1 else f"layers.{i}"
        qkv_in = 2 * shape.hidden if i == 0 else shape.hidden
        tensors.update(
            _layer_tensors(
                gen, prefix, shape, qkv_in=qkv_in, input_layernorm=True, hidden_norm=True
            )
        )
    if dv < shape.vocab:
        # d2t[i] = target_id - draft_id for the i-th hot token; here the hot tokens are the
        # first ``dv`` ids, so the offsets are zero and t2d marks those ids.
        tensors["d2t"] = torch.zeros(dv, dtype=torch.int64)
        t2d = torch.zeros(shape.vocab, dtype=torch.bool)
        t2d[:dv] = True
        tensors["t2d"] = t2d
    extra: dict[str, Any] = {"draft_vocab_size": dv}
    if target_hidden is not None:
        extra["target_hidden_size"] = target_hidden
    if num_nextn_predict_layers is not None:
        extra["num_nextn_predict_layers"] = num_nextn_predict_layers
    _llama_config(shape, "LlamaForCausalLMEagle3", **extra).save_pretrained(str(directory))
    _save_safetensors(directory, tensors)
    return directory


def write_mla_target(
    directory: Path,
    shape: TinyLlamaShape = DEFAULT_TARGET,
    seed: int = 0,
    kv_lora_rank: int = 32,
    qk_rope_head_dim: int = 16,
    qk_nope_head_dim: int = 16,
    v_head_dim: int = 16,
) -> Path:
    """Write a random dense ``DeepseekV2ForCausalLM`` (MLA attention) plus its tokenizer.

    SGLang's DeepSeek path on CPU needs a YaRN ``rope_scaling`` (its CPU rope factory asserts
    one), and ``first_k_dense_replace`` beyond the last layer keeps every layer dense (the MoE
    layer test reads ``moe_layer_freq``, which transformers' config does not keep).
    """
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = DeepseekV2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        moe_intermediate_size=shape.intermediate // 2,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=None,
        qk_rope_head_dim=qk_rope_head_dim,
        qk_nope_head_dim=qk_nope_head_dim,
        v_head_dim=v_head_dim,
        first_k_dense_replace=shape.layers + 1,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        max_position_embeddings=shape.max_position_embeddings,
    )
    torch.manual_seed(seed)
    model = DeepseekV2ForCausalLM(config).to(_torch_dtype(shape.dtype))
    model.save_pretrained(str(directory))
    config_path = directory / "config.json"
    saved = json.loads(config_path.read_text())
    saved["rope_scaling"] = {
        "type": "yarn",
        "rope_type": "yarn",
        "factor": 1.0,
        "original_max_position_embeddings": shape.max_position_embeddings,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    config_path.write_text(json.dumps(saved, indent=1))
    write_tokenizer(directory, shape.vocab)
    return directory


_WRITERS = {
    "llama-target": write_llama_target,
    "mla-target": write_mla_target,
    "eagle-draft": write_eagle_draft,
    "eagle3-draft": write_eagle3_draft,
}


def cache_key(
    kind: str,
    shape: Any,
    seed: int,
    extra: dict[str, Any],
    generator_version: int = GENERATOR_VERSION,
) -> str:
    """Directory name for one generated checkpoint: ``<kind>-<12 hex of the parameter hash>``.

    The installed transformers release is part of the key: checkpoints are written through its
    config classes, whose fields differ between releases (the 0.5.23 environment layers a newer
    transformers over ``.venv``), and one environment must never read the other's files.
    """
    from importlib.metadata import version

    payload = json.dumps(
        {
            "v": generator_version,
            "kind": kind,
            "shape": asdict(shape),
            "seed": seed,
            "transformers": version("transformers"),
            **extra,
        },
        sort_keys=True,
    )
    return f"{kind}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def cached_model(
    kind: str,
    shape: Any,
    *,
    seed: int = 0,
    cache_root: Path | None = None,
    writers: dict[str, Any] | None = None,
    generator_version: int = GENERATOR_VERSION,
    **extra: Any,
) -> Path:
    """Return the cached checkpoint for ``(kind, shape, seed, extra)``, generating it if absent.

    ``kind`` names a writer in ``writers`` (default: this module's ``llama-target``,
    ``mla-target``, ``eagle-draft``, ``eagle3-draft``); ``extra`` is passed to the writer (e.g.
    ``num_nextn_predict_layers=0`` for ``eagle3-draft``). Other modules pass their own writers
    and generator version and share the cache and its atomic writes.
    """
    writers = _WRITERS if writers is None else writers
    if kind not in writers:
        raise ValueError(f"unknown tiny model kind {kind!r}; expected one of {sorted(writers)}")
    root = Path(cache_root or os.environ.get("SPECINIT_TINY_MODEL_CACHE") or DEFAULT_CACHE_ROOT)
    final = root / cache_key(kind, shape, seed, extra, generator_version)
    if (final / "model.safetensors").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        writers[kind](tmp, shape, seed, **extra)
        (tmp / "tiny-model.json").write_text(
            json.dumps({"kind": kind, "shape": asdict(shape), "seed": seed, **extra}, indent=1)
        )
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its copy is identical
            if not (final / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def tiny_llama_target(shape: TinyLlamaShape = DEFAULT_TARGET, **kw: Any) -> Path:
    """Cached tiny Llama target (with tokenizer)."""
    return cached_model("llama-target", shape, **kw)


def tiny_mla_target(shape: TinyLlamaShape = DEFAULT_TARGET, **kw: Any) -> Path:
    """Cached tiny dense DeepSeek-V2 target with MLA attention (with tokenizer)."""
    return cached_model("mla-target", shape, **kw)


def tiny_eagle_draft(shape: TinyLlamaShape = DEFAULT_EAGLE_DRAFT, **kw: Any) -> Path:
    """Cached tiny EAGLE draft matching a target of the same ``hidden``/``vocab``."""
    return cached_model("eagle-draft", shape, **kw)


def tiny_eagle3_draft(shape: TinyLlamaShape = DEFAULT_EAGLE3_DRAFT, **kw: Any) -> Path:
    """Cached tiny EAGLE3 draft; by default its KV geometry differs from the target's."""
    return cached_model("eagle3-draft", shape, **kw)
