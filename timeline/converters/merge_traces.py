"""Merge Perfetto traces recorded on several machines into one trace.

Each input becomes one machine (TracePacket.machine_id; trace_processor fills
its `machine` table and keeps pids of different machines apart).  Clocks:
every timeline trace starts with a ClockSnapshot of BOOTTIME and REALTIME
taken together; an input's BOOTTIME timestamps are shifted so that the same
REALTIME instant has the same timestamp on every machine (the first input is
the reference).  That assumes the machines' REALTIME clocks agree (NTP/PTP);
docs/distributed.md says what that means for the result.  The first snapshot
aligns; a later one (timeline writes one at the end) that disagrees means the
wall clock was stepped meanwhile, which is a warning, not an error.  Clock
values and shifted timestamps must stay within 0..2^63-1 ns (trace_processor
reads them as signed 64-bit): an input that would leave that range is refused.

Why rewrite timestamps rather than emit RemoteClockSync packets: trace_processor
applies a remote machine's clock offset only to timestamps it converts from
another clock, not to ones already on the trace clock (BOOTTIME), which is
what every timeline packet carries.  Rewriting is exact and works in any
reader.  Only what timeline's writer emits is rewritten (packet timestamps,
clock snapshots, ftrace events and compact sched); anything else is kept as
is.  Track uuids, flow ids and packet sequence ids are made distinct per
machine so that two inputs cannot collide.

Peer ranks: the net family's connection tracks are named 'net <local> ↔
<peer> <what>' under the process that owns the socket.  Every input says
which endpoints its processes own (the locals of their connections) and
which rank each process is (its 'rank=N' process label), so a connection
whose peer endpoint one ranked process of the job owns is renamed
'net <local> ↔ <peer> (rank N) <what>'.  A loopback peer is looked up on the
same machine only; an endpoint claimed by two ranks is left unlabelled.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .. import trace_file

CLOCK_REALTIME, CLOCK_BOOTTIME = 1, 6
FIRST_SEQUENCE_CLOCK = 64   # clock ids from here are a packet sequence's own (the pystack samples' incremental
                            # nanoseconds, anchored to BOOTTIME in their sequence's snapshot): not shifted
SEQ_STRIDE = 1 << 16        # sequence ids of machine i: i * SEQ_STRIDE + original
ID_SALT = 0x9E3779B97F4A7C15  # uuids/flow ids of machine i: mixed with i (64-bit)
MASK64 = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1     # trace_processor reads timestamps as signed 64-bit
BOOT_BEFORE_1970_NS = 10**9   # REALTIME below BOOTTIME by more: the machine booted before 1970
CLOCK_STEP_NS = 10**6         # later snapshots off the first by more: the wall clock was stepped


class MergeError(ValueError):
    """An input cannot be merged; the message names it."""


@dataclass
class Input:
    path: str
    data: bytes                # the whole file (a Trace: repeated field 1, TracePacket)
    host: str = ""
    boottime: int = 0          # first clock snapshot: BOOTTIME ...
    realtime: int = 0          # ... and REALTIME taken with it
    start: int = 0             # first and last packet timestamps (own BOOTTIME)
    end: int = 0
    shift: int = 0             # added to every BOOTTIME timestamp
    clock_step: int = 0        # later snapshots' (REALTIME - BOOTTIME) minus the first's, the largest
    clocks_lo: int | None = None  # extent of the snapshot clocks that move with BOOTTIME
    clocks_hi: int | None = None
    metadata: dict = field(default_factory=dict)
    process_tracks: dict = field(default_factory=dict)  # process track uuid -> pid
    ranks: dict = field(default_factory=dict)           # pid -> rank (its 'rank=N' label)
    net_tracks: list = field(default_factory=list)      # (local endpoint, parent uuid) of connection tracks

    @property
    def realtime_span(self) -> tuple[int, int]:
        d = self.realtime - self.boottime
        return self.start + d, self.end + d


def packet_spans(buf, path: str = ""):
    """(start, end) of each TracePacket in a Trace's bytes, without parsing them."""
    try:
        yield from trace_file.packet_spans(buf)
    except trace_file.ProtoError:
        raise MergeError(f"{path} is not a Perfetto protobuf trace (or it is damaged)") from None


def _packet(buf, a: int, b: int, path: str) -> pb.TracePacket:
    try:
        return pb.TracePacket.FromString(bytes(buf[a:b]))
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and others
        raise MergeError(f"{path} is not a Perfetto protobuf trace (or it is damaged)") from None


