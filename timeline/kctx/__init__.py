"""Kernel context for training stalls: GPU-driver ioctls, block I/O, DataLoader roles, counters.

BPF objects: timeline/bpf/ioctl.bpf.c, block.bpf.c, counters.bpf.c.  Recorder
plugins: plugins.py (ioctl filter, /dev snapshot, samplers).  Converters:
convert_ioctl.py, convert_block.py, convert_counters.py, dataloader.py.
docs/kernel-context.md describes the trace layout.
"""
