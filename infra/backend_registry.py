"""Which backend trains a scale profile: the one module that knows both backends.

``infra.backends`` holds only the contract (:class:`~infra.backends.StageJob`,
:class:`~infra.backends.TrainResult`, :class:`~infra.backends.Backend`) that both backends import; this
module sits above them, so the contract never imports a backend. Each backend is imported only when its
profile is asked for (the embedded one pulls in torch, the production one slime's flag tables).
"""

from __future__ import annotations

from infra.backends import Backend


def get_backend(profile: str) -> Backend:
    """The backend of a scale profile."""
    if profile == "embedded":
        from infra.embedded.backend import EmbeddedBackend

        return EmbeddedBackend()
    if profile == "production":
        from infra.production.backend import ProductionBackend

        return ProductionBackend()
    raise ValueError(f"unknown profile {profile!r}; expected 'embedded' or 'production'")
