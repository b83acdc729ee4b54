"""The rig's own actions on the control plane as scenario steps: kill -9 of the apiserver or the scheduler."""
