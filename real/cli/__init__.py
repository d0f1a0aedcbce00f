"""Console scripts of the deployment side: robot-rl-deploy, robot-rl-sim-driver."""