def parse(path: str, data: bytes) -> Input:
    inp = Input(path, data)
    lo = hi = None
    n = 0
    own_clock: set[int] = set()
    for a, b in packet_spans(data, path):
        n += 1
        pkt = _packet(data, a, b, path)
        if pkt.HasField("clock_snapshot"):
            _note_snapshot(inp, pkt.clock_snapshot)
        if pkt.HasField("track_descriptor"):
            _note_track(inp, pkt.track_descriptor)
        if pkt.HasField("chrome_events"):
            for m in pkt.chrome_events.metadata:
                inp.metadata[m.name] = m.string_value if m.HasField("string_value") else m.int_value
        own = _on_own_clock(pkt, own_clock)
        if pkt.HasField("timestamp") and not own:
            t = pkt.timestamp
            lo = t if lo is None or t < lo else lo
            hi = t if hi is None or t > hi else hi
        if pkt.machine_id:
            raise MergeError(f"{path} already holds several machines (a merged trace): merge its inputs instead")
    if not n:
        raise MergeError(f"{path} holds no trace packets")
    if not inp.boottime:
        raise MergeError(f"{path} has no BOOTTIME/REALTIME clock snapshot (not written by timeline?): "
                         "its clock cannot be aligned")
    inp.start, inp.end = (lo, hi) if lo is not None else (inp.boottime, inp.boottime)
    inp.host = str(inp.metadata.get("timeline_host") or "")
    return inp


CONN_SEP = " \u2194 "  # 'net <local> ↔ <peer> <what>' (timeline/net/convert.py)


def connection(name: str) -> tuple[str, str, str] | None:
    """(local, peer, what) of a net connection track's name, else None."""
    if not name.startswith("net ") or CONN_SEP not in name:
        return None
    local, rest = name[4:].split(CONN_SEP, 1)
    peer, _, what = rest.partition(" ")
    if " " in local or not peer:
        return None
    return local, peer, what


def _note_track(inp: Input, td) -> None:
    if td.HasField("process"):
        inp.process_tracks[td.uuid] = td.process.pid
        for label in td.process.process_labels:
            if label.startswith("rank=") and label[5:].isdigit():
                inp.ranks[td.process.pid] = int(label[5:])
    conn = connection(td.name) if td.name else None
    if conn and td.HasField("parent_uuid"):
        inp.net_tracks.append((conn[0], td.parent_uuid))


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    return host.startswith("127.") or host == "::1"


def peer_ranks(inputs: list[Input]) -> list[dict[str, int]]:
    """Per input: peer endpoint -> the rank that owns it, for the endpoints
    exactly one rank of the job owns (loopback ones on the same machine only)."""
    owners: dict[tuple[int | None, str], set[int]] = {}
    for i, inp in enumerate(inputs):
        for local, parent in inp.net_tracks:
            rank = inp.ranks.get(inp.process_tracks.get(parent, -1))
            if rank is not None:
                owners.setdefault((i if _is_loopback(local) else None, local), set()).add(rank)
    out = []
    for i in range(len(inputs)):
        known = {}
        for (machine, endpoint), ranks in owners.items():
            if len(ranks) == 1 and machine in (None, i):
                known[endpoint] = next(iter(ranks))
        out.append(known)
    return out


def _label_peer(td, known: dict[str, int]) -> None:
    conn = connection(td.name)
    if conn is None or conn[1] not in known:
        return
    local, peer, what = conn
    td.name = f"net {local}{CONN_SEP}{peer} (rank {known[peer]}) {what}".rstrip()


def _note_snapshot(inp: Input, snapshot) -> None:
    """The first BOOTTIME/REALTIME pair aligns the input; later ones only say
    how far its wall clock was stepped.  Values no clock can hold are refused."""
    clocks = {c.clock_id: c.timestamp for c in snapshot.clocks}
    moved = [t for cid, t in clocks.items() if cid != CLOCK_REALTIME and cid < FIRST_SEQUENCE_CLOCK]
    why = ""
    if max(clocks.values(), default=0) > INT64_MAX:
        why = "past 2^63 ns"
    elif clocks.get(CLOCK_REALTIME, INT64_MAX) + BOOT_BEFORE_1970_NS < clocks.get(CLOCK_BOOTTIME, 0):
        why = "REALTIME before BOOTTIME: a boot before 1970"
    if why:
        shown = ", ".join(f"{_CLOCK_NAMES.get(cid, f'clock {cid}')} {t}" for cid, t in sorted(clocks.items()))
        raise MergeError(f"{inp.path} cannot be aligned: its clock snapshot is out of range ({shown} ns; {why})")
    if moved:
        lo, hi = min(moved), max(moved)
        inp.clocks_lo = lo if inp.clocks_lo is None else min(inp.clocks_lo, lo)
        inp.clocks_hi = hi if inp.clocks_hi is None else max(inp.clocks_hi, hi)
    if CLOCK_BOOTTIME not in clocks or CLOCK_REALTIME not in clocks:
        return
    if not inp.boottime:
        inp.boottime, inp.realtime = clocks[CLOCK_BOOTTIME], clocks[CLOCK_REALTIME]
        return
    step = (clocks[CLOCK_REALTIME] - clocks[CLOCK_BOOTTIME]) - (inp.realtime - inp.boottime)
    if abs(step) > abs(inp.clock_step):
        inp.clock_step = step


