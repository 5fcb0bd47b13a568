"""Admission on a real server: eight Chromium sessions at once against a budget that fits two of their requests.

The scenario of ``benchmarks/admission.py`` scaled down for CI (the full one, SmolLM2 at 8,192 tokens against a
6 GB budget, takes longer than a test may): SmolLM2 at 2,048 tokens, each request predicted at 497 MB (474 MB
measured), a budget of 1,000 MB, so two run at once and six wait. Every session gets its result; the pages
showed places in the queue beyond the first; the admitted bytes in flight never passed the budget; and the
server's peak RSS stayed within its base (models loaded, sessions open) plus the budget plus the result cache's
bound: an idle session holds no record of its own (before issue 27 each kept its last one alive through its
download buttons), and a capture hands the pages it frees back while it runs (without that, two captures at
once in a server's threads peaked at about 2 x their records above the base: 3,255 MB against a bound of
3,177 MB; with it, 2,893 MB against 3,163 MB). What admission itself bounds is checked from the
server's log: never more than two requests' predicted bytes in flight. The last session cancels while it waits
(the page says so at once), then runs it again.
"""

import json

import pytest

from attnviz.settings import MAX_RUNNING_ENV
from benchmarks.admission import scenario

pytestmark = pytest.mark.browser

TOKENS, BUDGET_MB, CACHE_MB = 2048, 1000, 1024
NEED_MB = 497  # capture_need: 1.45 x the predicted record (342 MB, value norms included): 496.5 MB, logged as 497


def test_eight_sessions_against_a_budget_for_two_all_get_their_results_within_memory(smollm2):
    # no cap on how many run at once (on 2 cores the default lets one run): here the memory budget alone decides
    row = scenario(8, TOKENS, BUDGET_MB, CACHE_MB, timeout_s=1500, server_env={MAX_RUNNING_ENV: "8"}, cancel_last=True)
    print(json.dumps(row))  # the figures, whatever fails below
    assert row["results"] == 8 and not row["page_errors"], row
    assert row["admissions"] == 8 and row["admitted_mb"] == [NEED_MB], row  # each text captured once, priced so
    assert row["max_in_flight_mb"] <= BUDGET_MB, row  # never more than two at once
    assert row["max_waiting_logged"] >= 2 and row["max_place_seen"] >= 2 and row["sessions_that_waited"] >= 4, row
    (cancelled_after,) = row["cancelled_seen_after_s"]  # the last session cancelled while it waited, then reran
    assert cancelled_after < 15, row  # the waiting loop redraws every second: the click is seen at once
    assert row["peak_rss_mb"] <= row["bound_mb"], row
