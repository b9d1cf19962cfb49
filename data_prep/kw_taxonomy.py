"""The knowledge-work task taxonomy of stage 08 (UM §Domains, Taxonomy): domains → practice areas →
environment types, the sampling axes, and a seeded sampler of one environment spec; and what an instance
of a type holds besides its workspace files: a live :class:`SystemOfRecord` (SQLite tables rendered as
stage 04's AWM app: the ``server.py`` + ``pristine.db`` pair that :mod:`infra.agents.awm.mcp_server` serves
over MCP, or an AWM ``Scenario`` for its server pool and MCP client) and the private :class:`GroundTruth`
(``answers`` the work computes, ``lookups`` it reads from the system of record, ``facts`` for context).
The rubric format is the reward's: :mod:`rewards.knowledge_work`.

What the paper gives: 4 domains (finance, legal, consulting, operations), 19 practice areas and 88
environment types (counted in its Table 1, whose rows are not in the text we have), each environment type
a generator sampling the axes deliverable format, sources of complexity, stakeholders, source conflicts,
hints, the stage of the transaction or matter and domain-specific dimensions, for a nominal 1e7–1e10
configurations per practice area; the systems of record it names (CRM, ERP/general ledger, WMS/TMS, MES,
GRC and ticketing, property and work-order platforms) and the deliverables (Excel models, decks, Word or
PDF documents, diligence memos, litigation chronologies).

What is ours: the paper names no practice area or environment type, so the 4 domains are the paper's and
the :data:`PRACTICE_AREAS` (9 of 19) and :data:`ENVIRONMENT_TYPES` (12 of 88) filled in here are our own,
each built around a system of record or work product the paper names (``paper_ref``); the remaining 10
practice areas and 76 environment types are open. The axis values are ours too. :func:`combinations`
counts a type's configurations exactly as :func:`sample_spec` draws them (one value per axis, one or two
complexity sources and stakeholders); ours are ~1e6–1e7 per type, below the paper's per-area figure,
because each of our axes is short.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict

from data_prep.awm_domains import Domain, Table
from data_prep.awm_generate import ddl, server_code
from infra.agents.awm.release import Scenario

#: The paper's counts (UM §Domains) and its nominal configuration space per practice area.
PAPER_COUNTS = MappingProxyType({"domains": 4, "practice_areas": 19, "environment_types": 88})
PAPER_CONFIG_SPACE = (1e7, 1e10)

DOMAINS = MappingProxyType(
    {"finance": "Finance", "legal": "Legal", "consulting": "Consulting", "operations": "Operations"}
)
#: Systems of record as the paper lists them (UM §Environments); served as SQLite apps over MCP.
SYSTEMS_OF_RECORD = MappingProxyType(
    {
        "crm": "CRM (accounts, opportunities, contacts)",
        "erp_gl": "ERP / general ledger",
        "wms_tms": "warehouse and transport management (WMS/TMS)",
        "mes": "manufacturing execution and process control (MES)",
        "grc_ticketing": "GRC and ticketing",
        "property_work_order": "property and work-order platform",
    }
)
#: Deliverable formats: the paper's (xlsx, pptx, docx, pdf) plus md and csv (ours, for the tiny scale).
DELIVERABLE_FORMATS = ("xlsx", "pptx", "docx", "pdf", "md", "csv")

# ---- the shared axes (values ours) -----------------------------------------------------------------------
COMPLEXITY_SOURCES = (
    "missing record",
    "duplicate entry",
    "currency or unit mismatch",
    "late adjustment",
    "partial payment or delivery",
    "ambiguous naming",
    "multi-period data",
    "rounding differences",
)
SOURCE_CONFLICTS = (
    "none",
    "workspace document vs system of record",
    "two workspace documents disagree",
    "stale tracker",
    "email contradicts the record",
)
HINTS = ("none", "points to the relevant table", "names the tricky item", "gives the output layout")
STAKEHOLDERS = MappingProxyType(
    {
        "finance": ("CFO", "controller", "deal partner", "credit committee", "auditor", "treasurer"),
        "legal": ("general counsel", "litigation partner", "paralegal", "client", "compliance officer"),
        "consulting": ("engagement manager", "client COO", "steering committee", "managing director"),
        "operations": ("plant manager", "logistics lead", "service desk lead", "facilities manager", "COO"),
    }
)
#: "The stage of the transaction or matter", per domain.
STAGES = MappingProxyType(
    {
        "finance": ("planning", "diligence", "signing", "closing", "post-close", "period-end close"),
        "legal": ("intake", "discovery", "negotiation", "execution", "renewal", "dispute"),
        "consulting": ("scoping", "diagnosis", "recommendation", "implementation"),
        "operations": ("planning", "execution", "monitoring", "close-out"),
    }
)


@dataclass(frozen=True)
class PracticeArea:
    """One practice area of a domain (ours: the paper names none)."""

    key: str
    domain: str
    title: str


@dataclass(frozen=True)
class EnvironmentType:
    """One environment type: its practice area, system of record, deliverables and domain dimensions."""

    key: str
    practice_area: str
    system: str
    deliverables: tuple[str, ...]
    description: str
    paper_ref: str  # what the paper names that this type is built around
    dimensions: dict[str, tuple[str, ...]] = field(default_factory=dict)


PRACTICE_AREAS: tuple[PracticeArea, ...] = (
    PracticeArea("accounting_close", "finance", "Accounting and period-end close"),
    PracticeArea("transaction_advisory", "finance", "Transaction advisory and diligence"),
    PracticeArea("commercial_contracts", "legal", "Commercial contracts"),
    PracticeArea("litigation", "legal", "Litigation"),
    PracticeArea("commercial_strategy", "consulting", "Commercial strategy"),
    PracticeArea("operations_consulting", "consulting", "Operations consulting"),
    PracticeArea("service_operations", "operations", "Service operations"),
    PracticeArea("supply_chain", "operations", "Supply chain and logistics"),
    PracticeArea("facilities", "operations", "Facilities and property"),
)
_CUR, _PERIOD = ("USD", "EUR", "GBP"), ("month", "quarter", "year")
ENVIRONMENT_TYPES: tuple[EnvironmentType, ...] = (
    EnvironmentType(
        "invoice_ledger_reconciliation", "accounting_close", "erp_gl", ("xlsx",),
        "Reconcile supplier invoices against the general ledger into a workbook.",
        "system of record: ERP/general ledger; deliverable: Excel model",
        {"currency": _CUR, "invoice_count": ("4", "5"), "period": _PERIOD},
    ),
    EnvironmentType(
        "accrual_rollforward", "accounting_close", "erp_gl", ("xlsx", "docx"),
        "Roll accruals forward across periods and explain the movements.",
        "system of record: ERP/general ledger", {"currency": _CUR, "period": _PERIOD},
    ),
    EnvironmentType(
        "customer_concentration_diligence", "transaction_advisory", "crm", ("docx", "md", "xlsx"),
        "Size customer concentration from the target's CRM for a diligence memo.",
        "artifact: diligence memo; system of record: CRM",
        {"top_n": ("5", "10", "20"), "metric": ("revenue", "bookings", "margin")},
    ),
    EnvironmentType(
        "contract_dates_memo", "commercial_contracts", "grc_ticketing", ("md",),
        "List the key dates of a counterparty's active contracts in a memo.",
        "artifact: memo; system of record: GRC (contract register)",
        {"active_count": ("2", "3"), "date_kind": ("end date",)},
    ),
    EnvironmentType(
        "litigation_chronology", "litigation", "grc_ticketing", ("docx", "md", "pdf"),
        "Build a dated chronology of a matter from correspondence and the matter system.",
        "artifact: litigation chronology", {"matter_type": ("contract", "employment", "IP")},
    ),
    EnvironmentType(
        "pipeline_margin_review", "commercial_strategy", "crm", ("pptx", "xlsx"),
        "Review the sales pipeline's margin profile for a steering committee deck.",
        "system of record: CRM; deliverable: PowerPoint deck",
        {"segment": ("enterprise", "mid-market", "SMB"), "ranking": ("revenue", "margin", "deal size")},
    ),
    EnvironmentType(
        "plant_yield_diagnostic", "operations_consulting", "mes", ("pptx", "xlsx"),
        "Diagnose yield losses on a production line from MES batch records.",
        "system of record: MES", {"line_count": ("1", "2", "3"), "loss_kind": ("scrap", "rework")},
    ),
    EnvironmentType(
        "ticket_tracker_update", "service_operations", "grc_ticketing", ("csv",),
        "Bring a team's ticket tracker up to date from the ticketing system.",
        "system of record: ticketing; deliverable: tracker",
        {"ticket_count": ("3", "4"), "team": ("IT", "HR", "facilities")},
    ),
    EnvironmentType(
        "shipment_exception_report", "supply_chain", "wms_tms", ("xlsx", "docx"),
        "Report late and short shipments from the transport system.",
        "system of record: WMS/TMS", {"mode": ("road", "ocean", "air"), "lane_count": ("3", "6")},
    ),
    EnvironmentType(
        "inventory_count_variance", "supply_chain", "wms_tms", ("xlsx",),
        "Explain cycle-count variances between the warehouse system and counts.",
        "system of record: WMS/TMS", {"sku_count": ("5", "10"), "site_count": ("1", "2")},
    ),
    EnvironmentType(
        "work_order_backlog_review", "facilities", "property_work_order", ("xlsx", "md"),
        "Triage a property portfolio's open work orders against SLA terms.",
        "system of record: property/work-order platform",
        {"property_count": ("2", "4"), "sla_days": ("3", "5", "10")},
    ),
    EnvironmentType(
        "downtime_report", "operations_consulting", "mes", ("docx", "md"),
        "Summarise unplanned downtime by cause from machine event logs.",
        "system of record: MES", {"shift_count": ("2", "3"), "period": _PERIOD},
    ),
)  # fmt: skip
_AREAS = {a.key: a for a in PRACTICE_AREAS}
_TYPES = {t.key: t for t in ENVIRONMENT_TYPES}


class EnvSpec(BaseModel):
    """One sampled configuration of an environment type: what its generator instantiates."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env_type: str
    domain: str
    practice_area: str
    system: str
    deliverable_format: str
    complexity_sources: tuple[str, ...]
    stakeholders: tuple[str, ...]
    source_conflict: str
    hint: str
    stage: str
    dimensions: dict[str, str]

    @property
    def spec_id(self) -> str:
        """A short stable hash of the configuration."""
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()[:12]


