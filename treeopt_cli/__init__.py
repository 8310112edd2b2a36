"""The ``treeopt`` command line: thin Typer commands over the ``treeopt`` and ``stand_runtime`` packages.

Each command checks its options (one-line errors, before any model loads), calls the packages, and
renders their results with rich (:mod:`treeopt_cli.render`). Bad input surfaces as ``error: ...`` and
exit code 2, never a traceback. Only this package (and the ``cli.py`` entry point) imports rich and
typer; one module per command group:

- :mod:`.generate`: ``generate``
- :mod:`.trees`: ``candidate``, ``export``, ``show``
- :mod:`.calibrate`: ``calibrate`` (decoding, or ``--traces``)
- :mod:`.bench`: ``bench`` (this toolkit's engine), :mod:`.bench_traces`: ``bench-traces`` (recorded
  traces, no model), :mod:`.bench_vllm`: ``bench-vllm``
- :mod:`.search`: ``search``; :mod:`.serve`: ``serve``
"""

from .app import app, run
from . import generate, calibrate, trees, bench, bench_traces, bench_vllm, search, serve  # noqa: E402,F401  (registers the commands)
from .options import describe_parameters

describe_parameters(app)

__all__ = ["app", "run"]
