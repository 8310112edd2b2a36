"""Sizing: how much a step drafts, priced by the target's latency and the drafts' acceptance.

Everything that decides a draft's size lives here, and nothing here drafts or decodes:

- :mod:`.latency_model`: t(n), the seconds of a target forward over n tokens: a latency profile
  corrected by observed forwards;
- :mod:`.value`: the expected-value rule of a value-sized dynamic tree (``dynamic-auto``): the drawn
  nodes and the copy chain as one list of candidates, the stopping rule over expected tokens per
  second, and the acceptance map P(path accepted | node score) it learns;
- :mod:`.allocation`: one node budget per batched forward, spent over every row's candidates;
- :mod:`.acceptance_seed`: the acceptance map's seed from an offline calibration;
- :mod:`.tree_choice`: the static ``auto`` tree, the member of a tree family sized for this machine;
- :mod:`.session`: :class:`~.session.SizingSession`, what a run learns while decoding (latency
  corrections, acceptance), owned apart from the :class:`stand_runtime.method.Method` value.

Every decision reads past steps and the scores of the nodes it keeps only, so sizing never changes
what verification accepts (docs/algorithms.md §3.7).
"""
