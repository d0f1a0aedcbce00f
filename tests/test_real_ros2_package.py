"""The ament_python package robot_rl_ros (real/ros2/): package.xml validated by catkin_pkg, setup files, the launch
file, and the package as colcon builds it and ROS 2 runs it.

ROS 2's launch modules are not installable here, so the launch file is imported with stand-in `launch` /
`launch_ros` modules that record what it builds; the node's command line it produces must compose into a
valid robot-rl-deploy configuration, whatever the launch arguments' values hold (spaces, quotes, commas).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tomllib
import types
from pathlib import Path

import pytest

from robot_rl.real import messages as M
from tests.test_real_config import compose, lift_env

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "real" / "ros2"
NAME = "robot_rl_ros"  # not robot_rl: the pip distribution robot-rl has that name (normalized)


def test_package_xml_is_a_valid_ament_python_package():
    from catkin_pkg.package import parse_package

    pkg = parse_package(str(PKG))
    pkg.validate()
    assert pkg.name == NAME and pkg.package_format == 3
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
    assert scripts == [f"robot_rl_deploy = {NAME}.launcher:main"]
    data = (PKG / "setup.py").read_text()
    assert f'PACKAGE = "{NAME}"' in data
    for f in ("resource/{PACKAGE}", "package.xml", "launch/deploy.launch.py"):
        assert f in data
    assert (PKG / "resource" / NAME).is_file() and (PKG / "launch" / "deploy.launch.py").is_file()
    cfg = (PKG / "setup.cfg").read_text()
    assert f"script_dir=$base/lib/{NAME}" in cfg and f"install_scripts=$base/lib/{NAME}" in cfg


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class LaunchConfiguration(_Recorded):
    pass


class EnvironmentVariable(_Recorded):
    pass


@pytest.fixture()
def launch_file(monkeypatch):
    """deploy.launch.py imported against stand-ins for launch, launch.actions, launch.substitutions, launch_ros.actions."""
    mods = {name: types.ModuleType(name) for name in ("launch", "launch.actions", "launch.substitutions", "launch_ros", "launch_ros.actions")}
    mods["launch"].LaunchDescription = type("LaunchDescription", (_Recorded,), {})
    mods["launch.actions"].DeclareLaunchArgument = type("DeclareLaunchArgument", (_Recorded,), {})
    mods["launch.substitutions"].LaunchConfiguration = LaunchConfiguration
    mods["launch.substitutions"].EnvironmentVariable = EnvironmentVariable
    mods["launch_ros.actions"].Node = type("Node", (_Recorded,), {})
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("deploy_launch", PKG / "launch" / "deploy.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _declared(desc, environ=None) -> dict:
    """{launch argument: default value}, an EnvironmentVariable default read from `environ` as launch does."""
    environ = os.environ if environ is None else environ
    out = {}
    for a in desc.args[0]:
        if type(a).__name__ == "DeclareLaunchArgument":
            d = a.kwargs["default_value"]
            out[a.args[0]] = environ.get(d.args[0], d.kwargs["default_value"]) if isinstance(d, EnvironmentVariable) else d
    return out


def _launched_args(node, values: dict) -> list[str]:
    """The node's arguments after launch substitutes `values` (each substitution list is one argv element)."""
    def sub(part):
        return values[part.args[0]] if isinstance(part, LaunchConfiguration) else part

    return ["".join(sub(p) for p in arg) for arg in node.kwargs["arguments"]]


def _argv(node, values: dict) -> list[str]:
    """The node's argv as Hydra gets it (real.cli.deploy.ros_main: ROS arguments removed, hydra_argv)."""
    from robot_rl.real.cli.deploy import hydra_argv

    return hydra_argv(["robot_rl_deploy"] + _launched_args(node, values))


def test_launch_file_starts_the_deploy_executable_with_declared_arguments(launch_file):
    desc = launch_file.generate_launch_description()
    actions = desc.args[0]
    declared = _declared(desc, environ={})
    assert {"policy", "rate_hz", "limits", "deploy", "task", "joint_states_topic", "command_type", "domain_id",
            "overrides"} <= set(declared)
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node.kwargs["package"] == NAME and node.kwargs["executable"] == "robot_rl_deploy"
    # with every default, the command line composes into a valid config (ros2 profile, rclpy transport)
    argv = _argv(node, declared)
    cfg = compose(*argv[1:])
    from robot_rl.real.cli.deploy import check_command_config

    env_cfg, dcfg = check_command_config(cfg)
    assert dcfg.transport == "rclpy" and cfg.policy == "expert" and dcfg.limits_file is None
    assert dcfg.domain_id == 0 and dcfg.instruction == ""
    # the domain follows ROS_DOMAIN_ID, as the user's ros2 tools do
    _, dcfg = check_command_config(compose(*_argv(node, _declared(desc, environ={"ROS_DOMAIN_ID": "17"}))[1:]))
    assert dcfg.domain_id == 17


def test_launch_arguments_reach_the_node_configuration(launch_file, tmp_path):
    import yaml

    from robot_rl.real.cli.deploy import check_command_config
    from robot_rl.real.config import check_against_model
    from robot_rl.real.node import model_joints

    desc = launch_file.generate_launch_description()
    declared = _declared(desc, environ={})
    node = next(a for a in desc.args[0] if type(a).__name__ == "Node")
    import dataclasses

    from robot_rl.real.config import deploy_config

    limits = {k: dataclasses.asdict(v) for k, v in deploy_config(compose().deploy).limits.items()}  # the robot's
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


