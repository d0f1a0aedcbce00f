"""robot_rl: from robot demonstrations to reliable robot behaviour (console scripts, run directories, learning)."""
