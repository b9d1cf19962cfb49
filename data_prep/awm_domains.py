"""Domain definitions for the offline AWM-format scenario generator (:mod:`data_prep.awm_generate`).

A domain is a few tables; each table has an ``id``, a label column (what tasks name rows by) and typed
columns with a vocabulary (text) or a range (numbers) the seed rows are drawn from. Tables marked
``owned`` carry ``user_id`` and, as in AWM, every endpoint acts for the authenticated user 1.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column: SQL type ``TEXT``/``INTEGER``/``REAL`` and a vocabulary or an inclusive range."""

    name: str
    sql: str
    vocab: tuple[str, ...] = ()
    low: int = 0
    high: int = 100


@dataclass(frozen=True)
class Table:
    """One table: name, singular noun, label column, other columns, seed row count, owned by user 1."""

    name: str
    singular: str
    label: Column
    columns: tuple[Column, ...]
    rows: int = 6
    owned: bool = False

    @property
    def all_columns(self) -> tuple[Column, ...]:
        """Label first, then the other columns (``id`` and ``user_id`` excluded)."""
        return (self.label, *self.columns)


@dataclass(frozen=True)
class Domain:
    """A scenario family: its title, description and tables."""

    key: str
    title: str
    description: str
    tables: tuple[Table, ...]


def _t(name: str, *words: str) -> Column:
    return Column(name, "TEXT", tuple(words))


def _i(name: str, low: int, high: int) -> Column:
    return Column(name, "INTEGER", low=low, high=high)


def _r(name: str, low: int, high: int) -> Column:
    return Column(name, "REAL", low=low, high=high)


_NAMES = (
    "Nova",
    "Orbit",
    "Lumen",
    "Vesper",
    "Quill",
    "Atlas",
    "Ember",
    "Juniper",
    "Sable",
    "Tango",
    "Willow",
)
_WORDS = (
    "Night",
    "Glass",
    "River",
    "Echo",
    "Static",
    "Golden",
    "Paper",
    "Velvet",
    "Signal",
    "Harbor",
    "Copper",
)

DOMAINS: tuple[Domain, ...] = (
    Domain(
        "music_streaming",
        "Music Streaming",
        "A music streaming service with artists, albums, tracks, playlists and podcasts.",
        (
            Table(
                "artists",
                "artist",
                _t("name", *_NAMES),
                (_t("genre", "pop", "jazz", "rock", "folk"), _i("followers", 10, 9000)),
            ),
            Table("albums", "album", _t("title", *_WORDS), (_i("artist_id", 1, 6), _i("year", 1990, 2025))),
            Table(
                "tracks",
                "track",
                _t("title", *(f"{a} {b}" for a in _WORDS[:4] for b in _WORDS[4:8])),
                (_i("artist_id", 1, 6), _i("play_count", 0, 5000), _i("duration_s", 90, 420)),
                rows=10,
            ),
            Table(
                "playlists",
                "playlist",
                _t("name", *(f"{w} Mix" for w in _WORDS)),
                (_t("mood", "calm", "party", "focus"),),
                owned=True,
            ),
            Table(
                "podcasts",
                "podcast",
                _t("title", *(f"The {w} Hour" for w in _WORDS)),
                (_t("host", *_NAMES), _i("episodes", 1, 300)),
            ),
        ),
    ),
    Domain(
        "retail_orders",
        "Retail Orders",
        "An online shop's back office: products, customers, orders and reviews.",
        (
            Table(
                "products",
                "product",
                _t("name", *(f"{w} Lamp" for w in _WORDS)),
                (_t("category", "home", "garden", "office"), _r("price", 5, 300), _i("stock", 0, 80)),
            ),
            Table(
                "customers",
                "customer",
                _t("name", *_NAMES),
                (_t("city", "Lyon", "Oslo", "Quito", "Perth"), _i("loyalty_points", 0, 900)),
            ),
            Table(
                "orders",
                "order",
                _t("reference", *(f"ORD-{n}" for n in range(1001, 1013))),
                (
                    _i("customer_id", 1, 6),
                    _t("status", "pending", "shipped", "delivered"),
                    _r("total", 10, 900),
                ),
                rows=8,
                owned=True,
            ),
            Table(
                "reviews",
                "review",
                _t("headline", *(f"{w} quality" for w in _WORDS)),
                (_i("product_id", 1, 6), _i("rating", 1, 5)),
            ),
        ),
    ),
    Domain(
        "team_calendar",
        "Team Calendar",
        "A shared calendar with events, rooms and contacts.",
        (
            Table(
                "events",
                "event",
                _t("title", *(f"{w} sync" for w in _WORDS)),
                (
                    _t("day", "2026-03-02", "2026-03-03", "2026-03-04"),
                    _t("start_time", "09:00", "11:00", "14:00"),
                    _i("room_id", 1, 4),
                ),
                rows=8,
                owned=True,
            ),
            Table(
                "rooms",
                "room",
                _t("name", *(f"{w} Room" for w in _WORDS)),
                (_i("capacity", 2, 30), _i("floor", 1, 5)),
            ),
            Table(
                "contacts",
                "contact",
                _t("name", *_NAMES),
                (
                    _t("company", "Acme", "Globex", "Initech"),
                    _t("email", *(f"{n.lower()}@mail.test" for n in _NAMES)),
                ),
            ),
        ),
    ),
    Domain(
        "support_ticketing",
        "Support Ticketing",
        "A customer-support desk: tickets, agents, teams, SLA policies, tags and macros.",
        (
            Table(
                "tickets",
                "ticket",
                _t("subject", *(f"{w} outage" for w in _WORDS)),
                (
                    _t("status", "open", "pending", "closed"),
                    _t("priority", "low", "normal", "high"),
                    _i("agent_id", 1, 6),
                ),
                rows=9,
            ),
            Table("agents", "agent", _t("name", *_NAMES), (_i("team_id", 1, 4), _i("level", 1, 3))),
            Table(
                "teams",
                "team",
                _t("name", *(f"{w} Team" for w in _WORDS)),
                (_t("timezone", "UTC", "CET", "PST"),),
            ),
            Table(
                "sla_policies",
                "sla policy",
                _t("name", *(f"{w} SLA" for w in _WORDS)),
                (_t("priority", "low", "normal", "high"), _i("hours", 1, 72)),
            ),
            Table(
                "tags",
                "tag",
                _t("name", *(w.lower() for w in _WORDS)),
                (_t("color", "red", "green", "blue"),),
            ),
            Table(
                "macros",
                "macro",
                _t("title", *(f"{w} reply" for w in _WORDS)),
                (_i("uses", 0, 400),),
                owned=True,
            ),
        ),
    ),
)
