"""The ament_python package (real/ros2/): package.xml validated by catkin_pkg, setup files, and the launch file.

ROS 2's launch modules are not installable here, so the launch file is imported with stand-in `launch` /
`launch_ros` modules that record what it builds; the node's command line it produces must compose into a
valid robot-rl-deploy configuration.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
import types
from pathlib import Path

import pytest

from real import messages as M
from tests.test_real_config import compose, lift_env

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "real" / "ros2"


def test_package_xml_is_a_valid_ament_python_package():
    from catkin_pkg.package import parse_package

    pkg = parse_package(str(PKG))
    pkg.validate()
    assert pkg.name == "robot_rl" and pkg.package_format == 3
    assert pkg.get_build_type() == "ament_python"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert pkg.version == version
    exec_deps = {d.name for d in pkg.exec_depends}
    msg_pkgs = {M.ros_type_name(c).split("/")[0] for c in M.ALL_TYPES}
    assert msg_pkgs | {"rclpy", "launch", "launch_ros"} <= exec_deps


def _setup_call():
    tree = ast.parse((PKG / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return {kw.arg: kw.value for kw in call.keywords}


def test_setup_installs_the_executable_launch_file_and_ament_marker():
    kw = _setup_call()
    scripts = ast.literal_eval(kw["entry_points"])["console_scripts"]
    assert scripts == ["robot_rl_deploy = real.cli.deploy:ros_main"]
    from real.cli import deploy

    assert callable(deploy.ros_main)
    data = (PKG / "setup.py").read_text()
    for f in ("resource/{PACKAGE}", "package.xml", "launch/deploy.launch.py"):
        assert f in data
    assert (PKG / "resource" / "robot_rl").is_file() and (PKG / "launch" / "deploy.launch.py").is_file()
    cfg = (PKG / "setup.cfg").read_text()
    assert "script_dir=$base/lib/robot_rl" in cfg and "install_scripts=$base/lib/robot_rl" in cfg


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class LaunchConfiguration(_Recorded):
    pass


@pytest.fixture()
def launch_file(monkeypatch):
    """deploy.launch.py imported against stand-ins for launch, launch.actions, launch.substitutions, launch_ros.actions."""
    mods = {name: types.ModuleType(name) for name in ("launch", "launch.actions", "launch.substitutions", "launch_ros", "launch_ros.actions")}
    mods["launch"].LaunchDescription = type("LaunchDescription", (_Recorded,), {})
    mods["launch.actions"].DeclareLaunchArgument = type("DeclareLaunchArgument", (_Recorded,), {})
    mods["launch.substitutions"].LaunchConfiguration = LaunchConfiguration
    mods["launch_ros.actions"].Node = type("Node", (_Recorded,), {})
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("deploy_launch", PKG / "launch" / "deploy.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(node, values: dict) -> list[str]:
    """The node's argv after launch substitutes `values` into its arguments."""
    from real.cli.deploy import hydra_argv

    def sub(part):
        return values[part.args[0]] if isinstance(part, LaunchConfiguration) else part

    return hydra_argv(["robot_rl_deploy"] + ["".join(sub(p) for p in arg) for arg in node.kwargs["arguments"]])


def test_launch_file_starts_the_deploy_executable_with_declared_arguments(launch_file):
    desc = launch_file.generate_launch_description()
    actions = desc.args[0]
    declared = {a.args[0]: a.kwargs["default_value"] for a in actions if type(a).__name__ == "DeclareLaunchArgument"}
    assert {"policy", "rate_hz", "limits", "deploy", "task", "joint_states_topic", "command_type", "overrides"} <= set(declared)
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node.kwargs["package"] == "robot_rl" and node.kwargs["executable"] == "robot_rl_deploy"
    # with every default, the command line composes into a valid config (ros2 profile, rclpy transport)
    argv = _argv(node, declared)
    cfg = compose(*argv[1:])
    from real.cli.deploy import check_command_config

    env_cfg, dcfg = check_command_config(cfg)
    assert dcfg.transport == "rclpy" and cfg.policy == "expert" and dcfg.limits_file is None


def test_launch_arguments_reach_the_node_configuration(launch_file, tmp_path):
    import yaml

    from real.cli.deploy import check_command_config
    from real.config import check_against_model
    from real.node import model_joints

    desc = launch_file.generate_launch_description()
    declared = {a.args[0]: a.kwargs["default_value"] for a in desc.args[0] if type(a).__name__ == "DeclareLaunchArgument"}
    node = next(a for a in desc.args[0] if type(a).__name__ == "Node")
    limits = {k: dict(v) for k, v in compose().deploy.limits.items()}
    limits["joint1"]["velocity"] = 1.0
    (tmp_path / "limits.yaml").write_text(yaml.safe_dump(limits))
    values = {**declared, "policy": "/robots/panda/checkpoint", "rate_hz": "200.0", "limits": str(tmp_path / "limits.yaml"),
              "joint_states_topic": "/panda/joint_states", "command_type": "joint_trajectory",
              "overrides": "deploy.watchdog.stop_after_s=0.3 record.store=/data/run.zarr"}
    cfg = compose(*_argv(node, values)[1:])
    _, dcfg = check_command_config(cfg)
    assert cfg.policy == "/robots/panda/checkpoint" and cfg.record.store == "/data/run.zarr"
    assert dcfg.rate_hz == 200.0 and dcfg.limits["joint1"].velocity == 1.0 and dcfg.watchdog.stop_after_s == 0.3
    assert dcfg.topics.joint_states == "/panda/joint_states" and dcfg.command_type == "joint_trajectory"
    env = lift_env()
    try:
        check_against_model(dcfg, model_joints(env))
    finally:
        env.close()


def test_rclpy_transport_without_ros2_names_the_fix():
    from real.transport import make_transport

    with pytest.raises(RuntimeError, match="transport=rclpy needs ROS 2's rclpy.*use transport=dds"):
        make_transport("rclpy", name="robot_rl_deploy")
