"""Typed configs: layering order, unknown keys, errors that name file and key, every YAML parses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from infra.config import RLConfig, StageConfig
from infra.layering import ConfigError, load_yaml
from infra.recipe import REPO_ROOT, load_recipe, resolve_stage

STAGES = sorted(p.parent for p in (REPO_ROOT / "stages").rglob("launch.yaml"))


def _stage_copy(tmp_path: Path, name: str = "01_reasoning_rl") -> Path:
    """A copy of a real stage folder (all four files) that a test may edit."""
    dst = tmp_path / "stages" / name
    shutil.copytree(REPO_ROOT / "stages" / name, dst)
    return dst


def _recipe(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "recipes" / "r.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body))
    return path


def _base_recipe(stages: list) -> dict:
    return {"name": "t", "base": {"model": "micro"}, "profile": "embedded", "stages": stages}


def test_every_yaml_in_the_repository_parses():
    files = [  # the project's own YAML: not hidden folders (.venv, .ci-venv: third-party YAML), not runs
        p
        for p in REPO_ROOT.rglob("*.y*ml")
        if p.suffix in (".yaml", ".yml")
        and not any(
            part.startswith(".") or part in ("runs", "site-packages")
            for part in p.relative_to(REPO_ROOT).parts
        )
    ]
    assert files, "no YAML found"
    for path in files:
        with open(path) as f:
            list(yaml.safe_load_all(f))  # raises on a syntax error
    for launch in (REPO_ROOT / "stages").rglob("launch.yaml"):
        StageConfig.model_validate(load_yaml(launch))
    for recipe in (REPO_ROOT / "recipes").glob("*.yaml"):
        loaded = load_recipe(recipe)
        assert loaded.stages


@pytest.mark.parametrize("folder", STAGES, ids=[p.name for p in STAGES])
def test_stage_folders_are_complete(folder: Path):
    for name in ("data_prep.py", "reward.py", "launch.yaml", "README.md"):
        assert (folder / name).is_file(), f"{folder.name} lacks {name}"


def test_layer_order_defaults_stage_recipe_cli(tmp_path: Path):
    _stage_copy(tmp_path)
    rec = _recipe(
        tmp_path,
        {
            **_base_recipe(
                [{"stage": "stages/01_reasoning_rl", "overrides": {"rl": {"rollout": {"num_rollouts": 7}}}}]
            ),
            "overrides": {"optimizer": {"weight_decay": 0.2}, "rl": {"rollout": {"num_rollouts": 5}}},
            "profile": "production",
        },
    )
    stage = load_recipe(rec).stages[0]
    assert stage.config.optimizer.weight_decay == 0.2  # recipe-wide override beats launch.yaml (0.1)
    assert stage.config.rl.rollout.num_rollouts == 7  # the entry's override beats the recipe-wide one
    assert stage.config.optimizer.eps == 1e-8  # model default
    stage = load_recipe(rec, sets=["rl.rollout.num_rollouts=3"]).stages[0]
    assert stage.config.rl.rollout.num_rollouts == 3  # --set beats everything
    stage = load_recipe(rec, sets=["01_reasoning_rl.optimizer.lr=2e-6"]).stages[0]
    assert stage.config.optimizer.lr == 2e-6


def test_embedded_profile_resizes_but_keeps_the_algorithm(tmp_path: Path):
    folder = REPO_ROOT / "stages" / "01_reasoning_rl"
    prod = resolve_stage(folder, "production")
    emb = resolve_stage(folder, "embedded")
    assert prod.config.rl.rollout.prompts_per_step == 256
    assert emb.config.rl.rollout.prompts_per_step < prod.config.rl.rollout.prompts_per_step
    assert emb.config.rl.policy == prod.config.rl.policy
    assert emb.config.rl.dynamic_sampling == prod.config.rl.dynamic_sampling
    assert emb.config.reward == prod.config.reward
    assert emb.config_hash != prod.config_hash
    # An embedded section may not touch the objective: only the policy's token-count sizes resize.
    dst = _stage_copy(tmp_path)
    data = load_yaml(dst / "launch.yaml")
    data["embedded"]["policy"] = {"eps_clip": 0.3}
    (dst / "launch.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"launch.yaml: embedded.policy: .*unknown key 'eps_clip'"):
        resolve_stage(dst, "embedded")
    data["embedded"]["policy"] = {"min_attempt_tokens": 48}
    (dst / "launch.yaml").write_text(yaml.safe_dump(data))
    assert resolve_stage(dst, "embedded").config.rl.policy.min_attempt_tokens == 48


def test_unknown_key_names_file_and_dotted_path(tmp_path: Path):
    dst = _stage_copy(tmp_path)
    data = load_yaml(dst / "launch.yaml")
    data["rl"]["rollout"]["prompts_per_stepp"] = 3
    (dst / "launch.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        resolve_stage(dst, "production")
    assert f"{dst / 'launch.yaml'}: rl.rollout.prompts_per_stepp: unknown key" in str(err.value)


def test_wrong_type_in_recipe_override_names_the_recipe(tmp_path: Path):
    _stage_copy(tmp_path)
    rec = _recipe(
        tmp_path, {**_base_recipe(["stages/01_reasoning_rl"]), "overrides": {"optimizer": {"lr": "fast"}}}
    )
    with pytest.raises(ConfigError) as err:
        load_recipe(rec)
    msg = str(err.value)
    assert f"{rec} (overrides): optimizer.lr" in msg and "'fast'" in msg


def test_wrong_type_from_cli_names_the_flag(tmp_path: Path):
    _stage_copy(tmp_path)
    rec = _recipe(tmp_path, _base_recipe(["stages/01_reasoning_rl"]))
    with pytest.raises(
        ConfigError, match=r"--set rl.rollout.samples_per_prompt: rl.rollout.samples_per_prompt"
    ):
        load_recipe(rec, sets=["rl.rollout.samples_per_prompt=many"])
    with pytest.raises(ConfigError, match="no stage of .* has this section"):
        load_recipe(rec, sets=["rll.rollout.samples_per_prompt=2"])


def test_bad_recipe_keys_and_missing_stage_folder(tmp_path: Path):
    rec = _recipe(tmp_path, {**_base_recipe(["stages/01_reasoning_rl"]), "stagez": []})
    with pytest.raises(ConfigError, match=rf"{rec}: stagez: unknown key"):
        load_recipe(rec)
    rec = _recipe(tmp_path, {**_base_recipe(["stages/99_nowhere"])})
    with pytest.raises(ConfigError, match=r"stage folder 'stages/99_nowhere' not found"):
        load_recipe(rec)
    rec = _recipe(tmp_path, {**_base_recipe(["stages/01_reasoning_rl"]), "profile": "laptop"})
    with pytest.raises(ConfigError, match=rf"{rec}: profile"):
        load_recipe(rec)


def test_swapping_a_stage_is_one_line(tmp_path: Path):
    variant = _stage_copy(tmp_path, "01_reasoning_rl")
    alt = variant.with_name("01b_reasoning_rl_variant")
    variant.rename(alt)
    data = load_yaml(alt / "launch.yaml")
    data["name"] = alt.name
    data["rl"]["policy"]["estimator"] = "grpo"
    (alt / "launch.yaml").write_text(yaml.safe_dump(data))
    rec = _recipe(tmp_path, _base_recipe([str(alt)]))
    stage = load_recipe(rec).stages[0]
    assert stage.id == alt.name and stage.config.rl.policy.estimator == "grpo"


def test_batch_rule_is_checked(tmp_path: Path):
    dst = _stage_copy(tmp_path)
    with pytest.raises(ConfigError, match="divisible by steps_per_rollout"):
        resolve_stage(
            dst, "production", sets={"rl.rollout.steps_per_rollout": 3, "rl.rollout.prompts_per_step": 5}
        )


def test_cli_set_wins_over_embedded_sizes(tmp_path: Path):
    _stage_copy(tmp_path)
    rec = _recipe(tmp_path, _base_recipe(["stages/01_reasoning_rl"]))
    stage = load_recipe(rec, sets=["rl.rollout.num_rollouts=2"]).stages[0]
    assert stage.config.rl.rollout.num_rollouts == 2  # the embedded section sets 24; --set is later
    stage = load_recipe(rec, sets=["embedded.rollout.num_rollouts=3"]).stages[0]
    assert stage.config.rl.rollout.num_rollouts == 3  # resizing the embedded section itself also works


def test_unknown_reward_is_a_config_error(tmp_path: Path):
    _stage_copy(tmp_path)
    rec = _recipe(tmp_path, _base_recipe(["stages/01_reasoning_rl"]))
    with pytest.raises(ConfigError, match=r"--set 01_reasoning_rl.reward: reward: unknown reward 'nope'"):
        load_recipe(rec, sets=["01_reasoning_rl.reward=nope"])


def _edit_launch(folder: Path, edit) -> None:
    path = folder / "launch.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_bad_phase_value_is_rejected_at_load_with_its_dotted_key(tmp_path: Path):
    dst = _stage_copy(tmp_path, "02_coding_rl")
    _edit_launch(dst, lambda d: d["rl"]["phases"][0]["rollout"].update(max_response_tokens="lots"))
    with pytest.raises(
        ConfigError,
        match=r"launch.yaml: rl\.phases\.0\.rollout\.max_response_tokens: .*valid integer.*'lots'",
    ):
        resolve_stage(dst, "production")
    # A phase that breaks a rule of the whole section (the batch divisibility) names the phase's section.
    dst = _stage_copy(tmp_path / "b", "02_coding_rl")
    _edit_launch(dst, lambda d: d["rl"]["phases"][0]["rollout"].update(steps_per_rollout=3))
    with pytest.raises(ConfigError, match=r"rl\.phases\.0\.rollout: .*divisible by steps_per_rollout = 3"):
        resolve_stage(dst, "production")


def test_unknown_phase_key_is_rejected_at_load_with_its_dotted_key(tmp_path: Path):
    dst = _stage_copy(tmp_path, "02_coding_rl")
    _edit_launch(dst, lambda d: d["rl"]["phases"][0]["policy"].update(kl_coeff=1.0e-6))
    with pytest.raises(ConfigError, match=r"launch.yaml: rl\.phases\.0\.policy\.kl_coeff: unknown key"):
        resolve_stage(dst, "production")
    dst = _stage_copy(tmp_path / "b", "02_coding_rl")
    _edit_launch(dst, lambda d: d["rl"]["phases"][0].update(shaping={"kind": "none"}))
    with pytest.raises(ConfigError, match=r"launch.yaml: rl\.phases\.0\.shaping: unknown key"):
        resolve_stage(dst, "production")


def test_phase_settings_are_cumulative():
    rl = RLConfig.model_validate(
        {
            "rollout": {
                "prompts_per_step": 8,
                "samples_per_prompt": 4,
                "max_response_tokens": 16,
                "num_rollouts": 5,
            },
            "policy": {"estimator": "grpo"},
            "phases": [
                {"rollout": {"max_response_tokens": 32, "num_rollouts": 2}},
                {"rollout": {"prompts_per_step": 4}, "policy": {"kl_coef": 0.1}},
            ],
        }
    )
    (r0, p0), (r1, p1), (r2, p2) = rl.phase_settings()
    assert (r0, p0) == (rl.rollout, rl.policy)
    assert (r1.prompts_per_step, r1.max_response_tokens, r1.num_rollouts) == (8, 32, 2)
    assert p1 == p0
    # Phase 2 overrides phase 1, not the base: the 32-token budget and 2 rollouts carry over.
    assert (r2.prompts_per_step, r2.max_response_tokens, r2.num_rollouts) == (4, 32, 2)
    assert (p2.estimator, p2.kl_coef) == ("grpo", 0.1)


def test_embedded_phases_replace_rl_phases(tmp_path: Path):
    folder = REPO_ROOT / "stages" / "02_coding_rl"
    prod = resolve_stage(folder, "production").config
    emb = resolve_stage(folder, "embedded").config
    assert emb.rl.phases == emb.embedded.phases != prod.rl.phases
    (_, _), (r1, p1) = emb.rl.phase_settings()
    # The embedded phase lands on the embedded base sizes (samples_per_prompt comes from embedded.rollout).
    assert (r1.prompts_per_step, r1.samples_per_prompt) == (2, 16)
    assert (r1.max_response_tokens, r1.num_rollouts) == (64, 6)
    assert p1 == prod.rl.phase_settings()[1][1]
    # phase 2 budget = 131,072 context − 8,192 prompt allowance − 1 (SGLang: prompt + new < context)
    assert prod.rl.phase_settings()[1][0].max_response_tokens == 131072 - 8192 - 1
    # A bad value in embedded.phases is named by the layer it came from once it replaces rl.phases.
    dst = _stage_copy(tmp_path, "02_coding_rl")
    _edit_launch(dst, lambda d: d["embedded"]["phases"][0]["rollout"].update(num_rollouts="many"))
    with pytest.raises(
        ConfigError, match=r"launch.yaml \(embedded.phases\): rl\.phases\.0\.rollout\.num_rollouts: "
    ):
        resolve_stage(dst, "embedded")


def test_launch_name_must_match_its_folder_inside_a_recipe_too(tmp_path: Path):
    folder = tmp_path / "stages" / "01_renamed"
    shutil.copytree(REPO_ROOT / "stages" / "01_reasoning_rl", folder)
    recipe = _recipe(tmp_path, _base_recipe([{"stage": str(folder), "id": "custom"}]))
    with pytest.raises(
        ConfigError, match="name: '01_reasoning_rl' differs from the folder name '01_renamed'"
    ):
        load_recipe(recipe)


def test_stage_selection_must_select_something():
    from infra.driver import Selection

    ids = ["00_sft", "01_reasoning_rl", "03_if_rl"]
    with pytest.raises(ConfigError, match="selects no stage"):
        Selection(start="03_if_rl", until="01_reasoning_rl").pick(ids)
    with pytest.raises(ConfigError, match="--only runs one stage"):
        Selection(start="00_sft", only="03_if_rl").pick(ids)
    assert Selection(start="01_reasoning_rl", until="01_reasoning_rl").pick(ids) == ["01_reasoning_rl"]


def test_both_profiles_are_validated_whichever_runs(tmp_path: Path):
    folder = tmp_path / "00_sft"
    shutil.copytree(REPO_ROOT / "stages" / "00_sft", folder)
    launch = yaml.safe_load((folder / "launch.yaml").read_text())
    launch["sft"]["global_batch"] = "lots"  # hidden by embedded.sft.global_batch when embedded runs
    launch["embedded"]["sft"]["global_batch"] = 8
    (folder / "launch.yaml").write_text(yaml.safe_dump(launch))
    with pytest.raises(ConfigError, match=r"sft\.global_batch[\s\S]*in the production profile"):
        resolve_stage(folder, "embedded")
    launch["sft"]["global_batch"] = 64
    launch["embedded"]["sft"]["epochs"] = "many"  # only the embedded profile reads it
    (folder / "launch.yaml").write_text(yaml.safe_dump(launch))
    with pytest.raises(ConfigError, match=r"sft\.epochs[\s\S]*in the embedded profile"):
        resolve_stage(folder, "production")


# ---- paths a recipe names: the recipe's folder, its parent, then the repository root -----------------------
def test_a_recipe_anywhere_finds_a_stage_folder_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    where = tmp_path / "experiments" / "deep"
    shutil.copytree(REPO_ROOT / "stages" / "01_reasoning_rl", where / "01_reasoning_rl")
    recipe = where / "r.yaml"
    recipe.write_text(yaml.safe_dump(_base_recipe(["01_reasoning_rl"])))
    monkeypatch.chdir(tmp_path)  # not the recipe's folder: the current directory plays no part
    assert load_recipe(recipe).stages[0].folder == (where / "01_reasoning_rl").resolve()
    # The recipe's own folder wins over the repository's stage of the same relative name.
    shutil.copytree(REPO_ROOT / "stages" / "01_reasoning_rl", where / "stages" / "01_reasoning_rl")
    recipe.write_text(yaml.safe_dump(_base_recipe(["stages/01_reasoning_rl"])))
    assert load_recipe(recipe).stages[0].folder == (where / "stages" / "01_reasoning_rl").resolve()


def test_a_stage_folder_found_nowhere_lists_the_places_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    recipe = _recipe(tmp_path, _base_recipe(["stages/99_nowhere"]))
    with pytest.raises(ConfigError) as err:
        load_recipe(recipe)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{recipe}: stage folder 'stages/99_nowhere' not found")
    for place in (recipe.parent, tmp_path, REPO_ROOT):
        assert str(place / "stages" / "99_nowhere") in msg, msg


def test_the_recipe_file_is_found_from_the_repo_root_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    assert load_recipe(Path("recipes/tiny.yaml")).path == (REPO_ROOT / "recipes" / "tiny.yaml").resolve()
    with pytest.raises(ConfigError, match=r"recipe 'recipes/nope\.yaml' not found \(looked in: "):
        load_recipe(Path("recipes/nope.yaml"))


def test_data_files_and_base_folder_named_by_a_recipe_resolve_beside_it(tmp_path: Path):
    bench = tmp_path / "recipes" / "held" / "mine.jsonl"
    bench.parent.mkdir(parents=True)
    bench.write_text("{}\n")
    (tmp_path / "ckpt").mkdir()
    body = _base_recipe([{"stage": "stages/01_reasoning_rl", "overrides": {"data": {"benchmarks": {}}}}])
    body["base"] = {"model": "ckpt"}  # found in the recipe's parent: a local folder, made absolute
    body["overrides"] = {"data": {"benchmarks": {"aime25": "held/mine.jsonl"}}}
    loaded = load_recipe(_recipe(tmp_path, body))
    assert loaded.recipe.base.model == str((tmp_path / "ckpt").resolve())
    assert loaded.stages[0].resolved["data"]["benchmarks"] == {"aime25": str(bench.resolve())}
    body["base"] = {"model": "zai-org/GLM-4.5-Air-Base"}  # a hub id stays a hub id
    body["overrides"] = {"data": {"benchmarks": {"aime25": "held/missing.jsonl"}}}
    with pytest.raises(ConfigError, match=r"overrides: data\.benchmarks\.aime25: file 'held/missing\.jsonl'"):
        load_recipe(_recipe(tmp_path, body))
    body["overrides"] = {}
    assert load_recipe(_recipe(tmp_path, body)).recipe.base.model == "zai-org/GLM-4.5-Air-Base"
    body["base"] = {"model": "./no-such-ckpt"}
    with pytest.raises(ConfigError, match=r"base\.model: folder './no-such-ckpt' not found \(looked in"):
        load_recipe(_recipe(tmp_path, body))


def test_a_field_added_later_is_written_only_when_set_so_older_runs_keep_their_hash():
    from infra.config import RolloutConfig

    base = {"prompts_per_step": 2, "samples_per_prompt": 2, "max_response_tokens": 8, "num_rollouts": 1}
    default = RolloutConfig.model_validate(base)
    assert "max_sampling_attempts" not in default.model_dump() and default.max_sampling_attempts == 8
    assert (
        RolloutConfig.model_validate({**base, "max_sampling_attempts": 2}).model_dump()[
            "max_sampling_attempts"
        ]
        == 2
    )
    assert RolloutConfig.model_validate(default.model_dump()) == default
    assert "shared_prompt_forward" not in default.model_dump()
    shared = RolloutConfig.model_validate({**base, "shared_prompt_forward": True})
    assert shared.model_dump()["shared_prompt_forward"] is True
    assert "update_dtype" not in default.model_dump()
    assert RolloutConfig.model_validate({**base, "update_dtype": "bfloat16"}).model_dump()[
        "update_dtype"
    ] == ("bfloat16")
    from infra.config import SFTConfig

    sft = {"global_batch": 2, "epochs": 1, "max_seq_len": 64, "length_cap": 64, "eval_interval": 5}
    assert "lean_forward" not in SFTConfig.model_validate(sft).model_dump()
    assert SFTConfig.model_validate({**sft, "lean_forward": True}).model_dump()["lean_forward"] is True
    assert "update_dtype" not in SFTConfig.model_validate(sft).model_dump()
