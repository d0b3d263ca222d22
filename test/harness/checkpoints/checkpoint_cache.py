"""Where the tiny checkpoints live: cache keys, generator versions, atomic writes."""

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


@dataclass(frozen=True)
class Kind:
    """One kind of generated checkpoint: its name (the cache directory's prefix), the function
    that writes it (``writer(directory, shape, seed, **extra)``), its generator version and its
    default shape. Called, it returns the cached checkpoint (:func:`cached_checkpoint`)."""

    name: str
    writer: Callable[..., Path]
    generator_version: int
    shape: Any = None

    def __call__(self, shape: Any = None, **kw: Any) -> Path:
        return cached_checkpoint(self, self.shape if shape is None else shape, **kw)


def resolve_cache_root(root: Path | None = None) -> Path:
    """``root``, else ``$SPECINIT_TINY_MODEL_CACHE``, else ``<repo>/.cache/tiny-models``."""
    return Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


def cache_key(
    kind: str, shape: Any, seed: int, extra: dict[str, Any], generator_version: int
) -> str:
    """Directory name for one generated checkpoint: ``<kind>-<12 hex of the parameter hash>``."""
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


def write_once(final: Path, marker: str, write: Callable[[Path], None]) -> Path:
    """``final``, written by ``write(tmp)`` into a temporary sibling and renamed into place,
    unless ``final / marker`` already exists (the file a complete copy always has)."""
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


def cached_checkpoint(
    kind: Kind, shape: Any, *, seed: int = 0, cache_root: Path | None = None, **extra: Any
) -> Path:
    """Return the cached checkpoint for ``(kind, shape, seed, extra)``, generating it if absent."""
    root = resolve_cache_root(cache_root)
    final = root / cache_key(kind.name, shape, seed, extra, kind.generator_version)

    def write(tmp: Path) -> None:
        kind.writer(tmp, shape, seed, **extra)
        (tmp / "tiny-model.json").write_text(
            json.dumps({"kind": kind.name, "shape": asdict(shape), "seed": seed, **extra}, indent=1)
        )

    return write_once(final, "model.safetensors", write)
