"""avg@k in one lm-eval run: the rendered eval step, the task overrides, and lm-eval 0.4.13 running them.

The runbook's lm-eval steps talk to an SGLang server (GPU); here the step is rendered and checked, the
overrides of the paper's lm-eval benchmarks are loaded and their filters run by lm-eval's own config
machinery, and a local task over a local JSON file is run end to end by lm-eval's CLI with the micro HF
model, then collected.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eval.lm_eval_avgk import avgk_task, read_avgk, sample_filter, write_avgk_tasks
from eval.production import EvalCluster, main, render_eval_plan
from eval.registry import BENCHMARKS

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "eval"
LM = [n for n, b in BENCHMARKS.items() if b.harness == "lm_eval"]


def test_one_lm_eval_run_per_benchmark_with_k_repeats_and_one_seed(tmp_path):
    cluster = EvalCluster(output_root=tmp_path, seed=7)
    plan = render_eval_plan(Path("runs/x/01_reasoning_rl/export"), [*LM, "ifbench"], cluster)
    lm = [s for s in plan if s.argv[0] == "lm_eval"]
    assert [s.name for s in lm] == LM  # one invocation per benchmark, not k
    for step in lm:
        bench, argv = BENCHMARKS[step.name], step.argv
        assert argv[argv.index("--tasks") + 1] == avgk_task(str(bench.lm_eval_task), bench.k)
        assert argv.count("--seed") == 1 and argv[argv.index("--seed") + 1] == "7"
        assert "seed=7" in argv[argv.index("--model_args") + 1].split(",")
        assert argv[argv.index("--include_path") + 1] == str(tmp_path / "x-01_reasoning_rl" / "tasks")
        assert "--log_samples" in argv
    tasks = next(s for s in plan if s.name == "tasks").argv
    assert tasks[tasks.index("--benchmarks") + 1 : tasks.index("--aime26")] == LM
    # SGLang honours a request's seed only in deterministic mode: the k identical requests must stay random.
    assert "--enable-deterministic-inference" not in plan[0].argv
    assert [s.name for s in plan].index("tasks") < [s.name for s in plan].index(LM[0])


def test_overrides_of_the_papers_benchmarks_load_and_pick_each_sample(tmp_path):
    """lm-eval's loader reads every override; each sample's pipeline scores exactly that sample."""
    from lm_eval.api.instance import Instance
    from lm_eval.config.task import TaskConfig
    from lm_eval.filters import build_filter_ensemble
    from lm_eval.tasks._yaml_loader import load_yaml

    main(["write-tasks", "--out", str(tmp_path), "--benchmarks", *LM, "--aime26",
          str(FIX / "aime26_matharena.jsonl")])  # fmt: skip
    for name in LM:
        bench = BENCHMARKS[name]
        cfg = load_yaml(tmp_path / f"{avgk_task(str(bench.lm_eval_task), bench.k)}.yaml")
        config = TaskConfig(**cfg)
        assert config.repeats == bench.k and config.task == avgk_task(str(bench.lm_eval_task), bench.k)
        filt = str(bench.lm_eval_metric).split(",")[1]
        assert [f["name"] for f in config.filter_list] == [sample_filter(filt, i) for i in range(bench.k)]
        answers = [f"The answer is (B). \\boxed{{{i}}}" for i in range(bench.k)]
        for i in (0, bench.k - 1):
            pipe = config.filter_list[i]
            ens = build_filter_ensemble(
                pipe["name"],
                [[s["function"], {a: v for a, v in s.items() if a != "function"}] for s in pipe["filter"]],
            )
            doc = {"choices": ["w", "x", "y", "z"]}  # what gpqa's process_docs gives multi_choice_regex
            inst = Instance("generate_until", doc, ("q", {}), 0, (config.task, 0, bench.k))
            inst.resps = list(answers)
            ens.apply([inst])
            got = inst.filtered_resps[pipe["name"]]
            expected = {"gpqa_diamond": "(B)", "aime26": str(i)}.get(name, answers[i])
            assert got == expected, (name, i, got)


@pytest.mark.slow
def test_lm_eval_runs_a_local_avgk_task_end_to_end(tmp_path):
    """lm-eval's CLI with the micro HF model on a local task: one run, k samples each scored, avg@k read."""
    k = 3
    data = tmp_path / "data.jsonl"
    # The micro model is random: scoring the first vowel against "e" gives scores that differ per sample.
    rows = [{"q": f"Say a word with {a} letters.", "a": "e"} for a in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    base = {
        "task": "rufus_tiny_sum",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{q}}",
        "doc_to_target": "{{a}}",
        "filter_list": [
            {
                "name": "vowel",
                "filter": [{"function": "regex", "regex_pattern": "([aeiou])"}, {"function": "take_first"}],
            }
        ],
        "generation_kwargs": {"until": [], "do_sample": True, "max_gen_toks": 4},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    (tasks / "rufus_tiny_sum.yaml").write_text(json.dumps(base), encoding="utf-8")
    write_avgk_tasks(tasks, [("rufus_tiny_sum", "exact_match,vowel", k)])
    model = micro_base(tmp_path)
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "lm_eval", "run", "--model", "hf",
        "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu",
        "--tasks", avgk_task("rufus_tiny_sum", k), "--include_path", str(tasks),
        "--gen_kwargs", "temperature=1.0,do_sample=True,max_gen_toks=4",
        "--batch_size", "4", "--seed", "11", "--output_path", str(out), "--log_samples",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    res = read_avgk(out, "rufus_tiny_sum", "exact_match,vowel", k)
    assert res.seed == 11 and len(res.per_sample) == k
    samples = [json.loads(x) for f in out.rglob("samples_*.jsonl") for x in f.read_text().splitlines()]
    assert len(samples) == len(rows) * k  # one record per (doc, sample filter)
    assert all(len(s["resps"][0]) == k for s in samples)  # every record carries all k responses
    assert any(len(set(s["resps"][0])) > 1 for s in samples)  # k independent samples, not one copied
    by_filter = {sample_filter("vowel", i): [] for i in range(k)}
    for s in samples:
        i = int(s["filter"].rsplit("-s", 1)[1])
        vowel = re.search("[aeiou]", s["resps"][0][i])
        assert s["filtered_resps"][0] == (vowel.group(0) if vowel else "[invalid]")  # sample i, own filters
        by_filter[s["filter"]].append(s["exact_match"])
    assert res.per_sample == pytest.approx([sum(v) / len(v) for v in by_filter.values()])
    assert res.value == pytest.approx(sum(res.per_sample) / k)
    with pytest.raises(ValueError, match="repeats"):
        read_avgk(out, "rufus_tiny_sum", "exact_match,vowel", k + 1)
