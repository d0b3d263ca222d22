"""A comparable snapshot of an SGLang ``ModelConfig``: its hf configs and its plain attributes."""

from __future__ import annotations

from typing import Any

_SCALARS = (str, int, float, bool, type(None))


class _NotPlain(Exception):
    pass


def _plain(value: Any) -> Any:
    """A JSON-ready copy of ``value`` when it is plain data (raises :class:`_NotPlain`)."""
    if isinstance(value, _SCALARS):
        return value
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value)
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    raise _NotPlain


def _plain_or(value: Any, fallback: Any) -> Any:
    try:
        return _plain(value)
    except _NotPlain:
        return fallback


def hf_config_dict(config: Any) -> dict[str, Any]:
    """``config.to_dict()`` reduced to plain data (dtypes as strings, objects as their type)."""
    return {k: _plain_or(v, f"<{type(v).__name__}>") for k, v in config.to_dict().items()}


def model_config_snapshot(model_config: Any) -> dict[str, Any]:
    """``{"hf_config", "hf_text_config", "attributes", "not_compared"}`` of a ModelConfig."""
    attributes: dict[str, Any] = {}
    not_compared: list[str] = []
    for name, value in sorted(vars(model_config).items()):
        if name not in ("hf_config", "hf_text_config"):
            plain = _plain_or(value, _NotPlain)
            if plain is _NotPlain:
                not_compared.append(name)
            else:
                attributes[name] = plain
    text_config = model_config.hf_text_config
    return {
        "hf_config": hf_config_dict(model_config.hf_config),
        "hf_text_config": (
            None if text_config is model_config.hf_config else hf_config_dict(text_config)
        ),
        "attributes": attributes,
        "not_compared": not_compared,
    }


def snapshot_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Human-readable list of what differs between two snapshots (empty when equal)."""
    diffs: list[str] = []
    for part in ("hf_config", "hf_text_config", "attributes"):
        left, right = a.get(part) or {}, b.get(part) or {}
        for key in sorted(set(left) | set(right)):
            x, y = left.get(key, "<absent>"), right.get(key, "<absent>")
            if x != y:
                diffs.append(f"{part}.{key}: {x!r} != {y!r}")
    return diffs
