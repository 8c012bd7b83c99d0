"""Multiple comparisons: Holm's step-down correction across the k tests a verdict rule reads, and the family as the
doc shows it.

    holm([0.01, 0.04, 0.03, 0.005])  # -> [0.03, 0.06, 0.06, 0.02]
    fam = Family("each encoding's d_8 against 0.10 nats", ("alibi", "rope"), (0.001, 0.03))
    fam.k, fam.adjusted, fam.rejects(1)

Holm (1979): sort the k raw p-values p_(1) <= ... <= p_(k); the adjusted p_(i) is max over j <= i of
min(1, (k - j + 1) · p_(j)). A test is significant when its adjusted p <= ALPHA; this keeps the chance of any false
rejection in the family at most ALPHA, whatever the dependence between the tests. A test without a p-value (n < 2,
zero spread) cannot reject: it counts as p = 1 and stays in k, so k is the number of comparisons the rule reads,
not the number that happened to produce a p-value.
Not handled: computing the p-values (the rules use evidence.py's paired / Welch / one-sample t-tests), other
corrections (Bonferroni is Holm's first step; FDR procedures answer a different question).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ALPHA = 0.05  # family-wise error rate; matches the 95% intervals everywhere else


def holm(p: Sequence[float | None]) -> list[float]:
    """Holm-adjusted p-values, in the input order; None (no test) counts as 1.0."""
    raw = [1.0 if v is None else float(v) for v in p]
    k = len(raw)
    order = sorted(range(k), key=lambda i: raw[i])  # stable: ties keep their input order
    adjusted = [1.0] * k
    running = 0.0
    for rank, i in enumerate(order):  # rank 0 is the smallest p, multiplied by k
        running = max(running, min(1.0, (k - rank) * raw[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Family:
    """The k comparisons one rule reads, with their raw two-sided p-values (None: no test) and, once the rule has
    decided, what it read from each after the correction."""

    what: str  # the comparisons in one phrase: "each encoding's mean d_8 against 0.10 nats (one-sample t-test)"
    labels: tuple[str, ...]
    p: tuple[float | None, ...]
    readings: tuple[str, ...] = ()  # the rule's reading of each test after the correction ("holds", "undecided")

    @property
    def k(self) -> int:
        return len(self.p)

    @property
    def adjusted(self) -> list[float]:
        return holm(self.p)

    def rejects(self, i: int) -> bool:
        """Test i is significant after Holm's correction (adjusted p <= ALPHA)."""
        return self.p[i] is not None and self.adjusted[i] <= ALPHA
