from provision.vllm.stability import GateThresholds, gate, summarize

DFLASH = [218, 229, 62, 223, 215, 103, 62, 224, 62, 221]  # the seed's rejected speculative decoding
SEED_ACCEPTED = [135.52, 135.8, 135.9, 136.06, 135.85, 135.7, 135.95, 136.0, 135.88, 135.84]


def test_seed_accepted_runs_pass():
    stats = summarize(SEED_ACCEPTED)
    assert round(stats.spread, 2) == 0.54
    assert gate(stats).passed


def test_dflash_bimodal_runs_are_flagged_as_two_clusters():
    verdict = gate(summarize(DFLASH))
    assert not verdict.passed
    assert any("2 clusters" in reason for reason in verdict.reasons)


def test_wide_but_unimodal_series_fails_on_range_and_cv():
    runs = [100, 104, 108, 112, 116, 120, 124]
    verdict = gate(summarize(runs), GateThresholds(cluster_gap_percent=50))
    assert not verdict.passed
    assert any("range" in r for r in verdict.reasons) and any("variation" in r for r in verdict.reasons)


def test_thresholds_are_settable():
    runs = [100, 104, 108, 112, 116, 120, 124]
    assert gate(summarize(runs), GateThresholds(max_range_percent=30, max_cv_percent=10)).passed
