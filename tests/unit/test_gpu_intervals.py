import numpy as np

from timeline.gpu.intervals import busy_fraction, copy_bandwidth, merge


def test_merge_overlapping_streams_counts_time_once():
    s, e = merge([0, 5, 20, 22, 40], [10, 8, 30, 25, 41])
    assert s.tolist() == [0, 20, 40] and e.tolist() == [10, 30, 41]


def test_busy_fraction_per_bin_matches_a_brute_force_count():
    rng = np.random.default_rng(1)
    starts = rng.integers(0, 10_000, 300)
    ends = starts + rng.integers(0, 200, 300)
    edges, frac = busy_fraction(starts, ends, 0, 10_000, 1000)
    covered = np.zeros(11_000, bool)
    for a, b in zip(starts, ends):
        covered[a:b] = True
    want = [covered[lo:hi].mean() for lo, hi in zip(edges[:-1], edges[1:])]
    assert np.allclose(frac, want)


def test_copy_bandwidth_spreads_bytes_over_duration():
    # 1 GB copied over 2 bins of 1 ms: 0.5 GB in each, i.e. 500 GB/s.
    edges, bw = copy_bandwidth([0], [2_000_000], [1e9], 0, 3_000_000, 1_000_000)
    assert np.allclose(bw, [5e11, 5e11, 0])


def test_copy_bandwidth_matches_a_brute_force_spread():
    rng = np.random.default_rng(2)
    starts = rng.integers(0, 10_000, 200)
    ends = starts + rng.integers(1, 3000, 200)
    nbytes = rng.integers(1, 1 << 20, 200).astype(float)
    edges, bw = copy_bandwidth(starts, ends, nbytes, 0, 14_000, 1000)
    per_ns = np.zeros(15_000)
    for a, b, n in zip(starts, ends, nbytes):
        per_ns[a:b] += n / (b - a)
    want = [per_ns[lo:hi].sum() / 1e-6 for lo, hi in zip(edges[:-1], edges[1:])]
    assert np.allclose(bw, want, rtol=1e-9, atol=1.0)  # atol: float residue of 1 byte/s
