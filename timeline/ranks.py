"""Which distributed rank a recorded process is, from its environment.

Launchers (torchrun, mpirun, srun, deepspeed) tell each worker its place in
the job through environment variables set before exec.  The recorder reads
/proc/PID/environ once per process image (when it learns of the exec) and
keeps only the few variables below, as small integers: the environment is
the target's to fill, so it is read bounded and parsed as bytes, and
anything that is not a plain decimal number is ignored.
"""
from __future__ import annotations

import os

ENVIRON_MAX = 256 * 1024  # bytes read from /proc/PID/environ at most (ARG_MAX-sized envs are rare)
VALUE_MAX = 9             # digits: ranks below 10**9

# field -> variables that give it, first found wins (torchrun, then MPI, then Slurm)
RANK_VARS: dict[str, tuple[bytes, ...]] = {
    "rank": (b"RANK", b"OMPI_COMM_WORLD_RANK", b"PMI_RANK", b"SLURM_PROCID"),
    "local_rank": (b"LOCAL_RANK", b"OMPI_COMM_WORLD_LOCAL_RANK", b"MPI_LOCALRANKID", b"SLURM_LOCALID"),
    "world_size": (b"WORLD_SIZE", b"OMPI_COMM_WORLD_SIZE", b"PMI_SIZE", b"SLURM_NTASKS"),
}
_WANTED = {name for names in RANK_VARS.values() for name in names}


def parse_environ(data: bytes) -> dict[str, int]:
    """{"rank": 3, "local_rank": 1, "world_size": 8} (only the fields found)
    from the NUL-separated bytes of /proc/PID/environ."""
    found: dict[bytes, int] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if not sep or name not in _WANTED or name in found:
            continue
        if 0 < len(value) <= VALUE_MAX and value.isdigit() and value.isascii():
            found[name] = int(value)
    out = {}
    for field, names in RANK_VARS.items():
        for name in names:
            if name in found:
                out[field] = found[name]
                break
    return out


def read_ranks(pid: int) -> dict[str, int]:
    """The rank fields of a live process; {} when it has none, is gone, or
    its environ cannot be read."""
    try:
        fd = os.open(f"/proc/{int(pid)}/environ", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        chunks, left = [], ENVIRON_MAX
        while left > 0:
            b = os.read(fd, min(left, 65536))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError:
        return {}
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if left <= 0:  # cut: the last entry may be partial
        data = data[:data.rfind(b"\0") + 1]
    return parse_environ(data)


def rank_label(ranks: dict) -> str | None:
    """`rank 3` for track names, so ranks sort and read naturally."""
    r = ranks.get("rank")
    return None if r is None else f"rank {r}"


class RankWatcher:
    """Consumer-thread helper: looks at each recorded process once per image
    (ctx.processes generation) and returns the rank records not yet written,
    [{"pid": 12, "rank": 3, "local_rank": 1, "world_size": 8}, ...].
    Processes without rank variables cost one bounded read per exec."""

    def __init__(self):
        self._seen: dict[int, int] = {}  # pid -> generation looked at

    def poll(self, processes: dict[int, int]) -> list[dict]:
        out = []
        for pid, gen in processes.items():
            if self._seen.get(pid) == gen:
                continue
            self._seen[pid] = gen
            r = read_ranks(pid)
            if r:
                out.append({"pid": pid, **r})
        for pid in [p for p in self._seen if p not in processes]:
            del self._seen[pid]
        return out
