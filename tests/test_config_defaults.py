"""One truth per default: the config dataclasses hold every default, the YAML only selects and overrides.

configs/__init__.py stores each dataclass's defaults in Hydra's ConfigStore (schema/<name>); a command that
selects a group without overriding it must therefore run with exactly the dataclass's defaults, whether it is
used from Python (ResidualRLConfig()) or from the command line (robot-rl-train-residual).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from robot_rl import configs
from robot_rl.common.config import ConfigError, defaults, from_mapping

ROOT = Path(configs.__file__).parent


@pytest.fixture(scope="module")
def compose_cfg():
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        yield lambda name, *overrides: compose(config_name=name, overrides=list(overrides))
    GlobalHydra.instance().clear()


def section(cfg, path: str) -> dict:
    node = OmegaConf.select(cfg, path) if path else cfg
    return OmegaConf.to_container(node, resolve=False)


# (command, overrides, section, schema, keys the command or a group sets on purpose)
CASES = [
    ("train_residual", [], "env", "env", {"randomization"}),
    ("train_residual", [], "env.randomization", "randomization", set()),
    ("train_residual", [], "rl", "residual_rl", {"hil"}),
    ("train_residual", [], "rl.hil", "scripted_human", set()),
    ("train_residual", [], "distributed", "distributed", set()),
    ("train_residual", [], "deploy", "deploy", {"limits"}),
    ("teleop", [], "hil", "scripted_human", set()),
    ("train_bc", [], "policy", "diffusion", {"kind"}),
    ("train_bc", ["policy=vla"], "policy", "vla", {"kind"}),
    ("train_reward", ["data=x"], "", "train_reward", {"name", "data", "rollouts", "torch_threads", "env"}),
    ("quickstart", [], "reward", "train_reward", {"steps", "seed"}),
    ("benchmark", [], "", "benchmark", set()),
    ("eval", ["policy=expert", "sweep=robustness"], "sweep", "robustness", set()),
]


@pytest.mark.parametrize("command,overrides,path,schema,own", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_command_runs_with_the_dataclass_defaults(compose_cfg, command, overrides, path, schema, own):
    got = {k: v for k, v in section(compose_cfg(command, *overrides), path).items() if k not in own}
    want = {k: v for k, v in defaults(configs.schema_class(schema)).items() if k not in own}
    differ = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not differ, f"configs differ from {configs.SCHEMAS[schema]} (YAML, dataclass): {differ}"


def test_bc_keys_on_the_command_line_are_the_dataclass_defaults(compose_cfg):
    cfg = section(compose_cfg("train_bc", "data=x"), "")
    bc = defaults(configs.schema_class("bc"), data="x")
    assert {k: cfg[k] for k in bc} == bc


def test_composed_sections_convert_to_the_dataclass_defaults(compose_cfg):
    """from_mapping of a composed section gives the same object as the dataclass's constructor."""
    cfg = compose_cfg("train_residual")
    rl = from_mapping(configs.schema_class("residual_rl"), cfg.rl, "rl")
    assert dataclasses.replace(rl, hil={}) == configs.schema_class("residual_rl")()
    assert from_mapping(configs.schema_class("env"), cfg.env, "env") == configs.schema_class("env")()


