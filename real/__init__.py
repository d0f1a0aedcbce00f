"""Deployment: the ROS 2 control node, its safety layer, transports (DDS, rclpy), the simulated robot driver,
recording and the ament package files (real/ros2/). See README, "Deploying with ROS 2"."""
