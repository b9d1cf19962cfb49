"""Agent environments: the interface (:mod:`.base`) and the built-in calculator environment."""

from infra.agents.envs.base import AgentEnvironment, SimulatedUser, load_environment

__all__ = ["AgentEnvironment", "SimulatedUser", "load_environment"]
