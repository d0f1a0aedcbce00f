"""ament_python package `robot_rl_ros`: the deployment node's ROS 2 executable and launch file.

The node's code is the robot-rl Python distribution (this repository). This package registers the executable
`robot_rl_deploy` (robot_rl_ros.launcher:main, which finds the project and runs real.cli.deploy:ros_main) and
installs launch/deploy.launch.py, package.xml and the ament index marker. Its name differs from the distribution's
(robot-rl): setuptools' console script looks its entry point up by distribution name, and robot_rl would find the
pip distribution first.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PACKAGE = "robot_rl_ros"
CHECKOUT = Path(__file__).resolve().parents[2]  # colcon runs this file from the real source directory


class build_py_recording_checkout(build_py):
    """Also writes robot_rl_ros/checkout.txt: the robot_rl checkout the launcher imports when it is not installed."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / PACKAGE / "checkout.txt"
        target.write_text(f"{CHECKOUT}\n")

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PACKAGE / "checkout.txt")]


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", ["launch/deploy.launch.py"]),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="robot_rl maintainers",
    maintainer_email="robot-rl@example.com",
    description="robot_rl deployment node (fixed-rate policy control behind a safety layer)",
    license="Apache-2.0",
    cmdclass={"build_py": build_py_recording_checkout},
    entry_points={"console_scripts": ["robot_rl_deploy = robot_rl_ros.launcher:main"]},
)