_CLOCK_NAMES = {CLOCK_REALTIME: "REALTIME", 3: "MONOTONIC", CLOCK_BOOTTIME: "BOOTTIME"}


def _mix(i: int, value: int) -> int:
    """An id of machine i, distinct from every id of the other machines (0 stays 0)."""
    if not value or not i:
        return value
    x = (value ^ (i * ID_SALT)) & MASK64
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    return (x ^ (x >> 31)) or 1


def _on_own_clock(pkt: pb.TracePacket, own_clock: set[int]) -> bool:
    """Is the packet's timestamp on a clock of its sequence (not BOOTTIME)?  own_clock: the
    sequences whose defaults say so, noted here as their packets go by."""
    seq = pkt.trusted_packet_sequence_id
    if pkt.HasField("trace_packet_defaults"):
        if pkt.trace_packet_defaults.timestamp_clock_id >= FIRST_SEQUENCE_CLOCK:
            own_clock.add(seq)
        else:
            own_clock.discard(seq)
    if pkt.HasField("timestamp_clock_id"):
        return pkt.timestamp_clock_id >= FIRST_SEQUENCE_CLOCK
    return seq in own_clock


def _rewrite(pkt: pb.TracePacket, i: int, shift: int, path: str = "", own_clock: bool = False,
             peers: dict[str, int] | None = None) -> None:
    """Machine i's packet in place: its machine, its sequence, its ids, its times (not a time
    on its sequence's own clock: that moves with the BOOTTIME of its snapshot), and its
    connection tracks' peer ranks."""
    if peers and pkt.HasField("track_descriptor") and pkt.track_descriptor.name:
        _label_peer(pkt.track_descriptor, peers)
    try:
        _rewrite_fields(pkt, i, 0 if own_clock else shift, shift)
    except ValueError:  # protobuf: a shifted time below 0 or past 2^64 (align() checked the common ones)
        raise MergeError(f"{path} cannot be aligned: one of its timestamps moved by its clock shift "
                         f"({shift / 1e9:+.0f} s) is out of range") from None


def _rewrite_fields(pkt: pb.TracePacket, i: int, shift: int, clock_shift: int | None = None) -> None:
    pkt.machine_id = i
    if pkt.trusted_packet_sequence_id:
        pkt.trusted_packet_sequence_id = i * SEQ_STRIDE + pkt.trusted_packet_sequence_id
    if pkt.HasField("timestamp"):
        pkt.timestamp += shift
    if pkt.HasField("thread_descriptor") and pkt.thread_descriptor.HasField("reference_timestamp_us"):
        # a sample sequence's time, on MONOTONIC (moved with BOOTTIME in the clock snapshots below)
        pkt.thread_descriptor.reference_timestamp_us += (shift if clock_shift is None else clock_shift) // 1000
    if pkt.HasField("clock_snapshot"):
        for c in pkt.clock_snapshot.clocks:
            # REALTIME is the common ground; the others move with BOOTTIME, a sequence's own relative to it
            if c.clock_id != CLOCK_REALTIME and c.clock_id < FIRST_SEQUENCE_CLOCK:
                c.timestamp += shift if clock_shift is None else clock_shift
    if pkt.HasField("track_descriptor"):
        td = pkt.track_descriptor
        td.uuid = _mix(i, td.uuid)
        if td.HasField("parent_uuid"):
            td.parent_uuid = _mix(i, td.parent_uuid)
    if pkt.HasField("track_event"):
        te = pkt.track_event
        if te.HasField("track_uuid"):
            te.track_uuid = _mix(i, te.track_uuid)
        ids = [_mix(i, f) for f in te.flow_ids]
        if ids:
            del te.flow_ids[:]
            te.flow_ids.extend(ids)
        ids = [_mix(i, f) for f in te.terminating_flow_ids]
        if ids:
            del te.terminating_flow_ids[:]
            te.terminating_flow_ids.extend(ids)
    if pkt.HasField("trace_packet_defaults") and pkt.trace_packet_defaults.HasField("track_event_defaults"):
        d = pkt.trace_packet_defaults.track_event_defaults
        if d.HasField("track_uuid"):
            d.track_uuid = _mix(i, d.track_uuid)
    if pkt.HasField("ftrace_events"):
        fe = pkt.ftrace_events
        for ev in fe.event:
            if ev.HasField("timestamp"):
                ev.timestamp += shift
        cs = fe.compact_sched
        # delta-encoded: the first value is absolute
        if len(cs.switch_timestamp):
            cs.switch_timestamp[0] += shift
        if len(cs.waking_timestamp):
            cs.waking_timestamp[0] += shift


