"""treeopt: offline draft-tree optimization for STAND (paper §3.3; docs/trees.md §6) and its evaluation.

Subpackages: ``data`` (prompt and trace sources), ``optimize`` (candidate trees, calibration, pruning,
export, depth profiles), ``evaluate`` (benches, test-time-scaling search, verifiers, plots). It never
imports rich or typer: the CLI renders its results.
"""

from stand_runtime import __version__

from .evaluate.answers import extract_answer, majority_vote
from .evaluate.bench import BenchMethod, MethodResult, parse_methods, results_json, run_bench, speedups
from .optimize.calibrate import CalibrationConfig, Progress, calibrate, direct_prompt
from .optimize.calibration import CALIBRATION_FORMAT, Calibration, load_calibration
from .optimize.candidate import Prior, candidate_tree, per_depth_tree
from .data.datasets import Prompt, load_prompts
from .optimize.export import FAMILY_SIZES, export_family, export_tree
from .optimize.profile import DepthProfile, depth_profile, load_tree_or_calibration
from .optimize.prune import best_sums, prune
from .optimize.replay import replay_trajectory
from .evaluate.search import STRATEGIES, ProblemResult, SearchSettings, best_of_n, dvts, run_search, search_problem, summarize
from .evaluate.verifiers import Candidate, CallableVerifier, ConfidenceVerifier, PRMVerifier, Verifier, make_verifier

__all__ = [
    "BenchMethod", "CALIBRATION_FORMAT", "FAMILY_SIZES", "export_family", "Calibration", "CalibrationConfig", "DepthProfile", "MethodResult", "Prior",
    "Progress", "Prompt", "__version__", "best_sums", "calibrate", "candidate_tree",
    "depth_profile", "direct_prompt", "export_tree", "extract_answer", "load_calibration", "load_prompts",
    "load_tree_or_calibration", "majority_vote", "parse_methods", "per_depth_tree", "prune",
    "replay_trajectory", "results_json", "run_bench", "speedups",
    "STRATEGIES", "ProblemResult", "SearchSettings", "best_of_n", "dvts", "run_search", "search_problem", "summarize",
    "Candidate", "CallableVerifier", "ConfidenceVerifier", "PRMVerifier", "Verifier", "make_verifier",
]
