"""A drafter memory does not learn a prompt twice (stand_runtime.store.learned)."""

import pytest

from stand_runtime import Method, SamplingParams, generate, generate_batch
from stand_runtime.drafters import new_memory
from stand_runtime.store.learned import LearnedSequences, learned_sequences
from test_engine import REPEAT_PROMPT


def test_covered_counts_the_prefixes_some_learned_sequence_holds_p_after():
    ledger = LearnedSequences()
    assert ledger.covered([1, 2, 3]) == 0
    ledger.add([1, 2, 3, 4])  # p after [1], [1, 2], [1, 2, 3]
    assert ledger.covered([1, 2, 3, 4, 5, 6]) == 3
    assert ledger.covered([1, 2]) == 2
    assert ledger.covered([1, 9, 3]) == 1
    assert ledger.covered([7, 2, 3]) == 0
    grows = [5, 6]
    ledger.add(grows)
    grows += [7, 8, 9]  # a decoding row's committed list: the ledger sees it grow
    assert ledger.covered([5, 6, 7, 8, 9, 10]) == 4
    ledger.add(grows)  # registered once
    assert len(ledger._sequences) == 2


@pytest.mark.parametrize("batched", [False, True])
def test_a_prompt_that_repeats_a_decoded_sequence_is_not_fed_again(tiny_qwen2, monkeypatch, batched):
    """DVTS's pattern: the next prompt is the last one plus a decoded continuation; the store is fed
    only the positions past what it learned (none here), and decoding stays plain decoding's."""
    import stand_runtime.drafters.stand as stand

    fed = []
    original = stand.feed_store
    monkeypatch.setattr(stand, "feed_store", lambda store, tokens, positions, *rest: (fed.append(list(positions)),
                                                                                      original(store, tokens, positions, *rest)))
    method, greedy = Method.parse("stand", "dynamic-auto", tiny_qwen2), SamplingParams(temperature=0)
    memory = new_memory("stand", 16, "dynamic-auto")

    def decode(prompt):
        if batched:
            return generate_batch(tiny_qwen2, None, [prompt], n=2, method=method, sampling=greedy, max_new_tokens=12,
                                  eos_token_ids=[], store=memory)[0]
        return generate(tiny_qwen2, None, prompt, method=method, sampling=greedy, max_new_tokens=12,
                        eos_token_ids=[], store=memory)

    first = decode(REPEAT_PROMPT)
    assert fed and fed[0] == list(range(len(REPEAT_PROMPT) - 1))  # the new prompt: every position
    longer = REPEAT_PROMPT + first.tokens
    assert learned_sequences(memory).covered(longer) == len(longer) - 1
    fed.clear()
    second = decode(longer)
    assert all(p >= len(longer) - 1 for positions in fed for p in positions)  # no prompt position fed again
    plain = generate(tiny_qwen2, None, longer, method="ar", sampling=greedy, max_new_tokens=12, eos_token_ids=[])
    assert second.tokens == plain.tokens
    assert second.stats.target_forwards < len(second.tokens)  # drafts were accepted: the comparison proves something
