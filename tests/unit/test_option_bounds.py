"""Numeric `record` options with bounds: `--sample-interval nan` or `1e-300`
once meant a sampler thread spinning (478k samples in 3 s); now, like
`--flush-interval`, one line and exit 2 before anything is created (issue 20)."""
from __future__ import annotations

import pytest

from timeline.errors import UserError
from timeline.kctx.family import CountersOptions
from timeline.kctx.plugins import CountersPlugin


@pytest.mark.parametrize("value", [float("nan"), 1e-300, -1.0, float("inf")])
def test_sample_interval_checked_when_options_come_from_code(value):
    """A RecordConfig built without the CLI still gets the check (preflight)."""
    with pytest.raises(UserError, match="--sample-interval"):
        CountersPlugin(None, CountersOptions(sample_interval=value)).preflight()


@pytest.mark.parametrize("value", [0.0, 0.01, 0.5])
def test_sample_interval_in_bounds_passes_preflight(value):
    CountersPlugin(None, CountersOptions(sample_interval=value)).preflight()
