"""The layers contract (pyproject.toml [tool.importlinter]): sim -> data -> policies -> rl/reward/hil -> real.

`make test` runs lint-imports before pytest; these tests check that the contract holds, that it fails on a
back-edge, and what import-linter cannot see: a module named in a string (a registry handed to importlib).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
MODULE_STRING = re.compile(r"(robot_rl(?:\.\w+)+)(?::\w+)?")
# the folders of robot_rl's modules: robot_rl/, and the top-level folders it links as robot_rl.<name>
PACKAGES = {"robot_rl": "robot_rl", "sim": "robot_rl.sim", "policies": "robot_rl.policies", "real": "robot_rl.real"}


def layer_order() -> list[list[str]]:
    """The contract's layers, top first; each layer a list of sibling modules."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in cfg["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in re.split(r"[|:]", layer)] for layer in layers]


def rank(module: str, layers: list[list[str]]) -> int | None:
    """Index of the layer holding `module` (0 = top), None outside every layer."""
    for i, siblings in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in siblings):
            return i
    return None


def string_back_edges(top: Path) -> list[str]:
    """'file:line source -> target' for every string naming a module of a higher layer than its file's."""
    layers, edges = layer_order(), []
    for package, name in PACKAGES.items():
        for path in sorted((top / package).rglob("*.py")):  # rglob does not follow robot_rl/'s links
            parts = path.relative_to(top / package).with_suffix("").parts
            source = ".".join((name, *(parts[:-1] if parts[-1] == "__init__" else parts)))
            r_src = rank(source, layers)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    m = MODULE_STRING.fullmatch(node.value)
                    r_tgt = rank(m.group(1), layers) if m else None
                    if r_src is not None and r_tgt is not None and r_tgt < r_src:
                        edges.append(f"{path.relative_to(top)}:{node.lineno} {source} -> {m.group(1)}")
    return edges


def lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def test_layers_contract_holds():
    proc = lint(ROOT, ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_layers_contract_fails_on_a_back_edge(tmp_path):
    for package in PACKAGES:  # robot_rl/'s links stay links, to the copies
        shutil.copytree(ROOT / package, tmp_path / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "sim" / "rng.py", "a") as f:  # a function-level import, as lazy imports are written
        f.write("\n\ndef _uses_the_deploy_node():\n    from robot_rl.real import node  # noqa: F401\n")
    proc = lint(tmp_path, tmp_path)
    assert proc.returncode != 0
    assert "robot_rl.sim is not allowed to import robot_rl.real" in proc.stdout
    assert "robot_rl.sim.rng -> robot_rl.real.node" in proc.stdout


def test_no_module_names_a_higher_layer_in_a_string():
    assert string_back_edges(ROOT) == []


def test_a_registry_string_naming_a_higher_layer_is_found(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "__init__.py").write_text('REGISTRY = {"residual": "robot_rl.rl.train:Workspace"}\n')
    for package in ("sim", "robot_rl", "real"):
        (tmp_path / package).mkdir()
    assert string_back_edges(tmp_path) == ["policies/__init__.py:1 robot_rl.policies -> robot_rl.rl.train"]
