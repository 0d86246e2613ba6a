"""Kernel context for training stalls: GPU-driver ioctls, block I/O, DataLoader roles, counters.

BPF programs: ioctl.bpf.c, block.bpf.c, counters.bpf.c here, each with its
record header and dtype module (ioctl_records.h + ioctl_records.py...).  Recorder
plugins: plugins.py (ioctl filter, /dev snapshot, samplers).  Converters:
convert_ioctl.py, convert_block.py, convert_counters.py, dataloader.py.
docs/kernel-context.md describes the trace layout.
"""
