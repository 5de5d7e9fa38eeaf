"""Throughput statistics and the stability gate `provision bench` applies to them.

The seed's lesson: speculative decoding averaged well but its runs were bimodal (218, 229, 62, 223,
...): some requests ran at a third of the speed. An average hides that, so the gate fails a
series whose range or coefficient of variation is too wide, or that splits into two clusters.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GateThresholds:
    max_range_percent: float = 10.0  # of the mean
    max_cv_percent: float = 5.0  # standard deviation as a percentage of the mean
    cluster_gap_percent: float = 20.0  # a gap between sorted runs wider than this (of the median) splits them


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SeriesStats:
    runs: list[float]
    mean: float
    minimum: float
    maximum: float
    spread: float
    stdev: float
    clusters: list[list[float]]

    @property
    def cv_percent(self) -> float:
        return 100 * self.stdev / self.mean if self.mean else 0.0

    @property
    def range_percent(self) -> float:
        return 100 * self.spread / self.mean if self.mean else 0.0


def clusters(values: list[float], gap_percent: float) -> list[list[float]]:
    """Split sorted values wherever two neighbours are further apart than gap_percent of the median."""
    if not values:
        return []
    ordered = sorted(values)
    limit = statistics.median(ordered) * gap_percent / 100
    groups = [[ordered[0]]]
    for previous, value in itertools.pairwise(ordered):
        if value - previous > limit:
            groups.append([])
        groups[-1].append(value)
    return groups


def summarize(runs: list[float], thresholds: GateThresholds = GateThresholds()) -> SeriesStats:
    if not runs:
        raise ValueError("no runs to summarize")
    return SeriesStats(
        runs=list(runs),
        mean=statistics.fmean(runs),
        minimum=min(runs),
        maximum=max(runs),
        spread=max(runs) - min(runs),
        stdev=statistics.stdev(runs) if len(runs) > 1 else 0.0,
        clusters=clusters(runs, thresholds.cluster_gap_percent),
    )


def gate(stats: SeriesStats, thresholds: GateThresholds = GateThresholds()) -> Verdict:
    """Pass a steady series; fail a wide or split one, saying why."""
    reasons = []
    if len(stats.clusters) > 1:
        described = " and ".join(f"{len(g)} runs near {statistics.median(g):.0f}" for g in stats.clusters)
        reasons.append(f"runs split into {len(stats.clusters)} clusters: {described}")
    if stats.range_percent > thresholds.max_range_percent:
        reasons.append(f"range {stats.spread:.1f} tok/s is {stats.range_percent:.1f}% of the mean "
                       f"(limit {thresholds.max_range_percent:g}%)")
    if stats.cv_percent > thresholds.max_cv_percent:
        reasons.append(f"coefficient of variation {stats.cv_percent:.1f}% (limit {thresholds.max_cv_percent:g}%)")
    return Verdict(passed=not reasons, reasons=reasons)
