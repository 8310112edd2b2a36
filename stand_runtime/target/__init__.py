"""The target model: loading (``models``), what a tree step must know about it (``model_facts``), prompts,
the target distribution p (``sampling``), forwards with tree attention (``forward``, ``tree_attention``,
``fast_linear``), KV caches for one row and for a batch (``kv_cache``, ``batch_kv``), and its measured
latency (``latency``)."""
