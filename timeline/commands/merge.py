"""`timeline merge TRACE... -o job.pftrace`: traces of several machines (or
recorders) as one Perfetto trace, one machine per input, clocks aligned."""
from __future__ import annotations

import glob
import os

import click

from ..errors import UserError
from .. import trace_file
from ..safe_output import OutputFile
from ..identity import invoking_user
from ..terminal import printable
from .output import human_bytes


def expand_inputs(args: tuple[str, ...], split: bool = False) -> list[str]:
    """Files, directories (their traces, sorted) and globs, each file once; with split, a trace set
    directory is one input."""
    from ..converters.trace_set import is_trace_set

    out: list[str] = []
    for a in args:
        if split and is_trace_set(a):
            found = [a]  # a machine's trace set (--split)
        elif os.path.isdir(a):
            found = sorted(os.path.join(a, f) for f in os.listdir(a) if f.endswith(trace_file.PERFETTO_SUFFIXES))
            if not found:
                raise UserError(f"{printable(a)} holds no Perfetto traces (*.pftrace)")
        elif any(c in a for c in "*?[") and not os.path.exists(a):
            found = sorted(glob.glob(a))
            if not found:
                raise UserError(f"no file matches {printable(a)}")
        else:
            found = [a]
        out += [f for f in found if f not in out]
    return out


def _read(path: str, user):
    """The trace's bytes (decompressed), opened once as `user` (sudo mode);
    at most trace_file.max_trace_bytes() (4 GiB): merge holds each input in memory."""
    chrome = (f"{printable(path)} is Chrome JSON, which cannot hold several machines: "
              "merge the .pftrace traces (`timeline convert RAW -o X.pftrace` makes one)")
    if trace_file.format_for(path) == "chrome":
        raise UserError(chrome)
    fd = trace_file.open_trace_file(path, user)
    try:
        head = trace_file.read_head(fd)
        if trace_file.refuse_empty_or_raw(head, path) == trace_file.GZIP:
            head = trace_file.gzip_head(head)
        if trace_file.sniff(head) == trace_file.JSON:
            raise UserError(chrome)
        return trace_file.read_whole(fd, path)  # (a gzip file is checked whole on the way)
    finally:
        os.close(fd)


@click.command("merge")
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The merged .pftrace to write.")
@click.option("-q", "--quiet", is_flag=True, help="No summary.")
@click.option("--split", is_flag=True,
              help="Write a trace set (OUTPUT as NAME.tlset/): one merged chunk per chunk of the first input; "
                   "inputs may be trace sets (record --split), each a machine (docs/trace-sets.md).")
def merge_cmd(traces, output, quiet, split):
    """Merge traces from several machines into one: each input is a machine
    (named by its host), timestamps aligned through each trace's REALTIME
    clock snapshot.  TRACES: files, directories or globs of .pftrace files."""
    from ..converters import merge_traces as mt

    if trace_file.format_for(output) == "chrome":
        raise UserError("Chrome JSON cannot hold several machines: write the merged trace as .pftrace")
    paths = expand_inputs(traces, split)
    if len(paths) < 2:
        raise UserError(f"merge needs at least two traces, got {len(paths)}")
    if os.path.abspath(output) in {os.path.abspath(p) for p in paths}:
        raise UserError(f"{printable(output)} is one of the inputs: write the merged trace elsewhere")
    user = invoking_user()  # in sudo mode the traces are read, and the merged one written, as this user
    if split:
        return _merge_split(paths, output, user, quiet)
    user.check_writable(output)
    inputs = []
    for p in paths:
        try:
            inputs.append(mt.parse(p, _read(p, user)))
        except mt.MergeError as e:
            raise UserError(printable(str(e))) from None
    with OutputFile(output, user) as f:
        try:
            size = mt.merge(inputs, lambda b: _write_all(f.fd, b))
        except mt.MergeError as e:
            raise UserError(printable(str(e))) from None
        except OSError as e:
            raise UserError(f"cannot write {printable(output)}: {e.strerror}") from None
    if quiet:
        return
    for w in mt.overlap_warnings(inputs) + mt.clock_step_warnings(inputs):
        click.echo(f"timeline: warning: {printable(w)}", err=True)
    for i, inp in enumerate(inputs):
        click.echo(f"timeline: machine {i}: {printable(inp.host or '?')}  {printable(inp.path)}  "
                   f"clock shift {inp.shift / 1e9:+.6f} s", err=True)
    click.echo(f"timeline: wrote {printable(output)} ({human_bytes(size)}, {len(inputs)} machines)", err=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 30])
        view = view[n:]


def _merge_split(paths: list[str], output: str, user, quiet: bool) -> None:
    """merge --split: a trace set, window by window (converters/merge_set.py)."""
    from ..converters import merge_set
    from ..converters import merge_traces as mt
    from ..converters.trace_set import set_path
    from ..safe_output import OutputDir

    target = set_path(output)
    if os.path.abspath(target) in {os.path.abspath(p) for p in paths}:
        raise UserError(f"{printable(target)} is one of the inputs: write the merged set elsewhere")
    read = lambda p: _read(p, user)  # noqa: E731
    try:
        machines = [merge_set.load(p, read, user) for p in paths]
        with OutputDir(target, user) as d:
            chunks, size = merge_set.write(machines, read, d, _write_all)
    except mt.MergeError as e:
        raise UserError(printable(str(e))) from None
    except OSError as e:
        raise UserError(f"cannot write {printable(target)}: {e.strerror}") from None
    if quiet:
        return
    for i, m in enumerate(machines):
        click.echo(f"timeline: machine {i}: {printable(m.host or '?')}  {printable(m.path)}  "
                   f"{len(m.chunks)} chunk(s), clock shift {m.shift / 1e9:+.6f} s", err=True)
    click.echo(f"timeline: wrote trace set {printable(target)}/ of {len(chunks)} chunks "
               f"({human_bytes(size)}, {len(machines)} machines)", err=True)
