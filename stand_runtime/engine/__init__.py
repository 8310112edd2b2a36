"""The Hugging Face decoding engine: one row's propose/settle steps (``decode_row``), the loops for one
sequence and for a batch (``decode``), lossless verification (``verify``), stopping,
statistics (``metrics``, ``diagnostics``), batched plain sampling with recorded p (``batch_sampling``),
the decoding-backend protocol (``backend``) and greedy replay of recorded traces (``trace_replay``)."""
