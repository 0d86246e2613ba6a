"""`timeline record`: record a command (or a running process) into a trace."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time

import click

from ..errors import MachineError, UserError
from ..family import MIB, option_fields
from ..identity import InvokingUser, invoking_user
from ..libbpf import BPFError
from ..rawlog_sink import RingOptions
from ..recorder import Recorder, RecordConfig, RecordResult
from ..registry import DEFAULT_EVENTS, FAMILY_LIST, events_help, family_options
from ..terminal import printable
from .convert import EXIT_NO_TRACE, NoRoom, check_output, run_conversion, split_option, split_spec, wrote
from .output import expand_template, human_bytes, infer_format, raw_path_for


def drop_warnings(drops: dict[str, int], causes: dict[str, dict]) -> list[str]:
    """Summary lines for lost records: a full ring and a refusal with room left
    call for different fixes.  drops: family -> lost; causes: BpfSession.drop_causes()."""
    def listing(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)

    full = {k: sum(c["full"]) for k, c in causes.items()} if causes else dict(drops)
    refused = {k: sum(c["refused"]) for k, c in causes.items()}
    out = []
    if sum(full.values()):
        # The fix names the rings that filled: twice their size now.
        larger = [f"{k}={max(1, 2 * causes[k]['ring_bytes'] // MIB)}" if k in causes else f"{k}=MiB"
                  for k, v in full.items() if v]
        out.append(f"{sum(full.values()):,} events were dropped (ring buffer full): {listing(full)}; "
                   f"try a larger --buffer-size {','.join(larger)}")
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


class _Duration(click.ParamType):
    """--ring: seconds, or a number with s, m or h (`90`, `5s`, `2m`, `1.5h`)."""
    name = "duration"
    UNITS = {"s": 1, "m": 60, "h": 3600}

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        mult = self.UNITS.get(text[-1:], None)
        try:
            v = float(text[:-1] if mult else text) * (mult or 1)
        except ValueError:
            self.fail(f"{value!r} is not a duration (like 30s, 2m or 1h)", param, ctx)
        if not (0.5 <= v < float("inf")):
            self.fail(f"{value!r}: a ring keeps at least 0.5 s", param, ctx)
        return v


def dump_name(template: str, n: int, expand) -> str:
    """The n-th dump's file name: -o's %n, else <stem>.<n><suffix>."""
    if "%n" in template.replace("%%", ""):
        return expand(template, n)
    out = expand(template, None)
    for suf in (".pftrace", ".perfetto-trace", ".json.gz", ".json", ".tlraw"):
        if out.endswith(suf):
            return f"{out[: -len(suf)]}.{n}{suf}"
    return f"{out}.{n}"


PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT on 64-bit


def _parse_events(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))  # -e sched,sched: once
    return names or DEFAULT_EVENTS


class _RingSizes(click.ParamType):
    """--buffer-size: `N` (the sched ring, as always) or `FAMILY=N,...`, MiB each."""
    name = "sizes"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        out = {}
        for part in str(value).split(","):
            name, _, mib = part.strip().rpartition("=")
            name = name.strip() or "sched"
            try:
                out[name] = int(mib)
            except ValueError:
                self.fail(f"{part.strip()!r} is not a number of MiB (N or FAMILY=N,...)", param, ctx)
        return out


def _ring_sizes_help() -> str:
    sizes = ", ".join(f"{f.name} {r.default_bytes / MIB:g}" for f in FAMILY_LIST for r in f.rings if r.map)
    return ("Ring buffer size in MiB, a power of two: N sets the sched ring; FAMILY=N,... sets those "
            f"families' rings (default: {sizes}).")


def _family_options(fn):
    """The `record` options of every family, from its options dataclass."""
    for fam in reversed(FAMILY_LIST):
        for fld in reversed(option_fields(fam.options)):
            meta = dict(fld.metadata["click"])
            meta.setdefault("show_default", not meta.get("multiple"))
            fn = click.option(*fld.metadata["flags"], fld.name, default=fld.default, help=fld.metadata["help"],
                              **meta)(fn)
    return fn


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", help="Trace file to write (default: timeline-DATE-TIME.pftrace). "
              "A .json or .json.gz name selects Chrome JSON. Templates: %h host, %p recorder pid, "
              "%r rank (RANK etc. in the recorder's environment), %t start time, %n dump number (--ring), "
              "%% a %.")
@click.option("--format", "fmt", type=click.Choice(["perfetto", "chrome"]), help="Trace format (default perfetto).")
@click.option("-p", "--pid", type=int, help="Attach to a running process and its descendants instead of launching.")
@click.option("-d", "--duration", type=_Seconds(), help="Stop recording after this many seconds.")
@click.option("--delay", type=_Seconds(), help="Record events only after this many seconds; "
              "the process tree and thread names are followed from the start.")
@click.option("--ring", type=_Duration(), metavar="DURATION",
              help="Flight recorder: keep only the last DURATION (30s, 2m, 1h) in bounded segment files; "
                   "the trace at exit holds the last DURATION, and SIGUSR2 to the recorder writes one more "
                   "(-o's %n is its number, else STEM.N.pftrace) while recording goes on.")
@click.option("--hang-timeout", type=_Seconds(), metavar="S",
              help="With --ring: write a dump when the job makes no progress for S seconds (no CUDA/NCCL "
                   "call returns, no process starts or ends, main threads asleep; see docs/long-jobs.md).")
@click.option("-e", "--events", "events_", default=",".join(DEFAULT_EVENTS), show_default=True,
              help=events_help())
@click.option("--raw-only", is_flag=True, help="Write only the raw log (-o names it); convert later.")
@click.option("--keep-raw", is_flag=True, help="Keep the .tlraw log next to the trace after converting.")
@click.option("--as-root", is_flag=True, help="Run the command as root even when started through sudo.")
@click.option("--buffer-size", type=_RingSizes(), default=None, metavar="N|FAMILY=N,...", help=_ring_sizes_help())
@click.option("--flush-interval", type=_Seconds(), default=0.05, show_default=True,
              help="Seconds between ring buffer drains while events flow; up to 4x longer while "
                   "little moves (longer saves CPU, risks drops).")
@click.option("-q", "--quiet", is_flag=True, help="No status line or summary.")
@split_option
@_family_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(output, fmt, pid, duration, delay, ring, hang_timeout, events_, raw_only, keep_raw, as_root, buffer_size, flush_interval, quiet,
           split, command, **family_values):
    """Record COMMAND (after --) or --pid N into a trace.

    \b
      sudo timeline record -o run.pftrace -- python train.py
      sudo timeline record --pid 1234 --duration 30
    """
    _check_arguments(pid, command, output, ring, hang_timeout)
    names = _OutputNames(output, fmt, raw_only, ring)
    user = invoking_user()  # in sudo mode outputs are created by, and belong to, this user
    names.split = split
    if split_spec(split) is not None and not split.auto and names.fmt != "perfetto" and not raw_only:
        raise UserError("--split writes Perfetto traces (a trace set); it cannot be used with Chrome JSON")
    check_output(user, names.trace, split)
    user.check_writable(names.raw)
    dumps = _DumpConversions(names, user, keep_raw, quiet) if ring else None
    cfg = RecordConfig(raw_path=names.raw, command=list(command) or None, pid=pid, events=_parse_events(events_),
                       duration=duration, user=user, as_root=as_root, ring_mib=dict(buffer_size or {}),
                       poll_interval=flush_interval, options=family_options(family_values),
                       delay=delay or 0.0, hang_timeout=hang_timeout, warn=_warn,
                       ring=RingOptions(ring, names.dump_raw, dumps.convert) if ring else None)
    res = _run_recorder(cfg, quiet, dumps)
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(printable(msg), err=True))
    kinds = ", ".join(f"{k} {v:,}" for k, v in res.kinds.items()) or "none"
    say(f"timeline: recorded {res.elapsed:.1f}s ({res.reason}): {kinds}")
    for note in res.notes:
        say(f"timeline: {note}")
    try:
        _report_and_convert(res, names, names.final_trace(res.dumps), user, quiet, keep_raw, say)
    finally:
        if res.raw_fd >= 0:
            os.close(res.raw_fd)
    sys.exit(res.exit_code)


def _check_arguments(pid, command, output, ring, hang_timeout) -> None:
    """What the options cannot be together, before any work."""
    if pid is not None and command:
        raise UserError("give either a command or --pid, not both")
    if pid is not None and pid <= 0:
        raise UserError(f"--pid {pid}: a process id is a positive number")
    if pid is not None and pid > PID_MAX:  # no such process can exist (and os calls would overflow)
        raise UserError(f"no process with PID {pid}")
    if output == "":
        raise UserError("-o/--output needs a file name")
    if hang_timeout and not ring:
        raise UserError("--hang-timeout writes a dump of the flight recorder: give --ring DURATION too")


def _warn(line: str) -> None:
    """A problem said at once, while recording goes on."""
    click.echo(f"timeline: warning: {printable(line)}", err=True)


class _OutputNames:
    """-o's names, templates expanded: the trace, its raw log, and with --ring
    each dump's (-o's %n is the dump's number)."""

    def __init__(self, output: str | None, fmt: str | None, raw_only: bool, ring: float | None):
        if output is None:
            output = time.strftime("timeline-%Y%m%d-%H%M%S") + (".tlraw" if raw_only else ".pftrace")
        self.template, self.raw_only = output, raw_only
        self.split = None  # --split (convert.SplitOption's value)
        self._host, self._started = socket.gethostname(), time.time()
        self.numbered = bool(ring) and "%n" in output.replace("%%", "")  # the exit trace is numbered too
        self.trace = self._expand(output, 0 if self.numbered else None)  # with %n: renumbered at exit
        self.fmt = infer_format(self.trace, fmt)
        self.raw = self.raw_of(self.trace)

    def _expand(self, template: str, n: int | None) -> str:
        return expand_template(template, host=self._host, pid=os.getpid(), env=os.environ, when=self._started, dump=n)

    def raw_of(self, trace: str) -> str:
        """The raw log a trace is converted from (--raw-only: the raw log is the output)."""
        return trace if self.raw_only else raw_path_for(trace)

    def dump_trace(self, n: int) -> str:
        return dump_name(self.template, n, self._expand)

    def dump_raw(self, n: int) -> str:
        return self.raw_of(self.dump_trace(n))

    def final_trace(self, dumps: int) -> str:
        """The trace at exit: with %n, numbered after the dumps written while recording."""
        return self._expand(self.template, dumps + 1) if self.numbered else self.trace


