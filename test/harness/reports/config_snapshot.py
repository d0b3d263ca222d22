"""A comparable snapshot of an SGLang ``ModelConfig``: its hf configs and its plain attributes."""

from __future__ import annotations

from typing import Any

_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> tuple[bool, Any]:
    """(True, a JSON-ready copy) when ``value`` is plain data; (False, None) otherwise."""
    if isinstance(value, _SCALARS):
        return True, value
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return True, str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        out = []
        for item in items:
            ok, plain = _plain(item)
            if not ok:
                return False, None
            out.append(plain)
        return True, out
    if isinstance(value, dict):
        plain_dict = {}
        for key, item in value.items():
            ok, plain = _plain(item)
            if not ok:
                return False, None
            plain_dict[str(key)] = plain
        return True, plain_dict
    return False, None


def hf_config_dict(config: Any) -> dict[str, Any]:
    """``config.to_dict()`` reduced to plain data (dtypes as strings, objects as their type)."""
    raw = config.to_dict()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        ok, plain = _plain(value)
        out[key] = plain if ok else f"<{type(value).__name__}>"
    return out


def model_config_snapshot(model_config: Any) -> dict[str, Any]:
    """``{"hf_config", "hf_text_config", "attributes", "not_compared"}`` of a ModelConfig."""
    attributes: dict[str, Any] = {}
    not_compared: list[str] = []
    for name, value in sorted(vars(model_config).items()):
        if name in ("hf_config", "hf_text_config"):
            continue
        ok, plain = _plain(value)
        if ok:
            attributes[name] = plain
        else:
            not_compared.append(name)
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
            if left.get(key, "<absent>") != right.get(key, "<absent>"):
                diffs.append(
                    f"{part}.{key}: {left.get(key, '<absent>')!r} != {right.get(key, '<absent>')!r}"
                )
    return diffs
