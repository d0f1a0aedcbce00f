"""Registries of what a user may bring: tasks, their scripted experts, robots.

Each maps a name to an object and fills from three places:
- the project's own entries (built in);
- installed packages that declare entry points in the registry's group, e.g. in their pyproject.toml

      [project.entry-points."robot_rl.tasks"]
      reach = "my_tasks.reach:ReachTask"
      [project.entry-points."robot_rl.experts"]
      reach = "my_tasks.reach:ReachExpert"

  so every process (console scripts, Ray actors, the benchmark's stage subprocesses) finds them with nothing of
  ours edited; a package's module is imported only when its name is looked up;
- `register(name, obj)` from Python, for the process that calls it.

A name given twice (a package reusing a built-in name, two packages, two registrations) is refused with one line
naming both places wherever that name is looked up; so is an entry point whose target does not import or is not the
registry's kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib import import_module, metadata
from typing import Any

from robot_rl.common.config import ConfigError


class RegistryError(ConfigError):
    """A registry entry that cannot be used (a name clash, an entry point that does not load)."""


class Registry(Mapping):
    """name -> object of one kind (`kind`: "task", "expert", "robot"), from built-ins, the entry-point `group` of the
    installed packages and `register` calls. `check(obj)` returns an error message for an object of the wrong kind
    (None when it is fine); `named`: the object's own `name` attribute must be the name it is registered under."""

    def __init__(self, kind: str, group: str, builtins: Callable[[], dict[str, Any]],
                 check: Callable[[Any], str | None], named: bool = False):
        self.kind, self.group = kind, group
        self._builtins = builtins  # called on first use: built-in modules import lazily
        self._check, self._named = check, named
        self._entries: dict[str, Any] | None = None  # name -> object, or an EntryPoint not loaded yet
        self._origin: dict[str, str] = {}  # name -> where it came from, for clash messages

    def _table(self) -> dict[str, Any]:
        if self._entries is None:
            entries, origin = {}, {}
            for name, obj in self._builtins().items():
                entries[name], origin[name] = obj, "robot_rl (built in)"
            for ep in metadata.entry_points(group=self.group):
                where = f"entry point {ep.name} = {ep.value!r} of package {ep.dist.name if ep.dist else '?'}"
                if ep.name in entries:  # refused where the name is used; the registry's other names still work
                    entries[ep.name] = RegistryError(
                        f"{self.kind} {ep.name!r} is declared twice: by {origin[ep.name]} and by {where}; rename one "
                        f"of them ({self.group!r} entry points)")
                    continue
                entries[ep.name], origin[ep.name] = ep, where
            self._entries, self._origin = entries, origin
        return self._entries

    def register(self, name: str, obj: Any) -> Any:
        """Add `obj` under `name` for this process (registering the same object again is a no-op); returns obj."""
        table = self._table()
        if name in table and table[name] is not obj:
            raise RegistryError(f"{self.kind} {name!r} is already registered by {self._origin[name]}; pick another "
                                "name")
        self._validate(name, obj, "register()")
        table[name], self._origin[name] = obj, "register() in this process"
        return obj

    def __getitem__(self, name: str) -> Any:
        table = self._table()
        obj = table[name]  # KeyError for an unknown name: callers name the valid ones
        if isinstance(obj, RegistryError):
            raise obj
        if isinstance(obj, metadata.EntryPoint):
            try:
                obj = obj.load()
            except (ImportError, AttributeError) as e:
                raise RegistryError(f"{self.kind} {name!r}: {self._origin[name]} does not load ({e}); install the "
                                    "package or fix its entry point") from None
            self._validate(name, obj, self._origin[name])
            table[name] = obj
        return obj

    def _validate(self, name: str, obj: Any, origin: str) -> None:
        problem = self._check(obj)
        if problem is None and self._named and getattr(obj, "name", None) != name:
            problem = f"its name attribute is {getattr(obj, 'name', None)!r}; it must be the registered name {name!r}"
        if problem:
            raise RegistryError(f"{self.kind} {name!r} from {origin}: {problem}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:  # a name, without importing its package
        return name in self._table()

    def origin(self, name: str) -> str:
        """Where `name` came from (built in, an entry point of a package, register())."""
        self._table()
        return self._origin[name]


def load_object(path: str, what: str) -> Any:
    """The object at "module:attr" (attr may be dotted); RegistryError names `what` and the path when it is not there."""
    module, sep, attr = str(path).partition(":")
    if not sep or not module or not attr:
        raise RegistryError(f"{what} {path!r}: give it as 'module:name' (e.g. my_pkg.experts:act)")
    try:
        obj = import_module(module)
    except ImportError as e:
        raise RegistryError(f"{what} {path!r}: module {module!r} does not import ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RegistryError(f"{what} {path!r}: module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj
