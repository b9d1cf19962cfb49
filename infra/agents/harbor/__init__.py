"""Harbor-format terminal tasks (stage 05 Coding Agent, reused by stage 08 Knowledge Work).

:mod:`infra.agents.harbor.task` loads a task directory in Harbor's layout (``task.toml``) or Terminal-Bench's
older one (``task.yaml``) into one :class:`~infra.agents.harbor.task.HarborTask`; the runtime that executes
it lives beside it.
"""

from infra.agents.harbor.task import (
    DockerfileStep,
    FileCopy,
    HarborTask,
    TaskEnvironment,
    TaskFormatError,
    load_task,
    load_tasks,
    structural_problems,
)

__all__ = [
    "DockerfileStep",
    "FileCopy",
    "HarborTask",
    "TaskEnvironment",
    "TaskFormatError",
    "load_task",
    "load_tasks",
    "structural_problems",
]
