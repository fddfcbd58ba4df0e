"""Per-queue rate limits: a token bucket consumed before a claim.

The parent takes tokens for the jobs it is about to claim and refunds the ones a short
claim did not use, so a queue limited to 20 jobs/s never starts more than 20 per second
plus its burst, whatever the number of children.
"""

from __future__ import annotations

import math


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst`` (at least 1).

    Time is passed in (monotonic seconds) rather than read, so the policy is testable and
    every caller in one loop turn sees the same instant.
    """

    def __init__(self, rate: float, burst: float | None = None, now: float = 0.0) -> None:
        if rate <= 0:
            raise ValueError("max_rate must be positive")
        self.rate = float(rate)
        self.capacity = max(1.0, float(burst if burst is not None else 1.0))
        self.tokens = self.capacity
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, wanted: int, now: float) -> int:
        """Take up to ``wanted`` whole tokens; returns how many were granted."""
        self._refill(now)
        granted = min(wanted, int(self.tokens))
        if granted > 0:
            self.tokens -= granted
        return max(granted, 0)

    def refund(self, unused: int) -> None:
        """Give back tokens a claim did not use (it returned fewer jobs than granted)."""
        if unused > 0:
            self.tokens = min(self.capacity, self.tokens + unused)

    def next_token_at(self, now: float) -> float:
        """When the next whole token is due (``now`` if one is there already; infinity
        for a bucket retuned to rate 0)."""
        self._refill(now)
        if self.tokens >= 1.0:
            return now
        if self.rate <= 0:
            return math.inf
        return now + (1.0 - self.tokens) / self.rate

    @classmethod
    def empty(cls, now: float) -> TokenBucket:
        """A bucket with no rate and no tokens yet, for a global limit's slice: it fills
        only once ``retune`` gives it a rate (starting full would let every supervisor
        that starts at once spend a whole burst)."""
        bucket = cls(1.0, 1.0, now)
        bucket.rate = 0.0
        bucket.tokens = 0.0
        return bucket

    def retune(self, rate: float, capacity: float, now: float) -> None:
        """Change the rate and size from ``now`` on (tokens gathered so far at the old
        rate, then cut to the new size). A rate of 0 stops the refill."""
        self._refill(now)
        self.rate = max(float(rate), 0.0)
        self.capacity = max(1.0, float(capacity))
        self.tokens = min(self.tokens, self.capacity)

    def available(self, now: float) -> int:
        """Whole tokens there now, without taking any."""
        self._refill(now)
        return math.floor(self.tokens)
