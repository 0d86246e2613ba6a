"""Is a difference between two runs real?  Distributions are compared, not
two numbers: a bootstrap interval on the difference of a statistic (the
median of per-step or per-call values, or the mean of per-step totals),
resampled with a fixed seed so that one pair of traces always gets the same
answer.  A difference is significant when the interval leaves out zero *and*
the change is large enough to matter (the caller's floor): with hundreds of
samples a 1 % shift is "real" yet is the noise between two runs on a shared
machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

SEED = 20261126          # fixed: the same traces give the same intervals every time
RESAMPLES = 2000
CONFIDENCE = 0.99        # two-sided; a diff shows tens of rows, so each must be sure of itself
MAX_SAMPLES = 20_000     # per side; more are thinned evenly (the interval is already tight)
MIN_SAMPLES = 3          # fewer on either side: no interval, never significant


@dataclass(frozen=True)
class Interval:
    """candidate statistic - baseline statistic, and its bootstrap interval."""
    diff: float
    lo: Optional[float]
    hi: Optional[float]

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)


def _thin(x: np.ndarray) -> np.ndarray:
    if len(x) <= MAX_SAMPLES:
        return x
    return x[np.linspace(0, len(x) - 1, MAX_SAMPLES).astype(np.int64)]


def _resampled(x: np.ndarray, rng: np.random.Generator, stat: Callable) -> np.ndarray:
    """The statistic over RESAMPLES resamples of x (with replacement), in chunks to bound memory."""
    out = np.empty(RESAMPLES)
    chunk = max(1, (1 << 22) // max(len(x), 1))  # about 32 MB of indices at a time
    for start in range(0, RESAMPLES, chunk):
        n = min(chunk, RESAMPLES - start)
        out[start:start + n] = stat(x[rng.integers(0, len(x), size=(n, len(x)))], axis=1)
    return out


def bootstrap_diff(baseline, candidate, stat: Callable = np.median, confidence: float = CONFIDENCE,
                   seed: int = SEED) -> Interval:
    """stat(candidate) - stat(baseline) with a percentile bootstrap interval
    (each side resampled on its own); no interval when a side has fewer than
    MIN_SAMPLES values."""
    a = _thin(np.asarray(baseline, dtype=np.float64))
    b = _thin(np.asarray(candidate, dtype=np.float64))
    if len(a) == 0 or len(b) == 0:
        return Interval(float("nan"), None, None)
    diff = float(stat(b) - stat(a))
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return Interval(diff, None, None)
    rng = np.random.default_rng(seed)
    d = _resampled(b, rng, stat) - _resampled(a, rng, stat)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(d, [tail, 100 - tail])
    return Interval(diff, float(lo), float(hi))


def proportion_diff(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> Interval:
    """k_b/n_b - k_a/n_a (shares of samples, e.g. of a Python function in the
    CPU samples) with a normal-approximation (Wald) interval; none when a side
    has no samples."""
    if n_a <= 0 or n_b <= 0:
        return Interval(float("nan"), None, None)
    pa, pb = k_a / n_a, k_b / n_b
    if n_a < MIN_SAMPLES or n_b < MIN_SAMPLES:
        return Interval(pb - pa, None, None)
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    se = max(float(np.sqrt(pa * (1 - pa) / n_a + pb * (1 - pb) / n_b)), 0.5 / max(n_a, n_b))
    return Interval(pb - pa, pb - pa - z * se, pb - pa + z * se)


def significant(iv: Interval, floor: float) -> bool:
    """The interval leaves out zero and the change is at least `floor` (in the
    statistic's unit): both real and large enough to matter."""
    return iv.excludes_zero and abs(iv.diff) >= floor and abs(iv.diff) > 0


def percentile(x, q: float) -> Optional[float]:
    x = np.asarray(x, dtype=np.float64)
    return float(np.percentile(x, q)) if len(x) else None
