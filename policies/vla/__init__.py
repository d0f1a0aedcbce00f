"""The vision-language-action policy (kind "vla"): its configuration and policy in policy.py, the network in model.py."""
