"""Config dataclasses are the single source of every default; this is the one strict conversion into them.

    from_mapping(cls, node, path)   dict / OmegaConf node -> cls: unknown keys named with the valid ones,
                                    every value checked against the field's type (nested dataclasses,
                                    tuples, unions, Literal), then cls.__post_init__ checks the ranges
    defaults(cls)                   the dataclass's defaults as plain data (what Hydra composes from)
    register(group, name, cls)      store those defaults in Hydra's ConfigStore; a group's YAML lists the
                                    node in its defaults and only overrides (configs/, README "Configuration")
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")
MISSING = "???"  # a value the user must give (OmegaConf's mandatory marker)


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the fix."""


def from_mapping(cls: type[T], node: Any, path: str = "") -> T:
    """`cls` built from a mapping (dict or OmegaConf node; None = all defaults), strictly.

    `path` prefixes key names in errors (e.g. "rl.learner"). Raises ConfigError naming the key, the value and
    what it must be; errors of cls.__post_init__ (ValueError) pass through as they are."""
    if node is None:
        node = {}
    node = _container(node)
    if not isinstance(node, dict):
        raise ConfigError(f"{path or cls.__name__}={node!r} must be a mapping of {cls.__name__} keys")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(node) - set(fields), key=str)
    if unknown:
        where = f"{path} " if path else ""
        raise ConfigError(f"unknown {where}key(s) {unknown}; valid keys: {sorted(fields)}")
    hints = _hints(cls)
    kwargs = {name: _convert(hints[name], value, _join(path, name)) for name, value in node.items()}
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing {', '.join(_join(path, n) for n in missing)}: give a value ({cls.__name__})")
    return cls(**kwargs)


def check_whole(obj: Any, minimums: dict[str, int], prefix: str = "") -> None:
    """ValueError naming the first attribute of `obj` in `minimums` that is not a whole number >= its minimum
    (`prefix` goes before the key in the message, e.g. "distributed.")."""
    import numpy as np

    for name, lo in minimums.items():
        v = getattr(obj, name)
        if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo):
            raise ValueError(f"{prefix}{name}={v!r} must be a whole number >= {lo}")


def defaults(cls: type, **required: Any) -> dict:
    """The defaults of dataclass `cls` as plain data (tuples as lists); fields without a default are
    MISSING ('???') unless given in `required`."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in required:
            value = required[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = MISSING
        out[f.name] = _plain(value)
    return out


def register(group: str, name: str, cls: type) -> None:
    """Store `cls`'s defaults in Hydra's ConfigStore as `<group>/<name>`; a YAML extends the node by listing
    `- /<group>/<name>@_here_` in its defaults."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group=group, name=name, node=defaults(cls))
    _REGISTERED[f"{group}/{name}"] = cls


_REGISTERED: dict[str, type] = {}


def registered(group: str, name: str) -> type | None:
    """The dataclass `register` stored as `<group>/<name>` (its field comments document a command's keys)."""
    return _REGISTERED.get(f"{group}/{name}")


# ---- conversion ---------------------------------------------------------------------------------------------
def _container(node: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _convert(tp: Any, value: Any, path: str) -> Any:
    """`value` as type `tp`, or ConfigError naming `path`."""
    value = _container(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for alt in (a for a in args if a is not type(None)):
            try:
                return _convert(alt, value, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}={value!r} must be {_describe(tp)}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{path}={value!r} must be one of {', '.join(map(repr, args))}")
    if dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value) and isinstance(value, tp):
            return value
        return from_mapping(tp, value, path)
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}={value!r} must be {_describe(tp)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{path}={list(value)!r} must be {_describe(tp)}")
            items = [_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value))]
        else:
            item = args[0] if args else Any
            items = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or tp) is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}={value!r} must be a mapping")
        if len(args) == 2:
            return {k: _convert(args[1], v, f"{path}.{k}") for k, v in value.items()}
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # 2e6 on a command line is a whole number
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:  # an annotation we do not interpret: the dataclass checks it
        return value
    raise ConfigError(f"{path}={value!r} must be {_describe(tp)}")


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    if origin in (tuple, list) or tp in (tuple, list):
        item = args[0] if args else None
        return "a list of " + {bool: "true/false values", int: "whole numbers", float: "numbers",
                               str: "strings"}.get(item, _describe(item) if item is not None else "values")
    if origin is dict or tp is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} keys"
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))
