"""Calibration: replay agrees with direct (greedy: exactly; sampling: within sampling error), resume."""

import json

import numpy as np
import pytest
from conftest import DigitsTokenizer, tiny_model
from stand_runtime import Method, NGramStore, SamplingParams, StandError, generate
from stand_runtime.randomness import RandomStream
from stand_runtime.engine.batch_sampling import sample_recorded
from treeopt.optimize.calibrate import CalibrationConfig, calibrate
from treeopt.optimize.calibration import load_calibration
from treeopt.optimize.replay import replay_trajectory
from treeopt.optimize.candidate import candidate_tree
from treeopt.data.datasets import Prompt
from treeopt.optimize.export import export_tree

PROMPTS = [[3, 1, 4, 1, 5] * 4, [2, 7, 1, 8, 2, 8] * 3, [1, 1, 2, 3, 5, 8, 13] * 3]


def test_greedy_replay_takes_exactly_the_steps_of_direct_decoding():
    model = tiny_model()
    tree = candidate_tree(20)
    direct = np.zeros(tree.num_nodes + 1)
    direct_steps = 0
    for prompt in PROMPTS:
        def count(step):
            for position in step.verification.accepted:
                direct[step.draft.nodes[position]] += 1

        result = generate(model, None, prompt, method=Method.parse("stand", tree, model, copy_tokens=0).ablated(extend=False), sampling=SamplingParams(temperature=0), max_new_tokens=24, eos_token_ids=[], on_step=count)
        direct_steps += result.stats.target_forwards
    replayed = np.zeros(tree.num_nodes + 1)
    sampled = sample_recorded(model, PROMPTS, SamplingParams(temperature=0), 24, [], [None] * 3, batch_size=3)
    replay_steps = sum(
        replay_trajectory(s.prompt, s.tokens, s.recorded, tree, NGramStore(), RandomStream.seeded(0), replayed,
                          stochastic=False, segmentations=1)
        for s in sampled
    )
    assert replay_steps == direct_steps
    assert np.allclose(replayed, direct)
    assert direct.sum() > 10  # drafts were accepted


def se_floor(alpha, steps):
    return np.sqrt(np.maximum(alpha, 1.0 / steps) * (1 - np.minimum(alpha, 0.99)) / steps)


@pytest.mark.slow
@pytest.mark.model
def test_replay_and_direct_agree_on_the_default_model(default_model, tmp_path):
    """4 HumanEval prompts x 2 trajectories x 48 tokens, T = 0.6, a 60-node candidate.

    Per node, z = (alpha_replay - alpha_direct) / sqrt(se_r^2 + se_d^2) with each se the larger of
    the prompt-clustered standard error and the binomial one; every node with alpha >= 0.02 in either
    estimate must have |z| < 4. The same for the expected acceptance length of the best 20- and
    40-node trees (with the prompt-clustered standard error of their sum of alpha-hat): at 4 prompts
    the two estimates differed by -11% to +9% over seeds 0-3, so a fixed 10% bound was noise.
    """
    model, tokenizer = default_model
    results = {}
    for method in ("replay", "direct"):
        config = CalibrationConfig(samples=4, method=method, max_new_tokens=48, candidate_nodes=60, trajectories=2, seed=0)
        results[method] = calibrate(config, model, tokenizer, tmp_path / f"{method}.json")
    replay, direct = results["replay"], results["direct"]
    se = np.sqrt(
        np.maximum(replay.alpha_stderr(), se_floor(replay.alpha, replay.steps)) ** 2
        + np.maximum(direct.alpha_stderr(), se_floor(direct.alpha, direct.steps)) ** 2
    )
    z = (replay.alpha - direct.alpha) / se
    relevant = np.maximum(replay.alpha, direct.alpha) >= 0.02
    assert relevant.sum() >= 5
    assert np.abs(z[relevant]).max() < 4, z[relevant]
    for nodes in (20, 40):  # the expected acceptance length of the best K-node tree, in both estimates
        chosen = {tuple(p) for p in export_tree(direct, nodes).tree.paths}
        members = np.array([int(path in chosen) for path in direct.candidate.paths])
        taus, errors = [], []
        for result in (replay, direct):
            taus.append(1.0 + float(result.alpha[members == 1].sum()))
            errors.append(max(float(result.alpha_stderr(members)[1]), 0.01))
        z = (taus[0] - taus[1]) / np.hypot(*errors)
        assert abs(z) < 4, (nodes, taus, errors)
    assert direct.expected_acceptance_length > 1.3  # drafts were accepted