class _DumpConversions:
    """--ring: each dump written while recording is converted on a thread of
    its own; recording goes on meanwhile."""

    def __init__(self, names: _OutputNames, user: InvokingUser, keep_raw: bool, quiet: bool):
        self.names, self.user, self.keep_raw, self.quiet = names, user, keep_raw, quiet
        self._threads: list[threading.Thread] = []

    def convert(self, raw_dump: str, n: int, raw_fd: int) -> None:
        """RingOptions.on_dump: dump n was written to raw_dump; raw_fd, a descriptor on it, is ours now."""
        t = threading.Thread(target=self._convert, args=(raw_dump, n, raw_fd), name=f"timeline-dump-{n}")
        t.start()
        self._threads.append(t)

    def _convert(self, raw_dump: str, n: int, raw_fd: int) -> None:
        target = self.names.dump_trace(n)
        try:
            if not self.names.raw_only:
                try:
                    conv = run_conversion(raw_dump, target, infer_format(target, self.names.fmt), user=self.user,
                                          quiet=True, raw_fd=raw_fd, split=self.names.split)
                except UserError as e:  # NoRoom included: the dump's raw log is kept
                    _warn(f"dump {n}: {e}; its raw log {raw_dump} is kept")
                    return
                if not self.keep_raw:
                    self.user.remove(raw_dump)
        finally:
            os.close(raw_fd)
        if not self.quiet:
            click.echo(f"timeline: dump {n}: wrote {printable(wrote(conv))}", err=True)

    def join(self) -> None:
        for t in self._threads:
            t.join()


