"""The arrival processes the load replay and the serving executor share: Poisson gaps with the right mean and no
memory, timestamp files read in order with one-line errors, and request draws that use every problem once a round."""
from __future__ import annotations

import math

import pytest

from heterospec.arrivals import Arrivals, open_times, poisson_times, read_timestamps, request_order
from heterospec.errors import UserError


def test_poisson_gaps_have_mean_one_over_rate_and_exponential_spread():
    t = poisson_times(4.0, 20000, seed=3)
    gaps = [b - a for a, b in zip([0.0] + t, t)]
    mean = sum(gaps) / len(gaps)
    assert abs(mean - 0.25) < 4 * 0.25 / math.sqrt(len(gaps))        # within 4 standard errors
    # an exponential's P(gap > mean) is 1/e (a constant gap would give 0, a uniform one 1/2)
    assert abs(sum(g > 0.25 for g in gaps) / len(gaps) - math.exp(-1)) < 0.02
    assert t == poisson_times(4.0, 20000, seed=3) and t != poisson_times(4.0, 20000, seed=4)


def test_timestamps_are_read_in_order_and_bad_lines_name_file_and_line(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("# seconds\n0\n0.5\n\n0.5\n2.25  # a burst ends\n")
    assert read_timestamps(f) == [0.0, 0.5, 0.5, 2.25]
    assert open_times(Arrivals("timestamps", path=str(f)), 2) == [0.0, 0.5]
    f.write_text("0\n1.5\n1.0\n")
    with pytest.raises(UserError, match=r"t.txt:3: 1.0 s comes before the line above it"):
        read_timestamps(f)
    f.write_text("0\nsoon\n")
    with pytest.raises(UserError, match=r"t.txt:2: 'soon' is not a number of seconds"):
        read_timestamps(f)


@pytest.mark.parametrize("kw, msg", [
    (dict(kind="poisson", rate=0.0), r"arrivals.rate: 0.0, expected a rate > 0"),
    (dict(kind="poisson", rate=-2.0), r"arrivals.rate: -2.0"),
    (dict(kind="closed", clients=0), r"arrivals.clients: 0, expected 1 or more"),
    (dict(kind="burst"), r"arrivals.kind: 'burst', expected one of"),
    (dict(kind="timestamps"), r"arrivals.path: empty"),
])
def test_bad_arrival_settings_are_one_line_naming_the_key(kw, msg):
    with pytest.raises(UserError, match=msg):
        Arrivals(**kw)


def test_a_closed_loop_has_no_times_ahead():
    with pytest.raises(UserError, match="closed has no arrival times ahead"):
        open_times(Arrivals("closed", clients=2), 5)


def test_requests_use_every_problem_once_before_any_again():
    order = request_order(7, 23, seed=1)
    assert len(order) == 23
    for k in range(0, 21, 7):
        assert sorted(order[k:k + 7]) == list(range(7))
    assert order != request_order(7, 23, seed=2)
