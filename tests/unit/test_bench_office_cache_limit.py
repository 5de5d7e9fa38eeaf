"""benchmarks/office_cache.py's LAN limits: issue 24's (the bytes + the apt work no download can cover, a
lower bound) beside the bytes-only one; the apt work of a batch is its longest host's, less its own downloads.
The figures in benchmarks/RESULTS.md rest on this arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.office_cache import batch_apt_work, lan_limits

MIB = 1024 * 1024


def report(**changes: Any) -> dict[str, Any]:
    """A 5-host canary rollout: the cache's link 400 Mbit/s, each host 200 Mbit/s; the byte counts
    chosen so each term is a round number of seconds."""
    base = {"cache_mbit": 400, "per_host_mbit": 200, "hosts": 5, "cached_s": 120.0,
            "cache_sent": 2_000_000_000, "cache_received": 500_000_000,  # 40 s and 10 s at 400 Mbit/s
            "canary_received": 500_000_000,  # 20 s at 200 Mbit/s
            "weights_bytes": 100_000_000,  # 4 s per host at 200 Mbit/s, 2 s per host at 400 Mbit/s
            "apt_work": [{"seconds": 20.0}, {"seconds": 50.0}]}
    return {**base, **changes}


def test_canary_limit_adds_only_the_apt_work_no_download_can_cover() -> None:
    limits = lan_limits(report())
    assert [seconds for _, seconds in limits["bytes"]] == pytest.approx([50.0, 20.0 + 30.0 + 10.0])
    lower_bound, block, task_order = (seconds for _, seconds in limits["issue"])
    # per batch the larger of its bytes and its apt work + a host's bytes other than weights at 200 Mbit/s:
    # the canary's 400 MB (16 s); the rest's (1500 - 4 x 100) / 4 MB each (11 s)
    assert lower_bound == pytest.approx(max(20.0, 20.0 + 16.0) + max(40.0, 50.0 + 11.0))
    # bytes per batch 60 s; canary: 20 - 4 (its weights at its rate); the rest: 50 - (4 x 2 + the fill 10)
    assert block == pytest.approx(60.0 + 16.0 + 32.0)
    assert task_order == pytest.approx(60.0 + 70.0)


def test_the_batch_images_wait_for_its_shortest_host_apt_work() -> None:
    apt_work = [{"seconds": 20.0, "shortest": 20.0, "apt_bytes": 50_000_000},
                {"seconds": 50.0, "shortest": 45.0, "apt_bytes": 200_000_000}]
    limits = lan_limits(report(apt_work=apt_work))
    # canary: its image (400 - 50 MB) 14 s at 200 Mbit/s, 20 + 14 < 20 + 16; the rest: 4 x 275 - 200 MB of
    # images 18 s at 400 Mbit/s after 45 s, more than 50 + 11
    assert limits["issue"][0][1] == pytest.approx(36.0 + 63.0)


def test_apt_work_the_downloads_cover_whole_adds_nothing() -> None:
    limits = lan_limits(report(apt_work=[{"seconds": 3.0}, {"seconds": 12.0}]))
    assert limits["issue"][0][1] == pytest.approx(limits["bytes"][-1][1])
    assert limits["issue"][1][1] == pytest.approx(limits["bytes"][-1][1])


def test_every_host_at_once_is_one_batch() -> None:
    limits = lan_limits(report(canary_received=0, apt_work=[{"seconds": 70.0}]))
    assert [seconds for _, seconds in limits["bytes"]] == pytest.approx([50.0])
    # a host's bytes other than weights: (2000 - 5 x 100) / 5 MB, 12 s at 200 Mbit/s
    assert limits["issue"][0][1] == pytest.approx(70.0 + 12.0)
    assert limits["issue"][1][1] == pytest.approx(50.0 + 70.0 - (5 * 2.0 + 10.0))


def test_without_the_apt_work_or_with_other_batches_only_the_bytes() -> None:
    assert "issue" not in lan_limits(report(apt_work=[]))
    assert "issue" not in lan_limits(report(apt_work=[{"seconds": 1.0}] * 3))


def test_batch_apt_work_is_its_longest_host_less_its_own_downloads() -> None:
    roles = {"a": {"docker": 30.0, "office_cache_client": 2.0, "model": 99.0},
             "b": {"docker": 40.0, "office_cache_client": 2.0}}
    batch = batch_apt_work(["a", "b"], roles, {"a": 12_500_000, "b": 125_000_000}, 100e6)
    # a: 32 - 1 s; b: 42 - 10 s (the model role is no apt work)
    assert (batch["host"], batch["seconds"], batch["hosts"]) == ("b", 32.0, 2)
    assert (batch["shortest"], batch["apt_bytes"]) == (31.0, 137_500_000)
