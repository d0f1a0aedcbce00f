"""ros2 launch robot_rl_ros deploy.launch.py policy:=/path/to/checkpoint [rate_hz:=100] [limits:=/path/limits.yaml] ...

Starts the robot_rl control node (robot_rl_deploy) with the `ros2` deploy profile (rclpy transport). Every
launch argument becomes one Hydra override of configs/deploy.yaml with its value taken verbatim (spaces, quotes,
commas: instruction:='lift the red cube'); `overrides` passes any others through in Hydra syntax, separated by
spaces (e.g. overrides:="deploy.watchdog.stop_after_s=0.3 record.store=/data/run.zarr").
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import EnvironmentVariable, LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_rl_ros"

# launch argument, Hydra key, default, description
ARGUMENTS = (
    ("policy", "policy", "expert", "policy checkpoint directory (or 'expert', or module:function)"),
    ("task", "task", "lift", "task the policy was trained on (configs/task/)"),
    ("deploy", "deploy", "ros2", "deploy profile (configs/deploy/): transport, topics, limits, blending"),
    ("domain_id", "deploy.domain_id", EnvironmentVariable("ROS_DOMAIN_ID", default_value="0"),
     "DDS domain (default: ROS_DOMAIN_ID, else 0); pick a private one per robot cell"),
    ("rate_hz", "deploy.rate_hz", "100.0", "control rate (Hz), a whole multiple of the policy's control_hz"),
    ("limits", "deploy.limits_file", "", "YAML of per-joint limits {joint: {lower, upper, velocity, max_step}} (empty: the robot's)"),
    ("joint_states_topic", "deploy.topics.joint_states", "/joint_states", "sensor_msgs/JointState input"),
    ("command_type", "deploy.command_type", "position_array", "position_array (forward_position_controller) | joint_trajectory"),
    ("position_command_topic", "deploy.topics.position_commands", "/forward_position_controller/commands", "std_msgs/Float64MultiArray output"),
    ("trajectory_command_topic", "deploy.topics.trajectory_commands", "/joint_trajectory_controller/joint_trajectory", "trajectory_msgs/JointTrajectory output"),
    ("estop_topic", "deploy.topics.estop", "/robot_rl/estop", "std_msgs/Bool e-stop input (true latches a stop)"),
    ("reset_topic", "deploy.topics.reset", "/robot_rl/reset", "std_msgs/String reset input: the run's reset token (printed at start) clears a latched stop"),
    ("object_pose_topic", "deploy.topics.object_pose", "/robot_rl/object_pose", "geometry_msgs/PoseStamped of the task object"),
    ("instruction", "deploy.instruction", "", "language instruction for policies that read one (VLA), e.g. 'lift the red cube'"),
)


def hydra_arguments():
    """The node's command-line arguments, as substitution lists: one `key:=value` per launch argument (the node
    quotes the value for Hydra: real/cli/deploy.py hydra_argv) and `--overrides=TEXT`. Each list is one argv
    element: launch never splits a substituted value."""
    args = [[f"{key}:=", LaunchConfiguration(name)] for name, key, _, _ in ARGUMENTS]
    args.append(["--overrides=", LaunchConfiguration("overrides")])
    return args


def generate_launch_description():
    declared = [DeclareLaunchArgument(name, default_value=default, description=desc) for name, _, default, desc in ARGUMENTS]
    declared.append(DeclareLaunchArgument("overrides", default_value="", description="more Hydra overrides, space-separated"))
    node = Node(
        package=PACKAGE,
        executable="robot_rl_deploy",
        name="robot_rl_deploy",
        output="screen",
        arguments=hydra_arguments(),
    )
    return LaunchDescription([*declared, node])