def align(inputs: list[Input], ref: Input | None = None) -> None:
    """Each input's shift: the same REALTIME instant at the same timestamp as on `ref` (the first)."""
    ref = ref or inputs[0]
    ref_d = ref.realtime - ref.boottime
    for inp in inputs:
        inp.shift = (inp.realtime - inp.boottime) - ref_d
        lo = inp.start if inp.clocks_lo is None else min(inp.start, inp.clocks_lo)
        hi = inp.end if inp.clocks_hi is None else max(inp.end, inp.clocks_hi)
        if lo + inp.shift < 0 or hi + inp.shift > INT64_MAX:
            against = "" if inp is ref else f" with {ref.path}"
            raise MergeError(f"{inp.path} cannot be aligned{against}: its timestamps ({lo} .. {hi} ns) moved by "
                             f"its clock shift ({inp.shift / 1e9:+.0f} s) leave the range of a clock (0 .. 2^63 ns)")


def clock_step_warnings(inputs: list[Input], tolerance_ns: int = CLOCK_STEP_NS) -> list[str]:
    """Inputs whose wall clock was stepped while they recorded (their clock
    snapshots disagree): the first snapshot aligned them, later events may be off."""
    return [f"{inp.path} ({inp.host or 'unknown host'}): its clock snapshots disagree by {inp.clock_step / 1e9:+.3f} s "
            "(its wall clock was stepped while it recorded); aligned by the first, so its later events "
            "may be off by up to that" for inp in inputs if abs(inp.clock_step) > tolerance_ns]


def overlap_warnings(inputs: list[Input], slack_ns: int = 60 * 10**9) -> list[str]:
    """Inputs whose recordings do not overlap in REALTIME (with a minute of
    slack): probably not the same job, or a clock far off."""
    out = []
    spans = [inp.realtime_span for inp in inputs]
    lo, hi = max(a for a, _ in spans), min(b for _, b in spans)
    if lo - hi > slack_ns:
        for inp, (a, b) in zip(inputs, spans):
            if b + slack_ns < lo or a - slack_ns > hi:
                out.append(f"{inp.path} ({inp.host or 'unknown host'}) does not overlap the other recordings in "
                           f"wall-clock time by {(lo - hi) / 1e9:.0f} s: not the same job, or its clock is off")
    return out


def _frame(payload: bytes) -> bytes:
    """A TracePacket as field 1 of a Trace."""
    n, head = len(payload), bytearray(b"\x0a")
    while True:
        if n < 0x80:
            head.append(n)
            return bytes(head) + payload
        head.append((n & 0x7F) | 0x80)
        n >>= 7


def merge(inputs: list[Input], write, machines: list[int] | None = None, ref: Input | None = None) -> int:
    """Writes one trace through write(bytes); input i is machine i (0 = the
    first, the reference), or machines[i] (a trace set's chunk: the same
    machine number, and clock reference `ref`, in every chunk).  Returns the bytes written."""
    align(inputs, ref)
    peers = peer_ranks(inputs)
    total = 0
    for n, (i, inp) in enumerate(zip(machines or range(len(inputs)), inputs)):
        # The machine's name where a reader can find it (metadata is per trace, so keyed by machine).
        meta = pb.TracePacket()
        meta.machine_id = i
        for k, v in (("timeline_machine_host", inp.host or f"machine {i}"), ("timeline_machine_source", inp.path),
                     ("timeline_machine_shift_ns", inp.shift)):
            e = meta.chrome_events.metadata.add(name=f"{k}_{i}")
            if isinstance(v, str):
                e.string_value = v
            else:
                e.int_value = int(v)
        chunk = [_frame(meta.SerializeToString())]
        own_clock: set[int] = set()
        for a, b in packet_spans(inp.data, inp.path):
            pkt = _packet(inp.data, a, b, inp.path)
            _rewrite(pkt, i, inp.shift, inp.path, _on_own_clock(pkt, own_clock), peers[n])
            chunk.append(_frame(pkt.SerializeToString()))
            if len(chunk) >= 4096:
                data = b"".join(chunk)
                write(data)
                total += len(data)
                chunk = []
        data = b"".join(chunk)
        write(data)
        total += len(data)
    return total
