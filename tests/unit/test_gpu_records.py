"""timeline/gpu/records.py agrees with records.h (compiled with cc), and the wire parsers hold against hostile bytes."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from timeline.gpu import records
from helpers import REPO

HEADER = os.path.join(REPO, "timeline", "gpu", "records.h")


def compiled_layout(tmp_path):
    """sizeof and (offsetof, sizeof) of every field of struct tl_gpu_record, as the C compiler lays them out."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "a C compiler is needed to check the layout"
    fields = records.GPU_RECORD.names
    lines = [f'printf("{f} %zu %zu\\n", offsetof(struct tl_gpu_record, {f}), '
             f'sizeof(((struct tl_gpu_record *)0)->{f}));' for f in fields]
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "records.h"\nint main(void) {\n'
                   'printf("size %zu\\n", sizeof(struct tl_gpu_record));\n'
                   'printf("msg %zu\\n", sizeof(struct tl_gpu_msg));\n' + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", os.path.dirname(HEADER), "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    return [line.split() for line in out if line]


def test_record_layout_matches_header(tmp_path):
    rows = compiled_layout(tmp_path)
    assert rows[0] == ["size", str(records.GPU_RECORD.itemsize)]
    assert rows[1] == ["msg", str(records.MSG_HEADER.size)]
    for name, off, size in rows[2:]:
        dtype, py_off = records.GPU_RECORD.fields[name][:2]
        assert (py_off, dtype.itemsize) == (int(off), int(size)), name


def test_every_header_field_is_mirrored():
    text = open(HEADER).read()
    body = re.search(r"struct tl_gpu_record \{(.*?)\};", text, re.S).group(1)
    c_fields = re.findall(r"^\s*u?int\d+_t\s+(\w+)", body, re.M)
    assert c_fields == list(records.GPU_RECORD.names)


def test_header_constants_match_python():
    defines = dict(re.findall(r"#define (TL_\w+)\s+\(?(\d+)", open(HEADER).read()))
    expect = {"TL_RING_GPU": records.RING_GPU, "TL_GPU_MSG_HELLO": records.MSG_HELLO,
              "TL_GPU_MSG_RECORDS": records.MSG_RECORDS, "TL_GPU_MSG_STRINGS": records.MSG_STRINGS,
              "TL_GPU_MSG_STATUS": records.MSG_STATUS, "TL_GPU_KERNEL": records.KERNEL,
              "TL_GPU_MEMCPY": records.MEMCPY, "TL_GPU_MEMSET": records.MEMSET, "TL_GPU_API": records.API,
              "TL_GPU_NVTX": records.NVTX, "TL_GPU_SYNC": records.SYNC, "TL_GF_DRIVER": records.GF_DRIVER,
              "TL_GF_GRAPH": records.GF_GRAPH, "TL_GF_PEER": records.GF_PEER, "TL_GF_OPEN": records.GF_OPEN}
    assert {k: int(defines[k]) for k in expect} == expect
    assert re.search(r"TL_GPU_MSG_MAX_LEN \(8u << 20\)", open(HEADER).read())
    assert records.MSG_MAX_LEN == 8 << 20


def test_messages_split_across_reads_and_pid_overwritten():
    recs = np.zeros(3, records.GPU_RECORD)
    recs["kind"] = records.KERNEL
    recs["pid"] = 999
    recs["start"] = [10, 20, 30]
    stream = (records.encode_message(records.MSG_HELLO, b'{"cupti": "none"}')
              + records.encode_message(records.MSG_RECORDS, recs.tobytes())
              + records.encode_message(records.MSG_STRINGS, records.encode_strings({1: "k\u00e9rnel", 2: ""})))
    reader = records.MessageReader()
    msgs = []
    for i in range(0, len(stream), 7):  # arbitrary chunking, as a socket may deliver it
        msgs += reader.feed(stream[i:i + 7])
    assert [m[0] for m in msgs] == [records.MSG_HELLO, records.MSG_RECORDS, records.MSG_STRINGS]
    assert reader.pending == 0
    got = records.parse_records(msgs[1][1], pid=42)
    assert list(got["pid"]) == [42, 42, 42] and list(got["start"]) == [10, 20, 30]
    assert records.parse_strings(msgs[2][1]) == {1: "k\u00e9rnel", 2: ""}


@pytest.mark.parametrize("bad", [
    records.MSG_HEADER.pack(99, 0),                                   # unknown type
    records.MSG_HEADER.pack(records.MSG_HELLO, (8 << 20) + 1),       # over the bound
    records.MSG_HEADER.pack(records.MSG_RECORDS, 129),                # not whole records
])
def test_hostile_headers_end_the_connection(bad):
    with pytest.raises(records.WireError):
        records.MessageReader().feed(bad)


def test_hostile_strings_are_bounded():
    with pytest.raises(records.WireError):
        records.parse_strings(records.STRING_ENTRY.pack(1, 0xFFFFFFFF) + b"abc")
    with pytest.raises(records.WireError):
        records.parse_strings(b"\x01\x00")
    # A message cut short stays pending; nothing is returned for it.
    reader = records.MessageReader()
    assert reader.feed(records.MSG_HEADER.pack(records.MSG_RECORDS, 128) + b"x" * 100) == []
    assert reader.pending == 108