def _run_recorder(cfg: RecordConfig, quiet: bool, dumps: _DumpConversions | None) -> RecordResult:
    """Record, with the status line on a terminal; every dump is converted when this returns."""
    status = _StatusLine(enabled=not quiet and sys.stderr.isatty())
    try:
        return Recorder(cfg, status=status if status.enabled else None).run()
    except BPFError as e:  # the kernel refused an attach (load failures come as MachineError already)
        raise MachineError(f"attaching the eBPF programs failed: {e}") from None
    finally:
        status.clear()
        if dumps is not None:
            dumps.join()


def _segments_line(res) -> str:
    """Where a ring's recording is when it could not be gathered into one raw log."""
    segs = [printable(p) for p in res.kept_segments]
    where = segs[0] if len(segs) == 1 else f"{len(segs)} ring segments, {segs[0]} to {segs[-1]}"
    return (f"the recording is kept in {where} (each a raw log `timeline convert` reads; "
            "the last holds the latest events)")


def _report_and_convert(res, names: _OutputNames, output: str, user: InvokingUser, quiet, keep_raw, say) -> None:
    """The summary's last lines and the trace, from the raw log the recorder
    wrote, read back through the descriptor it kept (res.raw_fd), never by name."""
    raw = names.raw
    if res.ranked >= 2 and not quiet and res.raw_fd >= 0:
        _rank_lines(res, say)
    for line in drop_warnings(res.drops, res.drop_causes):
        _warn(line)
    _report_raw_log_problems(res, raw)
    if res.raw_fd < 0:
        sys.exit(EXIT_NO_TRACE)
    if names.raw_only:
        say(f"timeline: wrote {raw} ({human_bytes(res.disk_full.kept if res.disk_full else res.raw_bytes)})")
        return
    try:
        conv = run_conversion(raw, output, names.fmt, user=user, quiet=quiet, raw_fd=res.raw_fd, split=names.split)
    except NoRoom as e:
        click.echo(f"timeline: error: {printable(str(e))}", err=True)
        sys.exit(EXIT_NO_TRACE)
    if not keep_raw:
        user.remove(raw)
    say(f"timeline: wrote {printable(wrote(conv))} ({human_bytes(conv.out_bytes)})")


def _rank_lines(res, say) -> None:
    from ..rank_summary import rank_lines

    try:
        for line in rank_lines(res.raw_fd, res.drops):
            say(f"timeline: {line}")
    except Exception as e:  # noqa: BLE001 - a summary line must not cost the recording
        say(f"timeline: per-rank summary unavailable: {e}")


def _report_raw_log_problems(res, raw: str) -> None:
    """The error line when the disk filled up, or when --ring could not gather the raw log."""
    if res.disk_full is not None:
        lost = ("events after that were not recorded" if res.raw_fd >= 0 else
                f"{res.raw_error or 'no raw log'}: {_segments_line(res)}")
        click.echo(f"timeline: error: the disk holding {printable(raw)} filled up ({res.disk_full.strerror}): "
                   f"recording stopped there and the command ran on; "
                   + (f"{human_bytes(res.disk_full.kept)} of raw log kept, " if res.raw_fd >= 0 else "")
                   + lost, err=True)
    elif res.raw_fd < 0:  # --ring: the last DURATION could not be gathered into one raw log
        click.echo(f"timeline: error: {printable(res.raw_error or 'no raw log')}: {_segments_line(res)}", err=True)
