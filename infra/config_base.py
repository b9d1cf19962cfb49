"""The building blocks every stage-config module shares: the strict base model and the sampling dtypes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: Weights an embedded rollout or evaluation samples in (the trainer always keeps float32).
SamplerDtype = Literal["float32", "bfloat16"]


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
