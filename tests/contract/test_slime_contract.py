"""Our rows, hooks and checkpoint folders, exercised by slime's own code (see ``conftest.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from data_prep.schema import Message, SFTSample
from data_prep.tiny_tasks import heldout_tasks
from infra.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok():
    from infra.embedded.chat_format import install_glm_markup
    from infra.embedded.tokenizer_build import build_micro_tokenizer

    t = build_micro_tokenizer(seed=0)
    install_glm_markup(t)
    return t


def _metrics() -> list[str]:
    stages = load_recipe(REPO / "recipes" / "tiny.yaml").stages
    return sorted(
        {
            m
            for s in stages
            if s.config.kind == "rl"
            for m in [*s.config.eval.targets, *s.config.eval.guardrails]
        }
    )


def _dataset(path: Path, tok, **kw):
    from slime.utils.data import Dataset

    return Dataset(str(path), tok, None, None, metadata_key="metadata", tool_key="tools", **kw)


def test_slime_dataset_reads_every_rl_stage_row(tok, tmp_path):
    """Item 1: slime's Dataset with our flags (--input-key prompt --label-key label --tool-key tools)."""
    for metric in _metrics():
        path = tmp_path / f"{metric}.jsonl"
        path.write_text("".join(t.prompt_row().model_dump_json() + "\n" for t in heldout_tasks(metric, 3, 0)))
        ds = _dataset(path, tok, prompt_key="prompt", label_key="label", apply_chat_template=True)
        assert len(ds) == 3 and isinstance(ds[0].prompt, str) and ds[0].metadata["tools"] == []
    null = tmp_path / "null.jsonl"
    null.write_text(
        json.dumps({"prompt": [{"role": "user", "content": "x"}], "label": "1", "tools": None}) + "\n"
    )
    with pytest.raises(AssertionError, match="tools must be a list"):
        _dataset(null, tok, prompt_key="prompt", label_key="label", apply_chat_template=True)


def test_slime_dataset_reads_sft_token_rows_and_rollout_fills_them(tok, tmp_path):
    """Item 7: SFT rows are ids + offsets; the rollout function fills slime Samples from the packed file."""
    from infra.production.sft_data import tokenize_file, tokens_path
    from infra.production.sft_rollout import fill_sft_sample

    s = SFTSample(
        id="a", messages=[Message(role="user", content="hi"), Message(role="assistant", content="ok", loss=1)]
    )
    src, dest = tmp_path / "train.jsonl", tmp_path / "train.tokens.jsonl"
    src.write_text(s.model_dump_json() + "\n")
    assert tokenize_file(src, dest, tok)["kept"] == 1
    ds = _dataset(dest, tok, prompt_key="id")
    sample = fill_sft_sample(ds[0], tokens_path(dest))
    assert sample.response_length == len(sample.loss_mask) and sample.tokens and 1 in sample.loss_mask


def _sample(response: str, label: str = "7", **kw):
    from slime.utils.types import Sample

    return Sample(prompt=[{"role": "user", "content": "q"}], response=response, label=label, **kw)


def test_hooks_on_real_samples_including_aborted():
    """Item 5: rewards are floats; slime's own filter and our post-process take a fully aborted group."""
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput, call_dynamic_filter
    from slime.rollout.filter_hub.dynamic_sampling_filters import check_reward_nonzero_std

    from infra.production import slime_hooks
    from rewards.contract import RewardResult, register_reward

    @register_reward("contract_infra")
    def _infra(req):
        return RewardResult(score=0.0, aborted=True, failure="judge_down")

    args = SimpleNamespace(
        rufus_reward="contract_infra",
        n_samples_per_prompt=2,
        rufus_advantage="grpo",
        reward_key=None,
        rufus_band=[0.0, 0.8],
    )
    group = [_sample("a"), _sample("b")]
    for s in group:
        s.reward = asyncio.run(slime_hooks.reward(args, s))
    assert all(isinstance(s.reward, float) for s in group)
    out = call_dynamic_filter(check_reward_nonzero_std, args, group)
    assert isinstance(out, DynamicFilterOutput) and not bool(out.keep)  # no crash on round(reward)
    band = call_dynamic_filter(slime_hooks.band_filter, args, group)
    assert isinstance(band, DynamicFilterOutput) and band.keep is False
    raw, adv = slime_hooks.post_process_rewards(args, group)
    assert adv == [0.0, 0.0] and all(s.remove_sample for s in group) and sum(raw) == 0.0


def test_rendered_hook_paths_load_with_slime_load_function():
    """Every dotted path the plan renders resolves through slime's load_function."""
    from slime.utils.misc import load_function

    from infra.production.plan import render_plan

    plans = render_plan(load_recipe(REPO / "recipes" / "rufus-air.yaml", profile="production"))
    paths = {
        argv[i + 1]
        for p in plans
        for t in p.trains
        for argv in [t.argv]
        for i, tok in enumerate(argv[:-1])
        if tok.endswith("-path") and tok != "--custom-config-path" and argv[i + 1].startswith("infra.")
    }
    assert paths and all(callable(load_function(p)) for p in paths)


def test_phase_seed_is_what_slime_data_source_loads(tmp_path):
    """Item 12: a seeded phase folder restores phase 0's data-source state through slime's own load."""
    from slime.rollout.data_source import RolloutDataSource

    from infra.production.handoff import seed_phase

    p0, p1 = tmp_path / "torch_dist", tmp_path / "torch_dist_phase1"
    (p0 / "iter_0000022").mkdir(parents=True)
    (p0 / "latest_checkpointed_iteration.txt").write_text("22\n")
    src = SimpleNamespace(
        args=SimpleNamespace(rollout_global_dataset=True, save=str(p0)),
        sample_offset=640,
        epoch_id=1,
        sample_group_index=3,
        sample_index=5,
        metadata={},
    )
    RolloutDataSource.save(src, 22)
    assert seed_phase(p0, p1) == 22
    dest = SimpleNamespace(
        args=SimpleNamespace(rollout_global_dataset=True, load=str(p1), rollout_shuffle=False),
        dataset=None,
        metadata={},
    )
    RolloutDataSource.load(dest, 22)
    assert (dest.sample_offset, dest.epoch_id) == (640, 1)
