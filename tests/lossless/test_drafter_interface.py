"""A new drafter written from the interface alone (stand_runtime.drafters.base.Drafter) runs through the
engine, alone and in a batch, and decodes as plain decoding does."""

from __future__ import annotations

from stand_runtime import SamplingParams, generate
from stand_runtime.drafters.base import Drafter
from stand_runtime.engine.row import DecodeRow
from stand_runtime.engine.loop import BatchCache, Loop, SequenceCache
from stand_runtime.engine.stopping import StopRule
from stand_runtime.randomness import RandomStream
from stand_runtime.trees.draft import Draft

GREEDY = SamplingParams(temperature=0)
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4]


class BigramDrafter(Drafter):
    """Drafts a chain: after each token, the token that last followed it in the sequence."""

    def __init__(self, length: int = 4) -> None:
        self.length = length
        self.follows: dict[int, int] = {}

    def _learn(self, tokens) -> None:
        self.follows.update(zip(tokens[:-1], tokens[1:]))

    def observe_prompt(self, prompt, feed, positions) -> None:
        self._learn(prompt)

    def draft(self, committed, max_depth) -> Draft:
        self._learn(committed[-2:])
        chain, token = [], committed[-1]
        while len(chain) < min(self.length, max_depth) and token in self.follows:
            token = self.follows[token]
            chain.append(token)
        return Draft.chain(committed[-1], chain) if chain else Draft.root_only(committed[-1])

    def observe_step(self, committed, draft, accepted, feed) -> None:
        self._learn(committed[-1:] + [draft.tokens[p] for p in accepted])


def decode(model, prompts, cache) -> list:
    rows = [DecodeRow(p, BigramDrafter(), GREEDY, RandomStream.seeded(0), StopRule((), 30)) for p in prompts]
    return Loop(model, rows, cache).run()


def test_a_drafter_from_the_interface_decodes_as_plain_decoding(tiny_qwen2):
    plain = [generate(tiny_qwen2, None, p, method="ar", sampling=GREEDY, max_new_tokens=30, eos_token_ids=[]).tokens
             for p in PROMPTS]
    alone = [decode(tiny_qwen2, [p], SequenceCache(tiny_qwen2))[0] for p in PROMPTS]
    batch = decode(tiny_qwen2, PROMPTS, BatchCache(tiny_qwen2))
    assert [r.tokens for r in alone] == plain and [r.tokens for r in batch] == plain
    assert all(sum(r.stats.accepted_per_step) > 0 for r in alone + batch)  # its drafts were accepted
    assert alone[0].stats.store is None and alone[0].stats.diagnostics_s == 0.0  # the defaults it inherits
