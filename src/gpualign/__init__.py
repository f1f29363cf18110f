"""gpualign: keep a Kubernetes GPU fleet's drivers aligned with its kernels."""

__version__ = "0.1.0"
