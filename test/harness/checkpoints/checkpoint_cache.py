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


def resolve_cache_root(root: Path | None = None) -> Path:
    """``root``, else ``$SPECINIT_TINY_MODEL_CACHE``, else ``<repo>/.cache/tiny-models``."""
    return Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


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


@dataclass(frozen=True)
class Kind:
    """One kind of generated checkpoint: its name (the cache directory's prefix), the function
    that writes it (``writer(directory, shape, seed, **extra)``), its generator version and its
    default shape. ``kind(shape, seed=, cache_root=, **extra)`` is the cached checkpoint,
    generated if absent, in ``<kind>-<12 hex of the parameter hash>``."""

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
