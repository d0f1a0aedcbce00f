"""ament_python package `robot_rl`: the deployment node's ROS 2 executable and launch file.

The node's code is the robot-rl Python distribution (this repository), installed into the Python that ROS 2
runs (`pip install -e <repo>`); this package only registers the executable `robot_rl_deploy`
(real.cli.deploy:ros_main) and installs launch/deploy.launch.py, package.xml and the ament index marker.
"""

from setuptools import setup

PACKAGE = "robot_rl"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", ["launch/deploy.launch.py"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="robot_rl maintainers",
    maintainer_email="robot-rl@example.com",
    description="robot_rl deployment node (fixed-rate policy control behind a safety layer)",
    license="Apache-2.0",
    entry_points={"console_scripts": ["robot_rl_deploy = real.cli.deploy:ros_main"]},
)