def test_resume_skips_finished_prompts_and_rejects_other_settings(tmp_path):
    """A resumed run skips finished prompts, gives what the uninterrupted run gave, and refuses a file
    made with other settings, or with duplicate prompt ids or non-object metadata."""
    model = tiny_model()
    prompts = [Prompt(f"p{i}", " ".join(map(str, p))) for i, p in enumerate(PROMPTS)]
    config = CalibrationConfig(samples=3, max_new_tokens=12, candidate_nodes=15, batch_size=1)
    out = tmp_path / "cal.json"
    full = calibrate(config, model, DigitsTokenizer(), out, prompts=prompts)
    # simulate an interruption after the first prompt
    data = json.loads(out.read_text())
    uninterrupted_file = json.loads(out.read_text())
    uninterrupted = data["per_prompt"]
    first = data["per_prompt"][0]
    data["per_prompt"] = [first]
    data["steps"] = first["steps"]
    data["alpha"] = [a / first["steps"] for a in first["alpha_sum"][1:]]
    out.write_text(json.dumps(data))
    seen = []
    from treeopt.optimize.calibrate import Progress

    resumed = calibrate(config, model, DigitsTokenizer(), out, resume=True, prompts=prompts,
                        progress=Progress(prompt_done=seen.append))
    assert seen == ["p1", "p2"]  # the finished prompt was not redone
    assert [p["id"] for p in load_calibration(out).per_prompt] == ["p0", "p1", "p2"]
    assert resumed.steps > 0 and full.steps > 0
    assert config.stochastic_drafts  # each prompt replays from its own stream: the same as uninterrupted
    assert json.loads(out.read_text())["per_prompt"] == uninterrupted
    steps = json.loads(out.read_text())["steps"]  # written as the uninterrupted run writes it (79, not 79.0)
    assert (steps, type(steps)) == (uninterrupted_file["steps"], type(uninterrupted_file["steps"])) and isinstance(steps, int)
    other = CalibrationConfig(samples=3, max_new_tokens=13, candidate_nodes=15, batch_size=1)
    with pytest.raises(StandError, match="other settings .*max_new_tokens"):
        calibrate(other, model, DigitsTokenizer(), out, resume=True, prompts=prompts)
    with pytest.raises(StandError, match="does not exist"):
        calibrate(config, model, DigitsTokenizer(), tmp_path / "nope" / "cal.json", prompts=prompts)
    twice = json.loads(out.read_text())
    twice["per_prompt"][1]["id"] = "p0"
    out.write_text(json.dumps(twice))
    with pytest.raises(StandError, match="prompt 'p0' appears twice"):
        calibrate(config, model, DigitsTokenizer(), out, resume=True, prompts=prompts)
    twice["per_prompt"][1]["id"], twice["metadata"]["settings"] = "p1", "x"
    out.write_text(json.dumps(twice))
    with pytest.raises(StandError, match=r"^corrupt calibration file .*: metadata.settings is not an object$"):
        calibrate(config, model, DigitsTokenizer(), out, resume=True, prompts=prompts)
    for edit, message in ((lambda d: d["per_prompt"][0].update(tokens=None), r"prompt 'p0' has tokens None"),
                          (lambda d: d["metadata"]["timings"].update(sampling_s="abc"), r"metadata.timings.sampling_s is 'abc'"),
                          (lambda d: d["metadata"].pop("settings"), r"cannot resume .*: it records no settings"),
                          (lambda d: d["per_prompt"][0].update(id="Foo/9"), r"holds prompt 'Foo/9', not among this run's")):
        edited = json.loads(json.dumps(uninterrupted_file))
        edit(edited)
        out.write_text(json.dumps(edited))
        with pytest.raises(StandError, match=message):
            calibrate(config, model, DigitsTokenizer(), out, resume=True, prompts=prompts)
    # a dataset edited since: the finished prompt's text is not the one calibrated
    out.write_text(json.dumps(data))
    changed = [Prompt(p.id, p.text + " 7") if p.id == "p0" else p for p in prompts]
    with pytest.raises(StandError, match=r"cannot resume .*: prompt 'p0' has another text than when it was calibrated"):
        calibrate(config, model, DigitsTokenizer(), out, resume=True, prompts=changed)


def test_a_late_prompt_beyond_the_context_is_named_before_the_first_batch(tmp_path):
    """A prompt that does not fit the context with its budget stops the calibration before the first
    batch samples (batch size 1: the late prompt's batch would come last), naming the prompt."""
    model = tiny_model()
    context = model.config.max_position_embeddings
    prompts = [Prompt("p0", " ".join(map(str, PROMPTS[0]))), Prompt("long", " ".join(["3"] * context))]
    config = CalibrationConfig(samples=2, max_new_tokens=12, candidate_nodes=15, batch_size=1)
    started = []
    from treeopt.optimize.calibrate import Progress

    with pytest.raises(StandError, match="^prompt long: context too long") as error:
        calibrate(config, model, DigitsTokenizer(), tmp_path / "cal.json", prompts=prompts,
                  progress=Progress(prompt_done=started.append))
    assert "\n" not in str(error.value) and started == [] and not (tmp_path / "cal.json").exists()
