"""`timeline record`: record a command (or a running process) into a trace."""
from __future__ import annotations

import sys
import time

import click

from ..errors import UserError
from ..recorder import DEFAULT_EVENTS, Recorder, RecordConfig
from ..safe_output import remove
from ..target import invoking_user
from ..terminal import printable
from .convert import EXIT_NO_TRACE, NoRoom, run_conversion
from .output import check_writable, human_bytes, infer_format, raw_path_for


def drop_warnings(drops: dict[str, int], causes: dict[str, dict]) -> list[str]:
    """Summary lines for lost records: a full ring and a refusal with room left
    call for different fixes.  drops: family -> lost; causes: BpfSession.drop_causes()."""
    def listing(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)

    full = {k: sum(c["full"]) for k, c in causes.items()} if causes else dict(drops)
    refused = {k: sum(c["refused"]) for k, c in causes.items()}
    out = []
    if sum(full.values()):
        out.append(f"{sum(full.values()):,} events were dropped (ring buffer full): {listing(full)}; "
                   "try a larger --buffer-size")
    if sum(refused.values()):
        pct = max(100 * c["refused_max_pending"] / c["ring_bytes"] for k, c in causes.items() if refused[k])
        out.append(f"{sum(refused.values()):,} events were refused by the kernel with the ring at most "
                   f"{pct:.1f}% full: {listing(refused)}; not a full ring, so a larger --buffer-size does not help")
    return out


class _StatusLine:
    """One self-rewriting line on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._last = 0.0

    def __call__(self, p: dict) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:  # only ever called when enabled
            return
        self._last = now
        drops = f", {p['drops']} dropped" if p["drops"] else ""
        sys.stderr.write(f"\r\x1b[2Ktimeline: recording {p['elapsed']:.0f}s, {p['records']:,} events "
                         f"({p['rate']:,.0f}/s{drops}), raw {human_bytes(p['raw_bytes'])}\r")
        sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


class _Seconds(click.ParamType):
    """A positive, finite number of seconds (0, negatives, nan and inf meant
    three different things before; none of them is a sensible setting)."""
    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (0 < v < float("inf")):
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return v


PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT on 64-bit


def _parse_events(value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    return names or DEFAULT_EVENTS


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", help="Trace file to write (default: timeline-DATE-TIME.pftrace). "
              "A .json or .json.gz name selects Chrome JSON.")
@click.option("--format", "fmt", type=click.Choice(["perfetto", "chrome"]), help="Trace format (default perfetto).")
@click.option("-p", "--pid", type=int, help="Attach to a running process and its descendants instead of launching.")
@click.option("-d", "--duration", type=_Seconds(), help="Stop recording after this many seconds.")
@click.option("--delay", type=_Seconds(), help="Record events only after this many seconds; "
              "the process tree and thread names are followed from the start.")
@click.option("-e", "--events", "events_", default=",".join(DEFAULT_EVENTS), show_default=True,
              help="Event families, comma separated (proc is always on). Known: sched, cuda, ioctl, block, counters.")
@click.option("--raw-only", is_flag=True, help="Write only the raw log (-o names it); convert later.")
@click.option("--keep-raw", is_flag=True, help="Keep the .tlraw log next to the trace after converting.")
@click.option("--as-root", is_flag=True, help="Run the command as root even when started through sudo.")
@click.option("--buffer-size", type=int, default=16, show_default=True, help="sched ring buffer size in MiB.")
@click.option("--flush-interval", type=_Seconds(), default=0.05, show_default=True,
              help="Seconds between ring buffer drains while events flow; up to 4x longer while "
                   "little moves (longer saves CPU, risks drops).")
@click.option("-q", "--quiet", is_flag=True, help="No status line or summary.")
@click.option("--cuda-lib", "cuda_libs", multiple=True, metavar="PATH",
              help="cuda family: also probe this CUDA runtime/driver/NCCL library (repeatable).")
@click.option("--cuda-mode", type=click.Choice(["full", "entry-only"]), default="full", show_default=True,
              help="cuda family: entry-only records kernel launches without their return (lowest overhead).")
@click.option("--ioctl", "ioctl_mode", type=click.Choice(["gpu", "all"]), default="gpu", show_default=True,
              help="ioctl family: gpu records calls on NVIDIA devices and counts the rest; all records every ioctl.")
@click.option("--sample-interval", type=float, default=0.5, show_default=True, metavar="S",
              help="counters family: seconds between RSS/CPU/fault (/proc) and GPU (NVML) samples; 0 turns them off.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(output, fmt, pid, duration, delay, events_, raw_only, keep_raw, as_root, buffer_size, flush_interval, quiet,
           command, cuda_libs=(), cuda_mode="full", ioctl_mode="gpu", sample_interval=0.2):
    """Record COMMAND (after --) or --pid N into a trace.

    \b
      sudo timeline record -o run.pftrace -- python train.py
      sudo timeline record --pid 1234 --duration 30
    """
    if pid is not None and command:
        raise UserError("give either a command or --pid, not both")
    if pid is not None and pid <= 0:
        raise UserError(f"--pid {pid}: a process id is a positive number")
    if pid is not None and pid > PID_MAX:  # no such process can exist (and os calls would overflow)
        raise UserError(f"no process with PID {pid}")
    if output == "":
        raise UserError("-o/--output needs a file name")
    if output is None:
        output = time.strftime("timeline-%Y%m%d-%H%M%S") + (".tlraw" if raw_only else ".pftrace")
    fmt = infer_format(output, fmt)
    raw = output if raw_only else raw_path_for(output)
    owner = invoking_user()  # in sudo mode outputs are created by, and belong to, this user
    check_writable(output, owner)
    check_writable(raw, owner)
    cfg = RecordConfig(raw_path=raw, command=list(command) or None, pid=pid, events=_parse_events(events_),
                       duration=duration, as_root=as_root, buffer_mb=buffer_size,
                       poll_interval=flush_interval, owner=owner)
    cfg.cuda_libs, cfg.cuda_mode = tuple(cuda_libs), cuda_mode
    cfg.ioctl_mode, cfg.sample_interval = ioctl_mode, sample_interval
    cfg.delay = delay or 0.0
    status = _StatusLine(enabled=not quiet and sys.stderr.isatty())
    try:
        res = Recorder(cfg, status=status if status.enabled else None).run()
    finally:
        status.clear()
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(printable(msg), err=True))
    kinds = ", ".join(f"{k} {v:,}" for k, v in res.kinds.items()) or "none"
    say(f"timeline: recorded {res.elapsed:.1f}s ({res.reason}): {kinds}")
    for note in res.notes:
        say(f"timeline: {note}")
    for line in drop_warnings(res.drops, res.drop_causes):
        click.echo(f"timeline: warning: {printable(line)}", err=True)
    if res.disk_full is not None:
        click.echo(f"timeline: error: the disk holding {printable(raw)} filled up ({res.disk_full.strerror}): "
                   f"recording stopped there and the command ran on; {human_bytes(res.disk_full.kept)} of raw "
                   "log kept, events after that were not recorded", err=True)
    if raw_only:
        say(f"timeline: wrote {raw} ({human_bytes(res.disk_full.kept if res.disk_full else res.raw_bytes)})")
    else:
        try:
            conv = run_conversion(raw, output, fmt, user=owner, quiet=quiet)
        except NoRoom as e:
            click.echo(f"timeline: error: {printable(str(e))}", err=True)
            sys.exit(EXIT_NO_TRACE)
        if not keep_raw:
            remove(raw, owner)
        say(f"timeline: wrote {output} ({human_bytes(conv.out_bytes)})")
    sys.exit(res.exit_code)
