"""Per-GPU counters derived from activity intervals, in bulk (numpy): busy fraction and copy bandwidth per bin."""
import numpy as np


def merge(starts, ends):
    """Union of [start, end) intervals -> sorted, disjoint (starts, ends).  Overlapping kernels on
    concurrent streams count once: the GPU is busy, not twice busy."""
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, np.int64)[order]
    e = np.maximum(np.asarray(ends, np.int64)[order], s)
    if not s.size:
        return s, e
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, s.size - 1)
    return s[idx], reach[last]


def covered(s, e, edges):
    """Time covered by disjoint sorted intervals in each bin [edges[i], edges[i+1])."""
    # Cumulative covered time up to each edge, from the prefix sum of interval lengths.
    cum = np.concatenate(([0], np.cumsum(e - s)))
    def upto(t):
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[i]
        prev = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.maximum(e[prev] - t, 0), 0)  # the last of them may run past t
        return full - partial
    at = upto(edges)
    return np.diff(at)


def busy_fraction(starts, ends, t0, t1, bin_ns):
    """Bin edges and the fraction of each bin some interval covers (0..1)."""
    edges = np.arange(t0, t1 + bin_ns, bin_ns, dtype=np.int64)
    s, e = merge(starts, ends)
    return edges, covered(s, e, edges) / float(bin_ns)


def copy_bandwidth(starts, ends, nbytes, t0, t1, bin_ns):
    """Bin edges and bytes/s moved in each bin, each copy's bytes spread evenly over its duration."""
    edges = np.arange(t0, t1 + bin_ns, bin_ns, dtype=np.int64)
    return edges, copy_moved(starts, ends, nbytes, edges) / (bin_ns / 1e9)


def copy_moved(starts, ends, nbytes, edges):
    """Bytes moved in each bin [edges[i], edges[i+1]), each copy's bytes spread evenly over its
    duration (the sum over any split of the copies: the gpu converter bins them as they come)."""
    s = np.asarray(starts, np.int64)
    e = np.maximum(np.asarray(ends, np.int64), s + 1)
    rate = np.asarray(nbytes, np.float64) / (e - s)  # bytes per ns
    # Total rate is piecewise constant between copy starts/ends: integrate it once over the
    # sorted breakpoints, then read the cumulative bytes at each bin edge (O((n + bins) log n)).
    points = np.concatenate((s, e))
    order = np.argsort(points, kind="stable")
    points = points[order]
    rate_after = np.cumsum(np.concatenate((rate, -rate))[order])
    moved_at = np.concatenate(([0.0], np.cumsum(rate_after[:-1] * np.diff(points))))
    k = np.searchsorted(points, edges, side="right") - 1
    kk = np.maximum(k, 0)
    cum = np.where(k >= 0, moved_at[kk] + rate_after[kk] * (edges - points[kk]), 0.0)
    return np.diff(cum)
