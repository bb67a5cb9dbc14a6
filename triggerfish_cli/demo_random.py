"""The demo store's source of randomness: ids, times, words and texts, all from one seed.

:class:`Gen` draws everything the demo generator writes (:mod:`triggerfish_cli.demo`),
so the same seed, day span and anchor time give the same store.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from datetime import datetime, timedelta

LEVELS = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED")
LEVEL_WEIGHTS = (40, 30, 20, 10)

WORDS = (
    "the agent user project deploy server database backup meeting invoice customer "
    "report schedule reminder weekly daily monthly budget contract review design "
    "prototype release version migration cluster kubernetes docker postgres redis "
    "search index memory session token channel message webhook trigger workflow "
    "pipeline analysis summary draft email calendar travel flight hotel dinner lunch "
    "coffee tea garden running cycling music podcast book article paper research "
    "experiment result metric latency throughput error warning incident postmortem "
    "roadmap quarter goal milestone feature bug fix patch upgrade security audit "
    "compliance policy retention lineage classification public internal confidential "
    "restricted alice bob carol dave erin frank oslo amsterdam berlin london tokyo "
    "acme globex initech umbrella stark wayne prefers likes dislikes needs wants "
    "asked said remembered noted decided always never usually sometimes morning "
    "evening night weekend holiday birthday anniversary family friend colleague "
    "manager team office home stack frontend backend api cli terminal shell script "
    "cron job queue "
).split()


class Gen:
    """Deterministic generator of gateway-shaped records."""

    def __init__(self, seed: int, now: datetime, days: int) -> None:
        self.rng = random.Random(seed)
        self.now = now
        self.span = max(1, days) * 86400.0
        rng = self.rng
        self.sentences = [
            " ".join(rng.choices(WORDS, k=rng.randint(6, 18))).capitalize() + "."
            for _ in range(4000)
        ]

    def uuid(self) -> str:
        bits = self.rng.getrandbits(128)
        bits = (bits & ~(0xF000 << 64)) | (0x4000 << 64)  # version 4
        bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC 4122 variant
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def cache_id(self) -> str:
        return f"{self.rng.getrandbits(24):06x}"

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def moment(self, after: datetime | None = None, within: float | None = None) -> datetime:
        if after is None:
            return self.now - timedelta(seconds=self.rng.random() * self.span)
        limit = (self.now - after).total_seconds()
        offset = self.rng.random() * min(limit, within if within is not None else limit)
        return after + timedelta(seconds=max(0.0, offset))

    def text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(self.sentences, k=self.rng.randint(low, high)))

    def level(self) -> str:
        return self.rng.choices(LEVELS, weights=LEVEL_WEIGHTS)[0]


def quota(records: int, share: float, minimum: int = 1) -> int:
    return max(minimum, int(records * share))


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


_SYLLABLES = (
    "ka lo mi ter van dor sel bri qua nem ost ril pa fen gus tho wy zel cam dru "
    "el ix or un ast bel cor dim fal gor hin jul kem lun mar nor pil ros sut vor"
).split()


def zipf_texts(seed: int, words: int) -> Callable[[], str]:
    """A maker of texts of about ``words`` words with a Zipf word distribution.

    The vocabulary is the demo's words followed by 20,000 made-up ones; the
    word of rank r is drawn with weight 1/r. Its own random stream leaves
    the rest of the store as it is without this option.
    """
    rng = random.Random(seed * 7919 + 17)
    vocabulary = list(WORDS)
    known = set(vocabulary)
    while len(vocabulary) < len(WORDS) + 20_000:
        word = "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4)))
        if word not in known:
            known.add(word)
            vocabulary.append(word)
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(vocabulary) + 1)))
    sentences = []
    for _ in range(20_000):
        chosen = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(6, 18))
        sentences.append(" ".join(chosen).capitalize() + ".")

    def make() -> str:
        target = rng.randint(words * 4 // 5, words * 6 // 5)
        parts: list[str] = []
        length = 0
        while length < target:
            sentence = rng.choice(sentences)
            parts.append(sentence)
            length += sentence.count(" ") + 1
        return " ".join(parts)

    return make

