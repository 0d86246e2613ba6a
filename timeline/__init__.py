"""timeline: a zero-code-change eBPF recorder for Python ML training."""
__version__ = "0.1.0"