# ---- an instance's system of record and private ground truth ----------------------------------------------
def _sql(value: Any) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class SystemOfRecord:
    """A live system of record: SQLite tables (AWM table definitions) and their rows, served over MCP."""

    name: str  # the MCP server's name, e.g. "ledger"
    kind: str  # a key of kw_taxonomy.SYSTEMS_OF_RECORD
    title: str
    tables: tuple[Table, ...]
    rows: Mapping[str, list[dict[str, Any]]]

    @cached_property
    def scenario(self) -> Scenario:
        """The system as an AWM scenario: stage 04's generated CRUD server (5 tools a table) on these rows."""
        domain = Domain(self.name, self.title, f"{self.title} ({self.kind})", self.tables)
        inserts = [
            (t.name, [f"INSERT INTO {t.name} ({', '.join(r)}) VALUES ({', '.join(map(_sql, r.values()))})"
                      for r in self.rows.get(t.name, [])])
            for t in self.tables
        ]  # fmt: skip
        return Scenario(
            name=self.name, description=domain.description, tasks=[],
            tables=[{"name": t.name, "ddl": ddl(t), "indexes": []} for t in self.tables],
            inserts=inserts, full_code=server_code(domain, lean=True), api_spec=self.tool_spec(),
        )  # fmt: skip

    @property
    def database(self) -> bytes:
        """The pristine SQLite file."""
        return self.scenario.database()

    def tool_spec(self) -> dict[str, Any]:
        """The endpoint description (AWM ``api_spec`` form): list/get/create/update/delete per table."""
        groups = []
        for t in self.tables:
            item, s = f"/{t.name}/{{item_id}}", t.singular.replace(" ", "_")
            ops = [("GET", f"/{t.name}", f"list_{t.name}"), ("GET", item, f"get_{s}"),
                   ("POST", f"/{t.name}", f"create_{s}"), ("PATCH", item, f"update_{s}"),
                   ("DELETE", item, f"delete_{s}")]  # fmt: skip
            endpoints = [{"path": p, "method": m, "operation_id": o} for m, p, o in ops]
            columns = ["id", *(c.name for c in t.all_columns)]
            groups.append({"group_name": t.name, "columns": columns, "endpoints": endpoints})
        return {"api_groups": groups}

    def write(self, folder: Path) -> None:
        """Write ``server.py`` and ``pristine.db`` (read by ``mcp_server --scenario-dir``), ``tools.json``."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "server.py").write_text(self.scenario.full_code)
        (folder / "pristine.db").write_bytes(self.database)
        spec = {"name": self.name, "kind": self.kind, "title": self.title, **self.tool_spec()}
        (folder / "tools.json").write_text(json.dumps(spec, indent=1) + "\n")


class GroundTruth(BaseModel):
    """The private record of an instance: computed answers, looked-up values, context facts."""

    model_config = ConfigDict(extra="forbid")
    answers: dict[str, str | float | int] = {}
    lookups: dict[str, str | float | int] = {}
    facts: dict[str, Any] = {}

    def values(self) -> list[Any]:
        """Every value of the record (answers, lookups, facts; nested lists flattened)."""
        out: list[Any] = []
        for v in [*self.answers.values(), *self.lookups.values(), *self.facts.values()]:
            out.extend(v if isinstance(v, list) else [v])
        return out


def environment_type(key: str) -> EnvironmentType:
    """Return environment type ``key``; the error lists the known ones."""
    if key not in _TYPES:
        raise KeyError(f"unknown knowledge-work environment type {key!r}; known: {', '.join(_TYPES)}")
    return _TYPES[key]


def domain_of(env: EnvironmentType) -> str:
    """Return the domain of ``env`` (through its practice area)."""
    return _AREAS[env.practice_area].domain


def _one_or_two(n: int) -> int:
    return n + math.comb(n, 2)


def combinations(env_type: str) -> int:
    """Return how many distinct specs :func:`sample_spec` can draw for ``env_type``."""
    env = environment_type(env_type)
    domain = domain_of(env)
    count = len(env.deliverables) * _one_or_two(len(COMPLEXITY_SOURCES))
    count *= _one_or_two(len(STAKEHOLDERS[domain])) * len(SOURCE_CONFLICTS) * len(HINTS)
    count *= len(STAGES[domain])
    return count * math.prod(len(v) for v in env.dimensions.values())


def practice_area_combinations(area: str) -> int:
    """Return the configurations of all filled-in environment types of practice area ``area``."""
    if area not in _AREAS:
        raise KeyError(f"unknown practice area {area!r}; known: {', '.join(_AREAS)}")
    return sum(combinations(t.key) for t in ENVIRONMENT_TYPES if t.practice_area == area)


def _some(rng: random.Random, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(rng.sample(values, rng.choice((1, 2)))))


def sample_spec(env_type: str, rng: random.Random) -> EnvSpec:
    """Draw one spec of ``env_type`` from ``rng``: one value per axis, one or two complexity sources and
    stakeholders (a deterministic function of the generator's state)."""
    env = environment_type(env_type)
    domain = domain_of(env)
    return EnvSpec(
        env_type=env.key,
        domain=domain,
        practice_area=env.practice_area,
        system=env.system,
        deliverable_format=rng.choice(env.deliverables),
        complexity_sources=_some(rng, COMPLEXITY_SOURCES),
        stakeholders=_some(rng, STAKEHOLDERS[domain]),
        source_conflict=rng.choice(SOURCE_CONFLICTS),
        hint=rng.choice(HINTS),
        stage=rng.choice(STAGES[domain]),
        dimensions={name: rng.choice(values) for name, values in sorted(env.dimensions.items())},
    )


def taxonomy_counts() -> dict[str, dict[str, int]]:
    """Return, per level, the paper's count, how many are filled in here and how many are open."""
    filled = {"domains": len(DOMAINS), "practice_areas": len(PRACTICE_AREAS),
              "environment_types": len(ENVIRONMENT_TYPES)}  # fmt: skip
    return {
        k: {"paper": PAPER_COUNTS[k], "filled": v, "open": PAPER_COUNTS[k] - v} for k, v in filled.items()
    }


def _check() -> None:
    """Fail at import on an inconsistent table (a typo would otherwise surface at sampling time)."""
    for area in PRACTICE_AREAS:
        if area.domain not in DOMAINS:
            raise ValueError(f"practice area {area.key!r}: unknown domain {area.domain!r}")
    for env in ENVIRONMENT_TYPES:
        if env.practice_area not in _AREAS or env.system not in SYSTEMS_OF_RECORD:
            raise ValueError(f"environment type {env.key!r}: unknown practice area or system")
        if not env.deliverables or set(env.deliverables) - set(DELIVERABLE_FORMATS):
            raise ValueError(
                f"environment type {env.key!r}: deliverables must be among {DELIVERABLE_FORMATS}"
            )
    for key, n in taxonomy_counts().items():
        if n["open"] < 0:
            raise ValueError(f"taxonomy: more {key} than the paper's {n['paper']}")


_check()
