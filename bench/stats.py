"""Order statistics without numpy."""
from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for an empty list."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(q / 100.0 * len(s)))
    return s[min(k, len(s)) - 1]


def median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def summary(values: list[float], prefix: str) -> dict:
    """{prefix_p50_ms, prefix_p95_ms, prefix_min_ms, prefix_max_ms, prefix_n}."""
    r = lambda v: None if v is None else round(v, 3)   # noqa: E731
    return {
        f"{prefix}_p50_ms": r(median(values)),
        f"{prefix}_p95_ms": r(percentile(values, 95)),
        f"{prefix}_min_ms": r(min(values)) if values else None,
        f"{prefix}_max_ms": r(max(values)) if values else None,
        f"{prefix}_n": len(values),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)
