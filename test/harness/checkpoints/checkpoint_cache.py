"""Where the tiny checkpoints live: cache keys, generator versions, atomic writes.

Every generated checkpoint is cached under ``<repo>/.cache/tiny-models/<kind>-<hash>``
(gitignored; ``SPECINIT_TINY_MODEL_CACHE`` moves the root), keyed by a hash of every parameter
plus its kind's generator version and the installed transformers release, and written
atomically (to a temporary directory, then renamed) so an interrupted run never leaves a
half-written model. Each family module (:mod:`harness.checkpoints.llama_family`, ...) names its
kinds as :class:`Kind` and calls :func:`cached_checkpoint`; :mod:`harness.checkpoints.tiny_configs`
shares :func:`write_once`.

Cheap to import (no torch, no transformers).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CACHE_ROOT = REPO_ROOT / ".cache" / "tiny-models"
CACHE_ENV = "SPECINIT_TINY_MODEL_CACHE"


@dataclass(frozen=True)
class Kind:
    """One kind of generated checkpoint: its name (the cache directory's prefix), the function
    that writes it (``writer(directory, shape, seed, **extra)``) and its generator version.

    Bump ``generator_version`` when the files ``writer`` produces change, so stale cache
    entries are not reused. (Kinds that lived in the old ``tiny_models`` module are at 1, those
    of ``tiny_models_extra`` at 2: their cache keys are unchanged by the split.)
    """

    name: str
    writer: Callable[..., Path]
    generator_version: int


def resolve_cache_root(root: Path | None = None) -> Path:
    """``root``, else ``$SPECINIT_TINY_MODEL_CACHE``, else ``<repo>/.cache/tiny-models``."""
    return Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_ROOT)


def cache_key(
    kind: str, shape: Any, seed: int, extra: dict[str, Any], generator_version: int
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


def write_once(final: Path, marker: str, write: Callable[[Path], None]) -> Path:
    """``final``, written by ``write(tmp)`` into a temporary sibling and renamed into place,
    unless ``final / marker`` already exists (the file a complete copy always has)."""
    if (final / marker).is_file():
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
    """Return the cached checkpoint for ``(kind, shape, seed, extra)``, generating it if absent.

    ``extra`` is passed to the writer (e.g. ``num_nextn_predict_layers=0`` for EAGLE3 drafts).
    """
    root = resolve_cache_root(cache_root)
    final = root / cache_key(kind.name, shape, seed, extra, kind.generator_version)

    def write(tmp: Path) -> None:
        kind.writer(tmp, shape, seed, **extra)
        (tmp / "tiny-model.json").write_text(
            json.dumps({"kind": kind.name, "shape": asdict(shape), "seed": seed, **extra}, indent=1)
        )

    return write_once(final, "model.safetensors", write)
