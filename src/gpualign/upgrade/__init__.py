"""The driver-upgrade walk: the GPU Operator's state machine, kept in the operator's own node keys."""
