"""Agent rollout stack: environments, a token-in/token-out Strands agent loop, tools and Ray actors.

Entry points: :func:`infra.agents.loop.run_episode` (one episode), :mod:`infra.agents.ray_actors`
(episodes in parallel), :mod:`infra.agents.slime_generate` (slime custom generate function),
:func:`infra.agents.cli.rollout` (the ``rufus rollout`` command) and
:mod:`infra.agents.local_server` (the CPU ``/generate`` server). The contract is in
:mod:`infra.agents.contract`.
"""
