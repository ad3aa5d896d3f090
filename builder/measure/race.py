"""When to stop timing: pure verdicts over the samples so far, asked by THE timing loop after every round.

Why: a fixed budget per candidate spends as long on a candidate ten times slower than the best as on two that
are within noise of each other. The answer the timing exists for is known much earlier (successive elimination):
- a candidate slower than the current best BEYOND NOISE (`decide.faster_beyond_noise` over `stats.median_ci`:
  the medians' 95% confidence intervals apart, the rule the final choice uses) stops ("slower than X beyond
  noise after N calls"); its p50 and interval stay those of the samples it had, and the rest share its time;
- once every choosable survivor is within noise of the best and its median is stable (+-2%, what bench calls
  stable), or each is as fast as the best within +-2% round by round (`Race.equivalent`), more time would not
  change the choice by more than that: everyone still running stops ("settled"), as they do when one choosable
  candidate is left;
- otherwise the budget stops them ("budget").

The verdicts are taken over each runner's ROUNDS (the median of each slice of calls), not its single calls: calls
within one 20 ms slice share that moment's host load, so their interval is far narrower than the noise between
moments. Recorded here (digits CNN, 45 s full-budget runs on 2 shared cores): LiteRT int8 against dynamic-range
was 8% apart over the whole run, yet the dynamic-range file was faster in 16% of the rounds, and judged on calls
the race dropped the int8 file in the first round in 1 of 10 replayed windows. A verdict needs
`stats.fewest_samples` rounds (6 at 95%: fewer have no confidence interval at all).

The settle rule was chosen by replaying recorded full-budget runs (3 digits CNN, 2 MobileNetV2; 45 s each on 2
shared cores; 10 windows of each, and again with the chosen candidate split into two true equals) through the
candidate rules, judging each pick by the full run's own medians: intervals projected to the whole budget
(settled when the projected pick is the current one) settled soonest but picked a file 6-12% slower (digits) and
2.35x slower (MobileNetV2) in some windows; +-5% and +-10% widths a 6.5% slower one in 1-2 of 10 windows of one
digits run; +-2%, like elimination alone, never a slower one in the plain replays (in the tie replays of one
digits run, a 12% slower one in 3 windows where the recording ran out before +-2% was reached). Calls timed, per
window's median: digits 2-7 s, MobileNetV2 7-11 s, against 45 s. Where two files are truly within 1-2%, any
rule's pick differs from the full run's in some windows, at no cost by the full run's medians.

Round by round: two candidates timed in the same round share that moment's load, so the ratio of their round
medians is far steadier than either median. On a busy host two files that run the same network (a float model on
OpenVINO at bf16, read from its `.tflite` and from its IR) were within 1% of each other yet neither median reached
+-2% before the 45 s budget (the race took 44-46 s of a 93-103 s MobileNetV2 run). Settling as well when the
ratio's interval is within +-2%, replayed through the same recorded runs: the same picks in every plain replay,
as soon or sooner; in the tie replays of one digits run it picked the full run's choice in 10 of 10 windows (the
+-2% rule alone 7, once a file 12% slower) in 2.6 s instead of 4.3 (median); at +-3% once a 6.5% slower file.

Candidates that cannot be chosen (a gate failure, a file the recipe does not ship, the reference row) are timed
for the report only: dropped when slower than the best beyond noise, stopped ("settled") once their median is
known as a reported figure is (+-10%, `PerRunner`) or with the others when the choice is settled, never the best
(on 2 busy cores a rejected int8 IR, faster than every choosable file, took 12 of MobileNetV2's 45 s).

`PerRunner` is the other policy: each runner stops on its own once its median is known (rows/s, one core's
capacity: figures to report, no choice between runners).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from builder.measure import decide, stats

#: Why a runner stopped (the report's words; `slower` is completed with the best's name and the calls taken).
SETTLED = "settled"
BUDGET = "budget"
#: The choice is settled once every survivor's median is stable (`stats.STABLE_REL_HALF_WIDTH`, +-2%: what bench
#: calls stable) over its rounds. Replayed on recorded full-budget runs (see the module's docstring), +-5% and
#: +-10% settled 0.5-1.5 s sooner but picked a 6.5% slower file in some windows; +-2% did not.
SETTLE_REL_HALF_WIDTH = stats.STABLE_REL_HALF_WIDTH
#: A figure reported, not compared (rows/s, one core's capacity), is known once its median is within +-10% over
#: its rounds: the same rows/s differed 1.10-1.50x between three whole optimize runs of the digits CNN (15 s of
#: rows/s timing each), so a narrower interval within one run would not make it more repeatable; at +-5% the
#: rows/s pass on 2 busy cores still ran to its 16 s cap.
KNOWN_REL_HALF_WIDTH = 0.10


SLOWER = "slower than "


def slower(best: str, calls: int) -> str:
    return f"{SLOWER}{best} beyond noise after {calls} calls"


@dataclass(frozen=True)
class Entrant:
    """What the race knows of a candidate besides its samples: the tie order `decide.pick` uses (file size,
    runtime, a caller's preference) and whether it can be chosen at all."""

    name: str
    size_bytes: int = 0
    runtime: str = ""
    preference: int = 0
    eligible: bool = True


@dataclass(frozen=True)
class Lap:
    """What a policy is shown after each round: every runner's samples so far (seconds), who is still running,
    the loop's time so far, its budget and the rounds run."""

    samples: Mapping[str, Sequence[float]]
    running: tuple[str, ...]
    elapsed_s: float
    budget_s: float
    rounds: int = 1
    #: each runner's median of each of its slices (one per round it ran); None: each sample is its own slice
    slices: Mapping[str, Sequence[float]] | None = None

    def per_slice(self, name: str) -> Sequence[float]:
        return self.samples[name] if self.slices is None else self.slices[name]


@dataclass(frozen=True)
class Verdict:
    """After one round: who stops now and why (`drop`), and whether everyone still running stops (`stop_all`,
    the reason for each of them; empty: go on)."""

    drop: Mapping[str, str] = field(default_factory=dict)
    stop_all: str = ""


def timed(name: str, samples: Sequence[float], entrant: Entrant, confidence: float) -> decide.Timed:
    low, high = stats.median_ci(samples, confidence)
    return decide.Timed(name, stats.median(samples), low, high, entrant.size_bytes, entrant.runtime,
                        entrant.preference)


@dataclass(frozen=True)
class Race:
    """Successive elimination among `entrants` (by name) at `confidence` (the report's 95%)."""

    entrants: Mapping[str, Entrant]
    confidence: float = 0.95
    settle_half_width: float = SETTLE_REL_HALF_WIDTH

    @property
    def fewest(self) -> int:
        return stats.fewest_samples(self.confidence)

    def entrant(self, name: str) -> Entrant:
        return self.entrants.get(name) or Entrant(name, eligible=False)

    def __call__(self, lap: Lap) -> Verdict:
        """Who stops after this round (pure: the same lap gives the same verdict)."""
        samples, running = lap.samples, lap.running
        judged = {n: timed(n, lap.per_slice(n), self.entrant(n), self.confidence)
                  for n in running if len(lap.per_slice(n)) >= self.fewest}
        choosable = [t for n, t in judged.items() if self.entrant(n).eligible]
        if not choosable:  # nothing here can be chosen: each is reported once it has an interval
            none_to_choose = not any(self.entrant(n).eligible for n in running) and len(judged) == len(running)
            return Verdict(stop_all=SETTLED if none_to_choose else "")
        best = decide.fastest(choosable)
        drop = {n: slower(best.name, len(samples[n])) for n, t in judged.items()
                if n != best.name and decide.faster_beyond_noise(best, t)}
        known = {n: SETTLED for n in running if n not in drop and n in judged and not self.entrant(n).eligible
                 and stats.is_stable(lap.per_slice(n), min_samples=self.fewest, rel_half_width=KNOWN_REL_HALF_WIDTH,
                                     confidence=self.confidence)}
        drop |= known  # one that cannot be chosen but is not slower: its figure is only reported, once known
        left = [n for n in running if n not in drop]
        waiting = [n for n in left if self.entrant(n).eligible and n not in judged]
        if waiting:  # a choosable candidate without a verdict yet: nothing is settled
            return Verdict(drop)
        alive = [n for n in left if self.entrant(n).eligible]
        if self.settled(alive, lap.per_slice):
            return Verdict(drop, SETTLED)
        return Verdict(drop)

    def settled(self, alive: Sequence[str], per_slice: Callable[[str], Sequence[float]]) -> bool:
        """Whether the choice among the choosable survivors `alive` (all within noise of the best) is known: one
        left, every one's median pinned to within +-`settle_half_width` (its interval over its rounds), or every
        one as fast as the best within that width round by round (`equivalent`)."""
        return len(alive) <= 1 or all(
            stats.is_stable(per_slice(n), min_samples=self.fewest, rel_half_width=self.settle_half_width,
                            confidence=self.confidence) for n in alive) or self.equivalent(alive, per_slice)

    def equivalent(self, alive: Sequence[str], per_slice: Callable[[str], Sequence[float]]) -> bool:
        """Every survivor's time over the best's, taken round by round (the two timed moments apart, under the
        same host load), has its median's interval within +-`settle_half_width` of 1: whichever the tie order
        picks is at most that much slower, however long they were timed on."""
        best_name = decide.fastest([timed(n, per_slice(n), self.entrant(n), self.confidence) for n in alive]).name
        best = per_slice(best_name)
        for name in alive:
            if name == best_name:
                continue
            rounds = per_slice(name)
            common = min(len(rounds), len(best))  # the rounds both ran are each one's latest
            if common < self.fewest:
                return False
            ratios = [a / b for a, b in zip(rounds[len(rounds) - common:], best[len(best) - common:])]
            low, high = stats.median_ci(ratios, self.confidence)
            if low < 1 / (1 + self.settle_half_width) or high > 1 + self.settle_half_width:
                return False
        return True


@dataclass(frozen=True)
class PerRunner:
    """Each runner stops on its own ("settled") once its median is known to within +-`rel_half_width` (the
    interval over its rounds, at least `stats.fewest_samples` of them): for figures reported, not compared
    (rows/s, one core's capacity)."""

    rel_half_width: float = KNOWN_REL_HALF_WIDTH
    confidence: float = 0.95

    def __call__(self, lap: Lap) -> Verdict:
        fewest = stats.fewest_samples(self.confidence)
        return Verdict({n: SETTLED for n in lap.running
                        if stats.is_stable(lap.per_slice(n), min_samples=fewest, rel_half_width=self.rel_half_width,
                                           confidence=self.confidence)})
