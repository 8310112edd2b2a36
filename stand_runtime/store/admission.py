"""Reserve admission (ours): how a merge keeps the ids just below q's top k.

The paper's truncation would lose, at every merge, the whole mass of a token that is not (yet)
among the k largest, so a new successor observed with a sharp p could never climb in: after c
observations it enters with 1/(c+1) against stored values ~c/(c+1) of theirs. Each entry therefore also keeps a *reserve*: the next ``reserve`` ids by merged value,
with their exact running averages, which q does not show. A reserve id keeps accumulating and is
promoted as soon as its average passes the k-th; the k ids q shows keep exactly the paper's values.
"""

from __future__ import annotations

from .entry import StoreEntry


def merge_observation(stored: StoreEntry, id_list: list[int], prob_list: list[float], top_k: int,
                      reserve: int) -> tuple[StoreEntry, float]:
    """Merge one observation into a stored entry: the count-weighted running average over the union
    of ids (reserve ids included), its ``top_k`` largest shown and the next ``reserve`` kept.

    Args:
        stored: the context's entry.
        id_list: the observation's ids (as :func:`stand_runtime.store.observation.top_observation` gives them).
        prob_list: their probabilities.
        top_k: ids of q.
        reserve: ids kept beyond q's (0: the paper's plain truncation).

    Returns:
        ``(merged entry, dropped mass)``: the mass of the merged average outside q's ``top_k`` ids
        (0.0 when nothing was cut off).
    """
    count = stored.count
    weighted = {token: prob * count for token, prob in zip(stored.id_list, stored.prob_list)}
    for token, prob in zip(*stored.reserve):
        weighted[token] = prob * count
    for token, prob in zip(id_list, prob_list):
        weighted[token] = weighted.get(token, 0.0) + prob
    merged = sorted(weighted.items(), key=lambda item: -item[1])
    scale = 1.0 / (count + 1)
    dropped = 0.0
    kept: tuple = ((), ())
    if len(merged) > top_k:
        dropped = sum(mass for _, mass in merged[top_k:]) * scale
        if reserve:
            extra = merged[top_k : top_k + reserve]
            kept = ([t for t, _ in extra], [m * scale for _, m in extra])
        merged = merged[:top_k]
    return StoreEntry([t for t, _ in merged], [m * scale for _, m in merged], count + 1, kept), dropped
