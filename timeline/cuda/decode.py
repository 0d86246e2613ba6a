"""Raw CUDA/NCCL call records -> slice arguments.

Records of one block are grouped by probe id; `decode_columns` turns a
group's argument slots into argument columns with numpy (masks, shifts,
signed views; strings as indices into the few distinct values), which the
TrackSinks encode in bulk.  `decode_group` is the per-call form (a dict per
record), kept as the straightforward reference the columns are tested
against.
"""
from __future__ import annotations

import numpy as np

from . import records as cuda_records
from ..converters.interface import Column
from .probes import BY_NAME, DRIVER, NCCL, RUNTIME, Probe, Role

MEMCPY_KINDS = {0: "H2H", 1: "H2D", 2: "D2H", 3: "D2D", 4: "default"}
NCCL_TYPES = {0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8),
              5: ("uint64", 8), 6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8), 9: ("bfloat16", 2),
              10: ("float8e4m3", 1), 11: ("float8e5m2", 1)}
NCCL_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
# The codes a trace most often shows; others stay numeric in 'ret'.
ERRORS = {
    RUNTIME: {1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 3: "cudaErrorInitializationError",
              4: "cudaErrorCudartUnloading", 35: "cudaErrorInsufficientDriver", 98: "cudaErrorInvalidDeviceFunction",
              100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 209: "cudaErrorNoKernelImageForDevice",
              400: "cudaErrorInvalidResourceHandle", 600: "cudaErrorNotReady", 700: "cudaErrorIllegalAddress",
              719: "cudaErrorLaunchFailure", 900: "cudaErrorStreamCaptureUnsupported"},
    DRIVER: {1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
             100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 201: "CUDA_ERROR_INVALID_CONTEXT",
             400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
             700: "CUDA_ERROR_ILLEGAL_ADDRESS", 719: "CUDA_ERROR_LAUNCH_FAILED"},
    NCCL: {1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
           5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"},
}


def probe_table(header: dict) -> list[Probe | None]:
    """Probe by id as recorded in the log header (names), through today's table."""
    names = (header.get("cuda") or {}).get("probes") or []
    return [BY_NAME.get(n) for n in names]


def _i32(col: np.ndarray) -> np.ndarray:
    return (col & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _u32(col: np.ndarray) -> np.ndarray:
    return (col & 0xFFFFFFFF).astype(np.uint32)


def _hex(col: np.ndarray) -> list[str]:
    return [f"{v:#x}" for v in col.tolist()]


def _column(fmt: str, col: np.ndarray):
    if fmt == "hex":
        return _hex(col)
    if fmt == "i32":
        return _i32(col).tolist()
    if fmt == "u32":
        return _u32(col).tolist()
    if fmt == "u64":
        return col.tolist()
    if fmt == "kind":
        return [MEMCPY_KINDS.get(v, str(v)) for v in _u32(col).tolist()]
    if fmt == "dtype":
        return [NCCL_TYPES.get(v, (str(v), 0))[0] for v in _u32(col).tolist()]
    if fmt == "op":
        return [NCCL_OPS.get(v, str(v)) for v in _u32(col).tolist()]
    raise ValueError(f"unknown field format {fmt!r}")


def _dims(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> list[str]:
    return [f"{a},{b},{c}" for a, b, c in zip(x.tolist(), y.tolist(), z.tolist())]


def launch_func(p: Probe, a: np.ndarray) -> np.ndarray:
    """Function pointer (runtime) or CUfunction handle (driver) of launch records."""
    return a[:, 1] if p.role == Role.LAUNCH_CFG else a[:, 0]


def launch_geometry(p: Probe, a: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
    """(function pointer or handle, grid, block) columns of launch records."""
    lo = lambda c: (c & 0xFFFFFFFF).astype(np.uint32)  # noqa: E731
    hi = lambda c: (c >> 32).astype(np.uint32)  # noqa: E731
    if p.role == Role.LAUNCH_RT:  # dim3 by value: x|y<<32 in one register, z in the next
        return a[:, 0], _dims(lo(a[:, 1]), hi(a[:, 1]), lo(a[:, 2])), _dims(lo(a[:, 3]), hi(a[:, 3]), lo(a[:, 4]))
    if p.role == Role.LAUNCH_CFG:  # config struct: grid xyz, block xyz as six u32 from slot 4
        return (a[:, 1], _dims(lo(a[:, 4]), hi(a[:, 4]), lo(a[:, 5])),
                _dims(hi(a[:, 5]), lo(a[:, 6]), hi(a[:, 6])))
    # cuLaunchKernel: nine scalar arguments, blockDimZ on the stack
    return a[:, 0], _dims(lo(a[:, 1]), lo(a[:, 2]), lo(a[:, 3])), _dims(lo(a[:, 4]), lo(a[:, 5]), lo(a[:, 6]))


def decode_group(p: Probe, recs: np.ndarray) -> list[dict]:
    """Slice args of records of one probe (generic fields, ret, geometry)."""
    a = recs["args"]
    n = recs.size
    rows: list[dict] = [{} for _ in range(n)]
    for key, slot, fmt in p.fields:
        if slot == "const":
            for r in rows:
                r[key] = fmt
            continue
        col = recs["out"] if slot == "out" else a[:, slot]
        vals = _column(fmt, col)
        if slot == "out":
            ok = (recs["flags"] & cuda_records.CF_OUT) != 0
            ok &= _i32(recs["ret"]) == 0
            for r, v, good in zip(rows, vals, ok.tolist()):
                if good:
                    r[key] = v
        else:
            for r, v in zip(rows, vals):
                r[key] = v
    if p.role in (Role.LAUNCH_RT, Role.LAUNCH_CFG, Role.LAUNCH_CU):
        _, grid, block = launch_geometry(p, a)
        for r, g, b in zip(rows, grid, block):
            r["grid"], r["block"] = g, b
    if p.role == Role.COPY2D:
        for r, b in zip(rows, (a[:, 4] * a[:, 5]).tolist()):
            r["bytes"] = b
    if p.role == Role.COLLECTIVE:
        for r in rows:
            size = next((s for name, s in NCCL_TYPES.values() if name == r.get("datatype")), 0)
            if size:
                r["bytes"] = r["count"] * size
    has_ret = ((recs["flags"] & cuda_records.CF_HAS_RET) != 0).tolist()
    errs = ERRORS.get(p.api, {})
    for r, hr, ret in zip(rows, has_ret, _i32(recs["ret"]).tolist()):
        if hr:
            r["ret"] = ret
            if ret:
                r["error"] = errs.get(ret, "error")
    return rows


def _labels(key: str, vals: np.ndarray, label) -> Column:
    """A "str" column from integer codes: label(v) for each distinct v."""
    uniq, inv = np.unique(vals, return_inverse=True)
    return Column(key, "str", inv.ravel(), [label(v) for v in uniq.tolist()])


def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct tuples of equal-length integer columns: (index of each one's
    first row, index of each row's tuple).  1-D uniques only (np.unique with
    axis=0 sorts byte strings, far slower)."""
    codes = np.zeros(cols[0].size, np.int64)
    for col in cols:
        u, inv = np.unique(col, return_inverse=True)
        codes = codes * u.size + inv.ravel()
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    return first, inv.ravel()


def _dims_column(key: str, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> Column:
    first, inv = unique_rows(x, y, z)
    return Column(key, "str", inv, [f"{a},{b},{c}" for a, b, c in zip(x[first].tolist(), y[first].tolist(),
                                                                      z[first].tolist())])


def _field_column(key: str, fmt: str, col: np.ndarray) -> Column:
    if fmt == "hex":
        return Column(key, "hex", col)
    if fmt == "i32":
        return Column(key, "int", _i32(col).astype(np.int64))
    if fmt == "u32":
        return Column(key, "int", _u32(col).astype(np.int64))
    if fmt == "u64":
        return Column(key, "int", col)
    if fmt == "kind":
        return _labels(key, _u32(col), lambda v: MEMCPY_KINDS.get(v, str(v)))
    if fmt == "dtype":
        return _labels(key, _u32(col), lambda v: NCCL_TYPES.get(v, (str(v), 0))[0])
    if fmt == "op":
        return _labels(key, _u32(col), lambda v: NCCL_OPS.get(v, str(v)))
    raise ValueError(f"unknown field format {fmt!r}")


def decode_columns(p: Probe, recs: np.ndarray) -> list[Column]:
    """Slice args of records of one probe, as columns (same keys and values
    as decode_group)."""
    a = recs["args"]
    n = recs.size
    cols: dict[str, Column] = {}
    for key, slot, fmt in p.fields:
        if slot == "const":
            cols[key] = Column(key, "str", np.zeros(n, np.intp), [fmt])
        elif slot == "out":  # read through the result pointer: only from successful calls
            c = cols[key] = _field_column(key, fmt, recs["out"])
            c.present = ((recs["flags"] & cuda_records.CF_OUT) != 0) & (_i32(recs["ret"]) == 0)
        else:
            cols[key] = _field_column(key, fmt, a[:, slot])
    lo = lambda c: (c & 0xFFFFFFFF).astype(np.uint32)  # noqa: E731
    hi = lambda c: (c >> 32).astype(np.uint32)  # noqa: E731
    if p.role == Role.LAUNCH_RT:
        cols["grid"] = _dims_column("grid", lo(a[:, 1]), hi(a[:, 1]), lo(a[:, 2]))
        cols["block"] = _dims_column("block", lo(a[:, 3]), hi(a[:, 3]), lo(a[:, 4]))
    elif p.role == Role.LAUNCH_CFG:
        cols["grid"] = _dims_column("grid", lo(a[:, 4]), hi(a[:, 4]), lo(a[:, 5]))
        cols["block"] = _dims_column("block", hi(a[:, 5]), lo(a[:, 6]), hi(a[:, 6]))
    elif p.role == Role.LAUNCH_CU:
        cols["grid"] = _dims_column("grid", lo(a[:, 1]), lo(a[:, 2]), lo(a[:, 3]))
        cols["block"] = _dims_column("block", lo(a[:, 4]), lo(a[:, 5]), lo(a[:, 6]))
    if p.role == Role.COPY2D:
        cols["bytes"] = Column("bytes", "int", a[:, 4] * a[:, 5])
    if p.role == Role.COLLECTIVE:
        dt = cols["datatype"]
        size = np.array([next((sz for nm, sz in NCCL_TYPES.values() if nm == s), 0) for s in dt.strings],
                        np.uint64)[dt.values]
        cols["bytes"] = Column("bytes", "int", cols["count"].values * size, present=size > 0)
    has_ret = (recs["flags"] & cuda_records.CF_HAS_RET) != 0
    ret = _i32(recs["ret"])
    cols["ret"] = Column("ret", "int", ret.astype(np.int64), present=has_ret)
    errs = ERRORS.get(p.api, {})
    err = _labels("error", ret, lambda v: errs.get(v, "error"))
    err.present = has_ret & (ret != 0)
    cols["error"] = err
    return list(cols.values())


def name_of(rec) -> str:
    """The string a NAME record carries."""
    raw = rec["args"].tobytes()
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