def test_launch_argument_values_reach_the_config_verbatim(launch_file, tmp_path):
    """instruction:='lift the red cube' (the launch file's own example), paths with spaces, quotes, commas, `${`:
    each launch argument's value arrives as one string, exactly; `overrides` still splits into Hydra overrides."""
    desc = launch_file.generate_launch_description()
    node = next(a for a in desc.args[0] if type(a).__name__ == "Node")
    policy = tmp_path / "runs, v2" / "it's ${best} [final]"
    values = {**_declared(desc, environ={}), "instruction": "lift the red cube", "policy": str(policy),
              "overrides": "deploy.watchdog.stop_after_s=0.3 record.store='/data/run one.zarr'"}
    cfg = compose(*_argv(node, values)[1:])
    assert cfg.deploy.instruction == "lift the red cube" and cfg.policy == str(policy)
    assert cfg.deploy.watchdog.stop_after_s == 0.3 and cfg.record.store == "/data/run one.zarr"
    for text in ('say "stop", then lift', "  padded  ", "a\\b\\", "50% = half: [x]"):
        assert compose(*_argv(node, {**values, "instruction": text})[1:]).deploy.instruction == text


def _colcon_build(ws: Path) -> tuple[str, Path]:
    """(package name, install/<name>) as colcon builds an ament_python package (colcon_core/task/python/build.py): the
    system Python runs `setup.py egg_info build install --install-scripts <setup.cfg's> --single-version-externally-
    managed install_data` in the package's real directory (src/<name> links to it, as the README's steps make it) with
    a sitecustomize that moves sys.prefix to the install space."""
    import configparser

    from catkin_pkg.package import parse_package

    name = parse_package(str(PKG)).name
    setup_cfg = configparser.ConfigParser()
    setup_cfg.read(PKG / "setup.cfg")
    (ws / "src").mkdir(parents=True)
    (ws / "src" / name).symlink_to(PKG)
    build, install = ws / "build" / name, ws / "install" / name
    override = build / "prefix_override"
    override.mkdir(parents=True)
    (override / "sitecustomize.py").write_text(
        f"import sys\nif sys.prefix == {SYSTEM_PREFIX!r}:\n    sys.real_prefix = sys.prefix\n"
        f"    sys.prefix = sys.exec_prefix = {str(install)!r}\n")
    _site_packages(install).mkdir(parents=True)
    src = os.path.realpath(ws / "src" / name)
    cmd = [SYSTEM_PYTHON, "-W", "ignore:setup.py install is deprecated", "-W", "ignore:easy_install command is deprecated",
           "setup.py", "egg_info", "--egg-base", os.path.relpath(build, src), "build", "--build-base", str(build / "build"),
           "install", "--record", str(build / "install.log"), "--install-scripts", setup_cfg["install"]["install_scripts"],
           "--single-version-externally-managed", "install_data"]
    env = dict(os.environ, PYTHONPATH=f"{override}{os.pathsep}{_site_packages(install)}", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return name, install


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


SYSTEM_PYTHON = "/usr/bin/python3"


def _system_python() -> tuple[str, bool]:
    """(sys.prefix of /usr/bin/python3, whether it can build this package and import our compiled dependencies)."""
    if not Path(SYSTEM_PYTHON).is_file():
        return "", False
    probe = "import sys, setuptools; print(sys.prefix); print(sys.version_info[:2] == tuple(map(int, sys.argv[1:])))"
    done = subprocess.run([SYSTEM_PYTHON, "-c", probe, *map(str, sys.version_info[:2])], capture_output=True, text=True)
    lines = done.stdout.split()
    return (lines[0], lines[1] == "True") if done.returncode == 0 else ("", False)


SYSTEM_PREFIX, SYSTEM_PYTHON_USABLE = _system_python()


@pytest.mark.skipif(not SYSTEM_PYTHON_USABLE, reason=f"needs {SYSTEM_PYTHON} with setuptools, same version as this venv")
def test_colcon_built_executable_runs_with_the_system_python_and_readme_pythonpath(launch_file, tmp_path):
    """The package built as colcon does, its lib/robot_rl_ros/robot_rl_deploy run as ros2 launch runs it: system Python,
    PYTHONPATH = the venv's site-packages (robot_rl installed there with -e, so importable only through a .pth file)
    before the install space, the launch file's arguments plus --ros-args. Hydra's composed config (--cfg job) holds
    the launch values; the project is found in the checkout the package was built from."""
    name, install = _colcon_build(tmp_path / "ws")
    exe = install / "lib" / name / "robot_rl_deploy"  # where `ros2 run/launch <name> robot_rl_deploy` looks
    assert exe.is_file() and (install / "share" / name / "launch" / "deploy.launch.py").is_file()
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / name).is_file()
    lib = _site_packages(install)
    desc = launch_file.generate_launch_description()
    node = next(a for a in desc.args[0] if type(a).__name__ == "Node")
    values = {**_declared(desc, environ={}), "instruction": "lift the red cube", "rate_hz": "200.0",
              "overrides": "record.store=/data/robot.zarr"}
    args = [*_launched_args(node, values), "--cfg", "job", "--ros-args", "-r", "__node:=robot_rl_deploy"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": f"{sysconfig.get_paths()['purelib']}{os.pathsep}{lib}"}
    done = subprocess.run([SYSTEM_PYTHON, str(exe), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    import yaml

    cfg = yaml.safe_load(done.stdout)
    assert cfg["deploy"]["instruction"] == "lift the red cube" and cfg["deploy"]["rate_hz"] == 200.0
    assert cfg["deploy"]["transport"] == "rclpy" and cfg["record"]["store"] == "/data/robot.zarr"
    assert Path((lib / name / "checkout.txt").read_text().strip()) == ROOT


def test_rclpy_transport_without_ros2_names_the_fix():
    from robot_rl.real.transport import make_transport

    with pytest.raises(RuntimeError, match="transport=rclpy needs ROS 2's rclpy.*use transport=dds"):
        make_transport("rclpy", name="robot_rl_deploy")
