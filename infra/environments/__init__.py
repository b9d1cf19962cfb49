"""Environments: the unit every RL stage trains in (:mod:`.base` has the contract and the registry).

Built-in: ``single_turn`` (prompt rows + registered rewards, stages 01–03) and ``agent`` (an
``infra.agents`` tool environment run through the Strands agent loop). A stage folder's ``env.py`` may
register more with :func:`register_environment`; a stage names its environment in ``launch.yaml`` under
``rl.environment: {name, options}``.
"""

from infra.environments.base import (
    SINGLE_TURN,
    Environment,
    Episode,
    Group,
    NoOptions,
    Policy,
    Sampling,
    build_environment,
    environment_class,
    environment_options,
    register_environment,
    registered_environments,
    row_environment_spec,
    stage_environment,
)

__all__ = [
    "SINGLE_TURN",
    "Environment",
    "Episode",
    "Group",
    "NoOptions",
    "Policy",
    "Sampling",
    "build_environment",
    "environment_class",
    "environment_options",
    "register_environment",
    "registered_environments",
    "row_environment_spec",
    "stage_environment",
]
