"""The --help page of a robot-rl-<verb> Hydra command, built from what already describes the command: its module's
docstring (what it does, examples, where it writes), the composed config's top-level keys with the values this
command line gives them, the comment next to each key (in the command's YAML, or in the config dataclass the YAML
extends with `- /schema/<name>@_here_`) and the config groups it selects, with their options.

`hydra_command` prints it for `--help` with overrides (`robot-rl-eval task=push --help`) from a config composed with
Hydra's compose API (Hydra's own --help spends seconds listing every config group); for --help with other Hydra
flags, Hydra's app help prints it through the template of configs/command.yaml, `${robot_rl_help:}`.
"""

from __future__ import annotations

import inspect
import re
import shutil
import textwrap

RESOLVER = "robot_rl_help"
KEY_WIDTH = 26  # "  key=value" column; a longer one puts its description on the next line


def register(doc: str | None) -> None:
    """Make ${robot_rl_help:} (Hydra's help template) this command's page."""
    from omegaconf import OmegaConf

    # Hydra fills the template with string.Template: a literal $ must be $$.
    OmegaConf.register_new_resolver(RESOLVER, lambda _root_: page(doc or "", _root_).replace("$", "$$"),
                                    replace=True)


def wants_help(argv: list[str]) -> bool:
    """--help / -h with nothing but overrides besides (other Hydra flags: Hydra's own --help handles them)."""
    return bool({"--help", "-h"} & set(argv)) and all(a in ("--help", "-h") or not a.startswith("-") for a in argv)


def help_page(config_name: str, doc: str | None, overrides: list[str]) -> str:
    """The page of the command of `config_name` for these overrides (a bad one raises Hydra's error)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
        return page(doc or "", cfg, config_name)


def page(doc: str, cfg, config_name: str | None = None) -> str:
    """The help text of the command whose composed config (with its `hydra` node) is `cfg`."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from robot_rl.common.cli import command_name

    hc = cfg.hydra
    config_name = config_name or HydraConfig.get().job.config_name
    command = command_name()
    width = min(shutil.get_terminal_size((100, 24)).columns, 110)
    notes = key_comments(config_name)
    values = OmegaConf.to_container(cfg, resolve=False)
    out = [textwrap.dedent(doc).strip(), "", "Options (key=value; the values this command line gives):"]
    nested = []
    for key, value in values.items():
        if key == "hydra":
            continue
        if isinstance(value, dict):
            nested.append((key, value))
            continue
        out += _entry(f"{key}={_show(value)}", notes.get(key, ""), width)
    for key, value in nested:
        names = list(value)
        keys = ", ".join(names[:8]) + (f", ... ({len(names)} keys)" if len(names) > 8 else "")
        out += _entry(f"{key}.*", f"{notes[key]}; keys: {keys}" if notes.get(key) else f"keys: {keys}", width)
    groups = [(g, c) for g, c in hc.runtime.choices.items() if c is not None and not g.startswith(("hydra", "schema"))]
    if groups:
        out += ["", "Config groups (group=option):"]
        loader = _config_loader()
        for group, choice in groups:
            options = loader.get_group_options(group, config_name=config_name) if loader else []
            if len(options) < 2 and not notes.get(group):
                continue  # nothing to choose
            text = f"one of {', '.join(options)}" if options else ""
            if notes.get(group):
                text = f"{text}; {notes[group]}" if text else notes[group]
            out += _entry(f"{group}={choice}", text, width)
    seed = next((k for k in ("seed", "rl.seed") if OmegaConf.select(cfg, k) is not None), None)
    example = f"{seed}=0,1,2" if seed else "key=a,b,c"
    out += [""] + textwrap.wrap(
        f"Sweeps: {command} -m {example} runs one job per value (per combination of several keys), each in "
        f"{_sweep_dir(cfg, config_name)}/<job>/. Every key with its value: {command} --cfg job. Hydra's own "
        f"flags: {command} --hydra-help.", width=width, break_on_hyphens=False)
    return "\n".join(out) + "\n"


def _entry(head: str, text: str, width: int) -> list[str]:
    head = f"  {head}"
    if not text:
        return [head]
    indent = " " * (KEY_WIDTH + 2)
    lines = textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                          break_on_hyphens=False) or [indent]
    if len(head) < KEY_WIDTH + 1:
        lines[0] = head.ljust(KEY_WIDTH + 2) + lines[0].lstrip()
    else:
        lines.insert(0, head)
    return lines


def _show(value) -> str:
    """A value as it is typed on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def key_comments(config_name: str) -> dict[str, str]:
    """key -> its comment: the command's YAML (top-level keys and its defaults list's groups), over the config
    dataclasses its defaults list extends at the top level (`- /schema/<name>@_here_`)."""
    from importlib.resources import files

    from robot_rl.common.config import registered

    try:
        text = (files("robot_rl.configs") / f"{config_name}.yaml").read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    notes: dict[str, str] = {}
    for schema in re.findall(r"^\s*-\s*/schema/(\w+)@_here_", text, re.M):
        cls = registered("schema", schema)
        if cls is not None:
            notes.update(source_comments(textwrap.dedent(inspect.getsource(cls)), indent=4))
    notes.update({g: c.strip() for g, c in re.findall(r"^\s*-\s*([\w/]+)\s*:\s*[^\s#]+\s*#\s*(.*)$", text, re.M)})
    notes.update(source_comments(text, indent=0))
    return {k: v.rstrip(":").strip() for k, v in notes.items()}


def source_comments(text: str, indent: int) -> dict[str, str]:
    """key -> comment of `key: ...  # comment` lines at `indent` spaces (YAML keys, dataclass fields). Comment lines
    right under such a line continue it when they do not start with a capital and the next key has its own comment;
    other comment lines right above a key without one describe that key."""
    key_line = re.compile(rf"^ {{{indent}}}(\w+)\s*:(.*)$")
    rows = []  # (key, inline comment) | ("#", comment text) | None (anything else)
    for line in text.splitlines():
        stripped = line.strip()
        m = key_line.match(line)
        if stripped.startswith("#"):
            rows.append(("#", stripped.lstrip("#").strip()))
        elif m:
            rows.append((m.group(1), re.split(r"\s#\s", m.group(2), maxsplit=1)[1].strip()
                         if re.search(r"\s#\s", m.group(2)) else ""))
        else:
            rows.append(None)
    notes: dict[str, str] = {}
    i = 0
    while i < len(rows):
        row = rows[i]
        if row is None or row[0] == "#":
            i += 1
            continue
        key, comment = row
        j = i + 1
        block = []
        while j < len(rows) and rows[j] is not None and rows[j][0] == "#":
            block.append(rows[j][1])
            j += 1
        following = rows[j] if j < len(rows) else None
        if block and comment and not block[0][:1].isupper() and (following is None or following[1]):
            comment = " ".join([comment, *block])  # a comment that goes on over the next lines
        elif block and following is not None and not following[1]:
            notes[following[0]] = " ".join(block)  # the next key's comment, above it
        if comment:
            notes[key] = comment
        i = j
    return notes


def _sweep_dir(cfg, config_name: str) -> str:
    """hydra.sweep.dir as a pattern: runs/<command>/multirun/<date>/<time>."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("dir", "multirun")
    raw = raw.replace("${hydra.job.config_name}", config_name)
    return re.sub(r"\$\{now:([^}]*)\}", lambda m: "<time>" if "%H" in m.group(1) else "<date>", raw)


def _config_loader():
    from hydra.core.global_hydra import GlobalHydra

    gh = GlobalHydra.instance()
    return gh.config_loader() if gh.is_initialized() else None
