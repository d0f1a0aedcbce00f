"""Every command line in the code blocks of the README and docs/*.md parses against the code it names.

The commands themselves run (at small sizes) in the CLI tests and in the quickstart; this test catches the
README drifting from the configs: a renamed key, a removed config group, a Hydra override that no longer
composes, an argparse flag that no longer exists. Hydra commands are composed in-process with their
overrides (the README's placeholders replaced by a path); argparse commands parse their arguments.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# console script -> primary Hydra config (pyproject [project.scripts] -> @hydra.main config_name)
HYDRA = {
    "robot-rl-quickstart": "quickstart",
    "robot-rl-collect": "collect",
    "robot-rl-train-bc": "train_bc",
    "robot-rl-eval": "eval",
    "robot-rl-train-residual": "train_residual",
    "robot-rl-train-reward": "train_reward",
    "robot-rl-teleop": "teleop",
    "robot-rl-deploy": "deploy",
    "robot-rl-sim-driver": "sim_driver",
    "robot-rl-benchmark": "benchmark",
}
# argparse commands -> module whose parser() builds their argument parser
ARGPARSE = {
    "bench/": None,  # python bench/<script>.py: the script's own parser (loaded from its file)
    "robot_rl.rl.compare": "robot_rl.rl.compare",
}
PLACEHOLDER = "/tmp/readme-placeholder"


GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # the user's guide: README and docs/*.md
# (docs/results/ holds studies: their command lines are records of what ran)


def readme_commands() -> list[str]:
    """Command lines of the guide's fenced code blocks: continuations joined, comments dropped."""
    text = "\n".join(p.read_text() for p in GUIDES)
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()  # trailing comments are separated by two spaces
            line = line.rstrip("&").strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def fill_placeholders(arg: str) -> str:
    """runs/train_bc/<run>/policy -> a path; base=... -> base=<path>."""
    arg = re.sub(r"<[^>]+>", "x", arg)
    return re.sub(r"=\.\.\.$", f"={PLACEHOLDER}", arg)


# Hydra's own command-line flags (not overrides): flag -> whether it takes a value (`--cfg job`)
HYDRA_FLAGS = {"--cfg": True, "-c": True, "--package": True, "-p": True, "--resolve": False, "--info": False,
               "--help": False, "--hydra-help": False, "-m": False, "--multirun": False}


def drop_hydra_flags(words: list[str]) -> list[str]:
    """The overrides of a command line, without Hydra's own flags and their values."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in HYDRA_FLAGS:
            skip = HYDRA_FLAGS[w]
        else:
            out.append(w)
    return out


def hydra_commands() -> list[tuple[str, list[str]]]:
    cmds = []
    for line in readme_commands():
        words = shlex.split(line)
        if words and words[0] in HYDRA:
            cmds.append((words[0], [fill_placeholders(w) for w in drop_hydra_flags(words[1:])]))
    return cmds


def test_readme_has_commands_of_every_cli():
    used = {c for c, _ in hydra_commands()}
    missing = sorted(set(HYDRA) - used - {"robot-rl-sim-driver"} - used)
    assert not missing, f"README shows no command line for {missing}"


@pytest.fixture(scope="module")
def composed():
    """Each Hydra command's primary config, composed once (a compose takes ~0.5 s; the README has dozens of
    command lines, whose overrides are then checked against these)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        yield {name: compose(config_name=name) for name in sorted({HYDRA[c] for c, _ in hydra_commands()})}
    GlobalHydra.instance().clear()


def group_dirs(config_name: str) -> list[Path]:
    """Where a config's groups live: configs/, plus its hydra.searchpath (train_bc: configs/bc/)."""
    return [ROOT / "configs", *([ROOT / "configs" / "bc"] if config_name == "train_bc" else [])]


def has_key(cfg, dotted: str) -> bool:
    """The dotted key exists (mandatory `???` values included, which OmegaConf.select treats as absent)."""
    node = cfg
    for part in dotted.split("."):
        if not hasattr(node, "keys") or part not in list(node.keys()):
            return False
        node = node._get_node(part)
    return True


@pytest.mark.parametrize("command,overrides", hydra_commands(),
                         ids=[" ".join([c, *o])[:80] for c, o in hydra_commands()])
def test_readme_hydra_command_composes(composed, command, overrides):
    """Every override names a config group option that exists or a key of the composed config (a `+key`
    adds one), and its value parses: what Hydra itself would reject before running the command."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    name = HYDRA[command]
    cfg = composed[name]
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.key_or_group
        if o.is_add():
            continue
        group = [d / key for d in group_dirs(name) if (d / key).is_dir()]
        if group:
            option = str(o.value())
            assert any((g / f"{option}.yaml").exists() for g in group), (
                f"README: {command} {key}={option}: no such option in configs/{key}/")
            continue
        if key.startswith("hydra."):
            continue
        assert has_key(cfg, key), (
            f"README: {command} overrides {key!r}, which is not a key of configs/{name}.yaml")


def argparse_commands() -> list[tuple[str, list[str]]]:
    cmds = []
    for line in readme_commands():
        words = shlex.split(line)
        if len(words) >= 2 and words[0] == "python":
            if words[1].startswith("bench/"):
                cmds.append((words[1], [fill_placeholders(w) for w in words[2:]]))
            elif words[1] == "-m" and words[2] in ARGPARSE:
                cmds.append((words[2], [fill_placeholders(w) for w in words[3:]]))
    return cmds


@pytest.mark.parametrize("target,args", argparse_commands(), ids=[t for t, _ in argparse_commands()])
def test_readme_python_command_parses(target, args, monkeypatch):
    """The script's argparse accepts the README's flags (parse only: argparse exits 2 on an unknown flag)."""
    import argparse

    if target.startswith("bench/"):
        path = ROOT / target
        assert path.exists(), f"README runs {target}, which does not exist"
        source = path.read_text()
        assert "argparse" in source, f"{target} takes no arguments but the README passes {args}"
        flags = {a.split("=")[0] for a in args if a.startswith("--")}
        for flag in flags:
            assert re.search(rf"['\"]{re.escape(flag)}['\"]", source), f"{target} has no {flag} option"
        return
    module = importlib.import_module(ARGPARSE[target])
    parsed = {}

    def fake_parse(self, args=None, namespace=None):  # record instead of running the command
        ns = original(self, args, namespace)
        parsed["ns"] = ns
        raise SystemExit(0)

    original = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", fake_parse)
    with pytest.raises(SystemExit) as e:
        module.main(args)
    assert e.value.code == 0 and "ns" in parsed
