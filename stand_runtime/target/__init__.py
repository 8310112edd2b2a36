"""The target model: loading (``models``), what a tree step must know about it (``model_facts``), prompts,
the target distribution p and its nucleus (``sampling``), forwards with tree attention (``forward``,
``fast_linear``), KV caches for one row and for a batch (``kv_cache``), and its measured latency
(``timing``, ``latency``)."""