def schema_extensions():
    """(yaml file, schema) for every YAML that extends a schema node in place (`/schema/<name>@_here_`)."""
    out = []
    for path in sorted(ROOT.rglob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        for entry in node.get("defaults", []) or []:
            if isinstance(entry, str) and entry.startswith("/schema/") and entry.endswith("@_here_"):
                out.append((path, entry[len("/schema/"):-len("@_here_")]))
    return out


def restated(node: dict, default: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        if k in ("defaults", "hydra") or k not in default:
            continue
        if isinstance(v, dict) and isinstance(default[k], dict):
            out += restated(v, default[k], f"{prefix}{k}.")
        elif v == default[k]:
            out.append(f"{prefix}{k}: {v!r}")
    return out


@pytest.mark.parametrize("path,schema", schema_extensions(), ids=[f"{p.relative_to(ROOT)}" for p, _ in schema_extensions()])
def test_no_yaml_restates_a_dataclass_default(path, schema):
    node = OmegaConf.to_container(OmegaConf.load(path))
    again = restated(node, defaults(configs.schema_class(schema)))
    assert not again, (f"{path.relative_to(ROOT.parent)} restates {configs.SCHEMAS[schema]} defaults {again}: "
                       "delete them (the dataclass is the one place a default lives)")


def test_every_schema_is_extended_by_some_config():
    used = {s for _, s in schema_extensions()}
    text = "".join(p.read_text() for p in ROOT.rglob("*.yaml"))
    used |= {s for s in configs.SCHEMAS if f"/schema/{s}@" in text}
    assert used == set(configs.SCHEMAS)


def test_the_conversion_names_unknown_keys_and_wrong_types():
    cls = configs.schema_class("residual_rl")
    with pytest.raises(ConfigError, match=r"unknown rl\.learner key\(s\) \['gama'\]; valid keys: \[.*'gamma'"):
        from_mapping(cls, {"learner": {"gama": 0.9}}, "rl")
    with pytest.raises(ConfigError, match=r"rl\.env_steps='many' must be a whole number"):
        from_mapping(cls, {"env_steps": "many"}, "rl")
    with pytest.raises(ConfigError, match=r"rl\.residual\.hidden\[1\]='wide' must be a whole number"):
        from_mapping(cls, {"residual": {"hidden": [64, "wide"]}}, "rl")
    with pytest.raises(ConfigError, match=r"env\.workspace_low=\[0\.2, 0\.3\] must be a list of 3"):
        from_mapping(configs.schema_class("env"), {"workspace_low": [0.2, 0.3]}, "env")
    with pytest.raises(ConfigError, match=r"missing data"):
        from_mapping(configs.schema_class("bc"), {})
    # what the conversion accepts: whole floats for ints (2e6), lists for tuples, a union's second type
    rl = from_mapping(cls, {"env_steps": 2e6, "residual": {"hidden": [64, 64], "base_features": "auto"}}, "rl")
    assert rl.env_steps == 2_000_000 and rl.residual.hidden == (64, 64) and rl.residual.base_features == "auto"


def test_reward_training_from_python_and_the_command_line_agree(compose_cfg):
    """RewardTrainConfig() is what robot-rl-train-reward composes; auto sizes resolve by the model's inputs."""
    cls = configs.schema_class("train_reward")
    cfg = compose_cfg("train_reward", "data=x")
    got = from_mapping(cls, {k: v for k, v in cfg.items() if k in {f.name for f in dataclasses.fields(cls)}})
    assert got == cls()
    assert (cls().resolved(images=False).steps, cls().resolved(images=False).batch_size) == (3000, 512)
    assert (cls().resolved(images=True).steps, cls().resolved(images=True).batch_size) == (500, 64)
    assert cls(steps=7).resolved(images=True).steps == 7
    with pytest.raises(ConfigError, match=r"inputs\.cameras\[0\]=3 must be a string"):
        from_mapping(cls, {"inputs": {"cameras": [3]}})
    with pytest.raises(ValueError, match=r"image_encoder\.channels=\[12\] must be a list of widths >= 1, each "
                                         r"divisible by image_encoder\.groups=8"):
        from_mapping(cls, {"image_encoder": {"channels": [12]}})


def test_every_command_shares_the_hydra_settings_of_configs_command_yaml():
    """No command writes .hydra/ or a log before its checks (configs/command.yaml; robot_rl.common.run_dir)."""
    commands = sorted(p.stem for p in ROOT.glob("*.yaml") if p.stem != "command")
    assert len(commands) == 10
    for name in commands:
        assert "command" in (OmegaConf.load(ROOT / f"{name}.yaml").get("defaults") or []), name
