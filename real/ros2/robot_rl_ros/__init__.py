"""The ament package robot_rl_ros: the ROS 2 executable and launch file of robot_rl's deployment node."""
