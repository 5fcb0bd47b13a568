"""The capture benchmark's bookkeeping: which cases run at which size, the ratios to sdpa, and the targets."""

import pytest

from attnviz.labs.cost import capture_bench


@pytest.fixture
def ran(monkeypatch):
    calls = []

    def run_case(case, tokens, threads=1):
        calls.append((case, tokens))
        seconds = {"sdpa": 2.0, "capture": 2.5, "capture+qk": 2.8, "full-record": 6.0, "embedded-max": 9.0}[case]
        return {"case": case, "tokens": tokens, "seconds": seconds, "peak_rss_mb": 1000.0 + seconds * 100}

    monkeypatch.setattr(capture_bench, "run_case", run_case)
    return calls


def test_every_case_runs_where_it_fits_and_is_compared_with_sdpa_of_its_size(ran):
    rows = capture_bench.capture_benchmark(tokens=(2048, 8192), threads=2)
    assert ("full-record", 8192) not in ran and ("embedded-max", 2048) not in ran and ("embedded-max", 8192) in ran
    capture = next(r for r in rows if r["case"] == "capture" and r["tokens"] == 8192)
    assert capture["time_vs_sdpa"] == 1.25 and capture["rss_vs_sdpa"] == pytest.approx(1250 / 1200)
    assert capture["met"] and "1.3x sdpa" in capture["target"] and capture["threads"] == 2
    assert not next(r for r in rows if r["case"] == "capture+qk" and r["tokens"] == 8192)["met"]  # 1.4x sdpa
    embedded = next(r for r in rows if r["case"] == "embedded-max")
    assert embedded["time_vs_sdpa"] is None and "met" not in embedded  # another model: no yardstick


def test_the_benchmark_text_is_longer_than_asked_for_any_tokenizer():
    assert len(capture_bench.benchmark_text(8192).split()) > 8192
    with pytest.raises(ValueError, match="case must be one of"):
        capture_bench.run_case_here("nope", 8)
