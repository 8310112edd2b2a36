"""The Hugging Face decoding engine: a row of decoding, what it is given, its propose/settle steps and how rows are set up (``row``), the loops for one
sequence and for a batch (``decode``), lossless verification (``verify``), stopping,
statistics (``metrics``, ``diagnostics``), batched plain sampling with recorded p (``batch_sampling``),
the decoding-backend protocol (``backend``) and greedy replay of recorded traces (``trace_replay``)."""
