"""What the tiny checkpoint writers share: the cache, the vocabulary and tokenizer, the Llama
layout (shape, config, one decoder layer's random tensors) and saving a checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CACHE_ROOT = REPO_ROOT / ".cache" / "tiny-models"
CACHE_ENV = "SPECINIT_TINY_MODEL_CACHE"
# One writer at a time in a process: the writers' first imports from transformers (a lazy
# module) fail in a second thread importing at once ("cannot import name 'LlamaConfig'"), and
# test threads and launch threads both ask for checkpoints. Reentrant: writers nest.
_WRITING = threading.RLock()


def resolve_cache_root(root: Path | None = None) -> Path:
    """``root``, else ``$SPECINIT_TINY_MODEL_CACHE``, else ``<repo>/.cache/tiny-models``."""
    return Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


def write_once(final: Path, marker: str, write: Callable[[Path], None]) -> Path:
    """``final``: ``write(tmp)`` into a sibling renamed into place, unless ``final/marker`` is."""
    if (final / marker).is_file():
        return final
    with _WRITING:
        if (final / marker).is_file():  # another thread wrote it meanwhile
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            write(tmp)
            try:
                tmp.rename(final)
            except OSError:  # another process won the race; its copy is identical
                if not (final / marker).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass(frozen=True)
class Kind:
    """One kind of generated checkpoint; calling it returns the cached checkpoint
    ``<name>-<12 hex of the parameter hash>``, written by ``writer`` if absent."""

    name: str
    writer: Callable[..., Path]
    generator_version: int
    shape: Any = None

    def __call__(
        self, shape: Any = None, *, seed: int = 0, cache_root: Path | None = None, **extra: Any
    ) -> Path:
        from importlib.metadata import version

        shape = self.shape if shape is None else shape
        key = {"kind": self.name, "shape": asdict(shape), "seed": seed, **extra}
        payload = {"v": self.generator_version, "transformers": version("transformers"), **key}
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]

        def write(tmp: Path) -> None:
            self.writer(tmp, shape, seed, **extra)
            (tmp / "tiny-model.json").write_text(json.dumps(key, indent=1))

        final = resolve_cache_root(cache_root) / f"{self.name}-{digest}"
        return write_once(final, "model.safetensors", write)


SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
BOS_ID, EOS_ID = 1, 2


def prompt_text(num_words: int, start: int = 10) -> str:
    """A prompt made only of in-vocabulary words, so every word is exactly one token."""
    return " ".join(f"w{i}" for i in range(start, start + num_words))


def write_tokenizer(directory: Path, vocab: int) -> None:
    """Write a whitespace WordLevel tokenizer of exactly ``vocab`` tokens (``tokenizers`` lib)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # The three special tokens, then w3 .. w{vocab-1}.
    words = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab))]
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


@dataclass(frozen=True)
class TinyShape:
    """The geometry every tiny checkpoint has (the Llama, Gemma 4 and MiMo-V2 shapes')."""

    hidden: int = 64
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

    def kv_bytes_per_token_per_layer(self) -> int:
        """K plus V bytes one token occupies in one layer."""
        return self.kv_heads * self.head_dim * 2 * self.dtype_bytes


@dataclass(frozen=True)
class TinyLlamaShape(TinyShape):
    """Geometry of one tiny Llama-family checkpoint."""

    layers: int = 2

    def kv_bytes_per_token(self) -> int:
        """K plus V bytes one token occupies across all layers of this model."""
        return self.layers * self.kv_bytes_per_token_per_layer()


def llama_config(
    shape: TinyLlamaShape, architecture: str, config_class: Any = None, **extra: Any
) -> Any:
    """A transformers config of ``shape`` (``LlamaConfig`` or another Llama-shaped class)."""
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


def save_seeded_model(
    directory: Path,
    shape: TinyShape,
    seed: int,
    build: Callable[[], Any],
    tokenizer: bool = True,
    **config_fields: Any,
) -> Path:
    """Seed torch, ``build()`` a transformers model, save it at ``shape.dtype`` (and the
    tokenizer) into ``directory``; ``config_fields`` are added to its ``config.json``."""
    import torch

    directory, _, dtype = seeded_generator(directory, shape, seed)
    torch.manual_seed(seed)
    build().to(dtype).save_pretrained(str(directory))
    if tokenizer:
        write_tokenizer(directory, shape.vocab)
    if config_fields:
        path = directory / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config_fields}, indent=1))
    return directory


def seeded_generator(directory: Path, shape: TinyShape, seed: int) -> tuple[Path, Any, Any]:
    """``directory`` (created), a torch generator seeded with ``seed`` and ``shape``'s dtype."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return directory, torch.Generator().manual_seed(seed), getattr(torch, shape.dtype)


def randn(generator: Any, *size: int, dtype: Any, std: float = 0.02) -> Any:
    """A random tensor of ``size`` from ``generator`` (normal, ``std``), cast to ``dtype``."""
    import torch

    return (torch.randn(*size, generator=generator) * std).to(dtype)


def save_checkpoint(
    directory: Path, tensors: dict[str, Any], config: Any, vocab: int | None = None
) -> Path:
    """Write ``config`` (a transformers config, or ``config.json``'s text), ``tensors`` as
    ``model.safetensors`` (``format: pt`` metadata) and, given ``vocab``, the tokenizer."""
    from safetensors.torch import save_file

    if isinstance(config, str):
        (directory / "config.json").write_text(config)
    else:
        config.save_pretrained(str(directory))
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )
    if vocab:
        write_tokenizer(directory, vocab)
    return directory


def layer_tensors(
    generator: Any,
    prefix: str,
    shape: TinyLlamaShape,
    *,
    qkv_in: int,
    input_layernorm: bool,
    hidden_norm: bool = False,
) -> dict[str, Any]:
    """One Llama decoder layer's tensors under ``prefix``, attention reading ``qkv_in`` inputs."""
    import torch

    dt = getattr(torch, shape.dtype)
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = {
        f"{prefix}.self_attn.q_proj.weight": randn(generator, q, qkv_in, dtype=dt),
        f"{prefix}.self_attn.k_proj.weight": randn(generator, kv, qkv_in, dtype=dt),
        f"{prefix}.self_attn.v_proj.weight": randn(generator, kv, qkv_in, dtype=dt),
        f"{prefix}.self_attn.o_proj.weight": randn(generator, h, q, dtype=dt),
        f"{prefix}.mlp.gate_proj.weight": randn(generator, shape.intermediate, h, dtype=dt),
        f"{prefix}.mlp.up_proj.weight": randn(generator, shape.intermediate, h, dtype=dt),
        f"{prefix}.mlp.down_proj.weight": randn(generator, h, shape.intermediate, dtype=dt),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(h, dtype=dt),
    }
    if input_layernorm:
        out[f"{prefix}.input_layernorm.weight"] = torch.ones(h, dtype=dt)
    if hidden_norm:
        out[f"{prefix}.hidden_norm.weight"] = torch.ones(h, dtype=dt)
    return out
