"""Ray episode actors run calculator episodes in parallel processes against one ``/generate`` server.

The model behind the server is the oracle double of ``tests/agents_scripted.py`` (stateless, so
concurrent episodes share it); Ray, the actors, the loop and the environment are real.
"""

from __future__ import annotations

import os

import pytest
from agents_scripted import micro_tokenizer, oracle_backend

from infra.agents.contract import Termination
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.local_server import GenerateServer, micro_model_dir
from infra.agents.ray_actors import run_episodes, start_actors

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray():  # noqa: ANN201
    """A local two-CPU Ray cluster for one test."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_actors_run_episodes_in_parallel(local_ray) -> None:
    tok = micro_tokenizer()
    with GenerateServer(oracle_backend(tok), tok, max_context_tokens=4096) as server:
        actors = start_actors("calculator:turns=2", server.url, str(micro_model_dir()), 2)
        tasks = CalculatorEnv(turns=2).tasks(4, seed=3)
        results = run_episodes(actors, tasks, seed=0)
        pids = set(ray.get([a.pid.remote() for a in actors]))
    assert [r.task_id for r in results] == [t.id for t in tasks]
    assert all(r.termination is Termination.FINAL_ANSWER and r.reward == 1.0 for r in results)
    assert len(pids) == 2 and os.getpid() not in pids
    assert len(server.requests) == 4 * 4  # two user turns x (tool call + answer) per episode


@pytest.mark.slow
def test_slime_generate_runs_episodes_in_the_stage_env_actors(local_ray) -> None:
    """``rufus_env_actors: 2`` in the hook YAML: slime's generate hook sends episodes to named Ray actors."""
    import asyncio

    from test_agents_slime import CALC_ROW, SlimeShapedSample, hook_args

    from infra.production import slime_hooks

    tok = micro_tokenizer()
    with GenerateServer(oracle_backend(tok), tok, max_context_tokens=4096) as server:
        args = hook_args(server.url, actors=2)
        samples = [
            SlimeShapedSample(
                index=i,
                prompt=[{"role": "user", "content": f"Compute {a} + 3."}],
                label=a + 3,
                metadata=dict(CALC_ROW),
            )
            for i, a in enumerate((4, 5, 6))
        ]

        async def all_samples():  # noqa: ANN202
            return await asyncio.gather(
                *(slime_hooks.generate(args, s, {"temperature": 0.5}) for s in samples)
            )

        out = asyncio.run(all_samples())
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert [s.reward for s in out] == [1.0, 1.0, 1.0] and all(0 in s.loss_mask for s in out)
    assert {"rufus-env-calc:calculator-0", "rufus-env-calc:calculator-1"} <= names
