"""avg@k in one lm-eval run: a task override with ``repeats: k`` that scores every sample with the task's own
filters and metrics.

lm-eval 0.4.13 sends each request ``repeats`` times and keeps the k responses together; its default
``take_first`` filter would then score only the first. ``write_avgk_tasks`` writes, beside the task files,
``<task>_rufus_avg<k>.yaml`` that ``include``s the task's own YAML and replaces its ``filter_list`` with k
pipelines ``<filter>-s<i>`` = ``TakeSample(index=i)`` followed by the task's own steps for the headline
filter (``eval.lm_eval_sample_filter``, copied beside the YAMLs). The results file then holds
``<metric>,<filter>-s<i>`` for every sample index i, and ``read_avgk`` averages them (the mean over docs of
the mean over samples). One invocation, one ``--seed``; ``--log_samples`` keeps all k responses per doc.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

FILTER_MODULE = "rufus_sample_filter"


class _Function(str):
    """A value written with lm-eval's ``!function`` YAML tag."""


class _TaskDumper(yaml.SafeDumper):
    """YAML dumper that writes ``_Function`` values as ``!function`` tags."""


_TaskDumper.add_representer(_Function, lambda d, v: d.represent_scalar("!function", str(v)))


def avgk_task(task: str, k: int) -> str:
    """Return the name of ``task``'s avg@k override."""
    return f"{task}_rufus_avg{k}"


def split_metric(spec: str) -> tuple[str, str]:
    """Return (metric, filter) of an lm-eval result key such as ``exact_match,flexible-extract``."""
    metric, sep, filt = spec.partition(",")
    if not sep or not metric or not filt:
        raise ValueError(f"lm-eval metric {spec!r} must read '<metric>,<filter>' (e.g. 'exact_match,none')")
    return metric, filt


def sample_filter(filt: str, i: int) -> str:
    """Return the name of sample ``i``'s filter pipeline."""
    return f"{filt}-s{i}"


def _base_steps(cfg: dict, filt: str, where: Path) -> list[dict]:
    filters = cfg.get("filter_list")
    if filters is None:
        if filt != "none":
            raise ValueError(f"{where}: no filter_list, so its only filter is 'none', not {filt!r}")
        return [{"function": "take_first"}]  # lm-eval's own default pipeline
    for f in filters:
        if f["name"] == filt:
            steps = [dict(s) for s in f["filter"]]
            for s in steps:
                if not isinstance(s["function"], str) or "/" in s["function"]:
                    raise ValueError(
                        f"{where}: filter {filt!r} uses a !function step; write its avg@k by hand"
                    )
            return steps
    raise ValueError(f"{where}: no filter named {filt!r} (has {[f['name'] for f in filters]})")


def avgk_task_config(base_yaml: Path, metric: str, k: int) -> dict:
    """Return the avg@k override of the task defined in ``base_yaml`` (its includes resolved by lm-eval)."""
    from lm_eval.tasks._yaml_loader import load_yaml  # lm-eval's own loader: includes, unresolved !function

    base_yaml = Path(base_yaml).resolve()
    cfg = load_yaml(base_yaml, resolve_func=False)
    if cfg.get("output_type") != "generate_until":
        raise ValueError(f"{base_yaml}: avg@k needs a generate_until task, not {cfg.get('output_type')!r}")
    steps = _base_steps(cfg, split_metric(metric)[1], base_yaml)
    take = _Function(f"{FILTER_MODULE}.TakeSample")
    return {
        "include": str(base_yaml),
        "task": avgk_task(cfg["task"], k),
        "repeats": k,
        "filter_list": [
            {
                "name": sample_filter(split_metric(metric)[1], i),
                "filter": [{"function": take, "index": i}, *steps],
            }
            for i in range(k)
        ],
    }


def task_yaml_text(cfg: dict) -> str:
    """Return ``cfg`` as lm-eval task YAML (``!function`` tags kept)."""
    return yaml.dump(cfg, Dumper=_TaskDumper, sort_keys=False, allow_unicode=True)


def base_task_yaml(task: str, tasks_dir: Path) -> Path:
    """Return the YAML file lm-eval defines ``task`` in: ``tasks_dir`` first, then lm-eval's own tasks."""
    from lm_eval.tasks import TaskManager

    for manager in (
        lambda: TaskManager(include_path=str(tasks_dir), include_defaults=False),
        lambda: TaskManager(include_path=str(tasks_dir)),
    ):
        entry = manager().task_index.get(task)
        if entry is not None and entry.yaml_path is not None:
            return Path(entry.yaml_path)
    raise KeyError(f"lm-eval {task!r}: no task YAML in {tasks_dir} or lm-eval's tasks")


def write_avgk_tasks(tasks_dir: Path, specs: list[tuple[str, str, int]]) -> list[Path]:
    """Write the avg@k overrides of ``(task, metric, k)`` into ``tasks_dir``; return the YAML paths."""
    tasks_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("lm_eval_sample_filter.py"), tasks_dir / f"{FILTER_MODULE}.py")
    paths = []
    for task, metric, k in specs:
        cfg = avgk_task_config(base_task_yaml(task, tasks_dir), metric, k)
        path = tasks_dir / f"{cfg['task']}.yaml"
        path.write_text(task_yaml_text(cfg), encoding="utf-8")
        paths.append(path)
    return paths


@dataclass(frozen=True)
class AvgK:
    """One avg@k result: the mean over samples, each sample's score, the run's seed and its results file."""

    value: float
    per_sample: list[float]
    seed: int | None
    results_file: Path


def read_avgk(run_dir: Path, task: str, metric: str, k: int) -> AvgK:
    """Return avg@k of ``task`` from the one lm-eval run under ``run_dir`` (its newest results_*.json)."""
    files = sorted(Path(run_dir).rglob("results_*.json"))
    if not files:
        raise FileNotFoundError(f"{task}: no lm-eval results_*.json under {run_dir}")
    data = json.loads(files[-1].read_text(encoding="utf-8"))
    name, (met, filt) = avgk_task(task, k), split_metric(metric)
    repeats = data.get("configs", {}).get(name, {}).get("repeats")
    if repeats != k:
        raise ValueError(f"{files[-1]}: task {name!r} ran with repeats={repeats}, expected {k}")
    try:
        values = [float(data["results"][name][f"{met},{sample_filter(filt, i)}"]) for i in range(k)]
    except KeyError as exc:
        raise KeyError(f"{files[-1]}: no results[{name!r}][{met},{filt}-s<i>] for every i < {k}") from exc
    seed = data.get("config", {}).get("random_seed")
    return AvgK(sum(values) / k, values, None if seed is None else int(seed), files[-1])
