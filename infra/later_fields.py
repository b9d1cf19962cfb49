"""Config fields added after runs existed: written into the resolved config only when set.

A stage's config hash is the hash of its resolved config, and a run resumes or hands off only while the
hash matches. A new optional field would enter every dump with its default and change every existing
stage's hash; models list such fields in ``_ADDED_LATER`` and inherit this serializer instead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, model_serializer


class OmitLaterDefaults(BaseModel):
    """Mixin: drop the ``_ADDED_LATER`` fields that hold their default from ``model_dump``."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_later_defaults(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        for name in self._ADDED_LATER:
            if name in data and data[name] == type(self).model_fields[name].default:
                del data[name]
        return data
