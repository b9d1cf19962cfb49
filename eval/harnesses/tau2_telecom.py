"""The Tau2-Bench telecom domain: the carrier's tools (the agent's side), the link to the customer's phone
(:mod:`eval.harnesses.tau2_telecom_user`, the user's side) and loading the public release.

The agent's 13 tools are written from the public semantics of ``src/tau2/domains/telecom/tools.py`` (same
names, arguments, checks and state changes; wording is our own). :class:`TelecomTools` holds both sides of
one episode: ``db`` is the carrier's database, ``user_tools`` the phone. After every successful tool call
of either side, and after every set-up or assertion function, :meth:`TelecomTools.sync` carries the
carrier's state to the phone as upstream's ``TelecomEnvironment.sync_tools`` does: the line's status and
roaming switch, whether its data allowance (plan limit plus refuelled data) is used up, a paid payment
request marks the bill paid, and the first bill awaiting payment becomes the phone's payment request.
The database hash covers both sides (upstream's DB check compares both). One deliberate difference:
upstream names a new draft bill ``B`` + 8 random hex digits; here the id is derived from the customer and
a counter, so replays are reproducible (no task's reward reads it).

A release folder (``data/tau2/domains/telecom/`` of ``sierra-research/tau2-bench``) holds ``db.toml``,
``user_db.toml``, ``main_policy.md``, ``tech_support_manual.md``, ``tasks.json`` and ``split_tasks.json``;
:func:`load_telecom` reads them (the agent's policy is the main policy and the tech-support manual, as
upstream's default ``telecom`` environment; the ``telecom-workflow`` variant is not wired).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import tomllib
from pydantic import BaseModel, ValidationError

from eval.harnesses.tau2_domain import (
    Tau2Domain,
    Tau2DomainError,
    ToolCallError,
    ToolDef,
    Toolkit,
    _coerce,
    _read_tasks,
    select_split,
)
from eval.harnesses.tau2_telecom_db import (
    TODAY,
    Bill,
    Customer,
    Line,
    LineItem,
    PaymentRequest,
    Plan,
    TelecomDB,
    TelecomUserDB,
)
from eval.harnesses.tau2_telecom_tasks import CarrierTaskFunctions
from eval.harnesses.tau2_telecom_user import PhoneTools

_CUST = ("string", "The customer id, e.g. 'C1001'.")
_LINE = ("string", "The line id, e.g. 'L1001'.")
_CONFIRM = " Explain what will change and get the customer's explicit yes before calling."

# fmt: off
TOOLS = (
    ToolDef("get_customer_by_phone", "Find a customer by their contact number or the number of one of their "
            "lines.", {"phone_number": ("string", "E.g. '555-123-2002'.")}),
    ToolDef("get_customer_by_id", "Return a customer by id.", {"customer_id": _CUST}),
    ToolDef("get_customer_by_name", "Return the customers with this full name and date of birth.",
            {"full_name": ("string", "E.g. 'John Smith'."), "dob": ("string", "Date of birth, YYYY-MM-DD.")}),
    ToolDef("get_details_by_id", "Return the customer, line, device, bill or plan with this id (ids start "
            "with C, L, D, B or P).", {"id": ("string", "E.g. 'L1001'.")}),
    ToolDef("suspend_line", "Suspend an active line (at most 6 months; a $5/month holding fee applies)."
            + _CONFIRM, {"customer_id": _CUST, "line_id": _LINE, "reason": ("string", "Why.")}, True),
    ToolDef("resume_line", "Resume a suspended or pending line." + _CONFIRM,
            {"customer_id": _CUST, "line_id": _LINE}, True),
    ToolDef("get_bills_for_customer", "Return a customer's bills, newest first.",
            {"customer_id": _CUST, "limit": ("integer", "How many bills at most (default 12).")}),
    ToolDef("send_payment_request", "Ask the customer to pay one of their bills (only one bill may await "
            "payment at a time; check that the bill is not paid already).",
            {"customer_id": _CUST, "bill_id": ("string", "E.g. 'B1001'.")}, True),
    ToolDef("get_data_usage", "Return a line's data used this cycle, its limit, refuelled data and the "
            "cycle's end date.", {"customer_id": _CUST, "line_id": _LINE}),
    ToolDef("enable_roaming", "Turn on international roaming for a line." + _CONFIRM,
            {"customer_id": _CUST, "line_id": _LINE}, True),
    ToolDef("disable_roaming", "Turn off international roaming for a line." + _CONFIRM,
            {"customer_id": _CUST, "line_id": _LINE}, True),
    ToolDef("transfer_to_human_agents", "Hand the customer over to a human agent with a summary. Only when "
            "they ask for one, or the request cannot be handled under the policy with these tools.",
            {"summary": ("string", "A summary of the customer's issue.")}),
    ToolDef("refuel_data", "Add data to a line for this cycle, charged at the plan's price per GB on the "
            "next bill." + _CONFIRM, {"customer_id": _CUST, "line_id": _LINE,
            "gb_amount": ("number", "GB to add, more than 0.")}, True),
)
# fmt: on
_OPTIONAL = {"get_bills_for_customer": {"limit": 12}}


def _json(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


class TelecomTools(CarrierTaskFunctions, Toolkit):
    """Both sides of one telecom episode; each public method named in :data:`TOOLS` is an agent tool."""

    domain: ClassVar[str] = "telecom"
    db_model: ClassVar[type[TelecomDB]] = TelecomDB
    TOOLS: ClassVar[tuple[ToolDef, ...]] = TOOLS
    ASSERTIONS: ClassVar[tuple[str, ...]] = (
        "assert_data_refueling_amount", "assert_line_status", "assert_overdue_bill_exists",
        "assert_no_overdue_bill",
    )  # fmt: skip
    SETUP: ClassVar[tuple[str, ...]] = ("set_data_usage", "suspend_line_for_overdue_bill")
    db: TelecomDB

    def __init__(self, db: TelecomDB, user_db: TelecomUserDB | None = None) -> None:
        super().__init__(db)
        self.user_tools = PhoneTools(user_db if user_db is not None else TelecomUserDB())
        self.new_bills = 0

    # ---- calls of either side ----------------------------------------------------------------------------
    def check_arguments(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check as the base does, with optional arguments defaulted and ``number`` values as floats (the
        base check knows no ``number`` type; ``gb_amount`` is the only one)."""
        if not isinstance(arguments, dict):
            raise ToolCallError(f"{name}: arguments must be an object")
        tool, args = self.defs()[name], {**_OPTIONAL.get(name, {}), **arguments}
        unknown, missing = sorted(set(args) - set(tool.params)), [p for p in tool.params if p not in args]
        if unknown or missing:
            raise ToolCallError(f"{name}: unknown argument(s) {unknown}, missing argument(s) {missing}")
        out = {}
        for p, (ptype, _) in tool.params.items():
            if ptype != "number":
                out[p] = _coerce(name, p, ptype, args[p])
            elif isinstance(args[p], bool) or not isinstance(args[p], (int, float)):
                raise ToolCallError(
                    f"{name}: argument {p!r} must be of type number, got {type(args[p]).__name__}"
                )
            else:
                out[p] = float(args[p])
        return out

    @classmethod
    def specs(cls) -> list[dict[str, Any]]:
        """Return the agent tools' specs (optional arguments not required)."""
        out = super().specs()
        for spec in out:
            schema = spec["inputSchema"]["json"]
            schema["required"] = [p for p in schema["required"] if p not in _OPTIONAL.get(spec["name"], {})]
        return out

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run agent tool ``name``, then carry the carrier's state to the phone."""
        text = super().call(name, arguments)
        self.sync()
        return text

    def user_call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run the customer's phone tool ``name``, then sync."""
        text = self.user_tools.call(name, arguments)
        self.sync()
        return text

    def run_env_function(self, env_type: str, func_name: str, arguments: dict[str, Any]) -> Any:
        """Run a set-up, tool or assertion function of side ``env_type`` (assistant or user), then sync."""
        side: Toolkit = self if env_type == "assistant" else self.user_tools
        if env_type not in ("assistant", "user"):
            raise Tau2DomainError(f"env function {func_name!r}: unknown env_type {env_type!r}")
        known = (*side.defs(), *side.ASSERTIONS, *getattr(side, "SETUP", ()))
        if func_name not in known:
            raise Tau2DomainError(f"tau2 telecom {env_type} side has no function {func_name!r}")
        result = getattr(side, func_name)(**arguments)
        self.sync()
        return result

    def hash(self) -> str:
        """Return the hash of both sides' state (the carrier's database and the phone)."""
        both = {"agent": self.db.model_dump(), "user": self.user_tools.db.model_dump()}
        return hashlib.sha256(json.dumps(both, sort_keys=True, default=str).encode()).hexdigest()

    def sync(self) -> None:
        """Carry the carrier's line, allowance and billing state to the phone (upstream's ``sync_tools``)."""
        around = self.user_tools.db.surroundings
        if around.phone_number is None:
            return
        line = self._line_by_phone(around.phone_number)
        plan = self._plan(line.plan_id)
        around.line_active = line.status == "Active"
        around.roaming_allowed = line.roaming_enabled
        around.mobile_data_usage_exceeded = line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb
        if around.payment_request is not None and around.payment_request.paid:
            self._bill(around.payment_request.bill_id).status = "Paid"
            around.payment_request = None
        if around.payment_request is None:
            waiting = self._awaiting(self.get_customer_by_phone(around.phone_number))
            if waiting:
                around.payment_request = PaymentRequest(
                    bill_id=waiting[0].bill_id, amount_due=waiting[0].total_due
                )

    # ---- lookups -----------------------------------------------------------------------------------------
    def _find(self, items: list[Any], key: str, value: str, kind: str) -> Any:
        for item in items:
            if getattr(item, key) == value:
                return item
        raise ToolCallError(f"{kind} {value} not found")

    def _line_by_phone(self, phone_number: str) -> Line:
        return self._find(self.db.lines, "phone_number", phone_number, "Line with phone number")

    def _line(self, line_id: str) -> Line:
        return self._find(self.db.lines, "line_id", line_id, "Line")

    def _plan(self, plan_id: str) -> Plan:
        return self._find(self.db.plans, "plan_id", plan_id, "Plan")

    def _bill(self, bill_id: str) -> Bill:
        return self._find(self.db.bills, "bill_id", bill_id, "Bill")

    def _customer(self, customer_id: str) -> Customer:
        return self._find(self.db.customers, "customer_id", customer_id, "Customer")

    def _owned_line(self, customer_id: str, line_id: str) -> Line:
        if line_id not in self._customer(customer_id).line_ids:
            raise ToolCallError(f"Line {line_id} not found for customer {customer_id}")
        return self._line(line_id)

    def _awaiting(self, customer: Customer) -> list[Bill]:
        return [b for b in map(self._bill, customer.bill_ids) if b.status == "Awaiting Payment"]

    # ---- agent tools -------------------------------------------------------------------------------------
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        for customer in self.db.customers:
            if customer.phone_number == phone_number:
                return customer
            if any(self._line(lid).phone_number == phone_number for lid in customer.line_ids):
                return customer
        raise ToolCallError(f"Customer with phone number {phone_number} not found")

    def get_customer_by_id(self, customer_id: str) -> Customer:
        return self._customer(customer_id)

    def get_customer_by_name(self, full_name: str, dob: str) -> list[dict[str, Any]]:
        return [
            _json(c)
            for c in self.db.customers
            if c.full_name.lower() == full_name.lower() and c.date_of_birth == dob
        ]

    def get_details_by_id(self, id: str) -> BaseModel:  # noqa: A002 - the public tool's argument name
        kinds = {"L": self._line, "D": self._device, "B": self._bill, "C": self._customer, "P": self._plan}
        if id[:1] not in kinds:
            raise ToolCallError(f"Unknown ID format or type: {id}")
        return kinds[id[:1]](id)

    def _device(self, device_id: str) -> BaseModel:
        return self._find(self.db.devices, "device_id", device_id, "Device")

    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        if line.status != "Active":
            raise ToolCallError("Line must be active to suspend")
        line.status, line.suspension_start_date = "Suspended", TODAY
        return {"message": "Line suspended; a $5/month holding fee applies.", "line": _json(line)}

    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        if line.status not in ("Suspended", "Pending Activation"):
            raise ToolCallError("Line must be suspended to resume")
        line.status, line.suspension_start_date = "Active", None
        return {"message": "Line resumed.", "line": _json(line)}

    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[dict[str, Any]]:
        bills = sorted(
            map(self._bill, self._customer(customer_id).bill_ids), key=lambda b: b.issue_date, reverse=True
        )
        return [_json(b) for b in bills[:limit]]

    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        customer = self._customer(customer_id)
        if self._awaiting(customer):
            raise ToolCallError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise ToolCallError(f"Bill {bill_id} not found for customer {customer_id}")
        self._bill(bill_id).status = "Awaiting Payment"
        return f"Payment request for bill {bill_id} sent to the customer."

    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        plan = self._plan(line.plan_id)
        cycle_end = (TODAY.replace(day=1) + timedelta(days=32)).replace(day=1) - timedelta(days=1)
        return {
            "line_id": line_id,
            "data_used_gb": line.data_used_gb,
            "data_limit_gb": plan.data_limit_gb,
            "data_refueling_gb": line.data_refueling_gb,
            "cycle_end_date": cycle_end.isoformat(),
        }

    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        line = self._owned_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled."
        line.roaming_enabled = True
        return "Roaming enabled."

    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        line = self._owned_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled."
        line.roaming_enabled = False
        return "Roaming disabled."

    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ToolCallError("Refuel amount must be positive")
        plan = self._plan(line.plan_id)
        charge = gb_amount * plan.data_refueling_price_per_gb
        line.data_refueling_gb += gb_amount
        self._charge(
            customer_id, charge, f"Data refueling: {gb_amount} GB at ${plan.data_refueling_price_per_gb}/GB"
        )
        return {
            "message": f"Added {gb_amount} GB of data to line {line_id} for ${charge:.2f}.",
            "new_data_refueling_gb": line.data_refueling_gb,
            "charge": charge,
        }

    def _charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a line item to the customer's draft bill, opening next month's draft bill if none exists."""
        customer = self._customer(customer_id)
        draft = next((b for b in map(self._bill, customer.bill_ids) if b.status == "Draft"), None)
        if draft is None:
            start = (TODAY.replace(day=1) + timedelta(days=32)).replace(day=1)
            end = (start + timedelta(days=32)).replace(day=1) - timedelta(days=1)
            self.new_bills += 1
            draft = Bill(
                bill_id=f"B{customer_id}-draft-{self.new_bills}",
                customer_id=customer_id,
                period_start=start,
                period_end=end,
                issue_date=start,
                total_due=0,
                due_date=start + timedelta(days=14),
                status="Draft",
            )
            self.db.bills.append(draft)
            customer.bill_ids.append(draft.bill_id)
        kind = "Credit" if amount < 0 else "Charge"
        draft.line_items.append(LineItem(description=description, amount=amount, date=TODAY, item_type=kind))
        draft.total_due += amount


# ---- the release ---------------------------------------------------------------------------------------
@dataclass
class TelecomDomain(Tau2Domain):
    """A loaded telecom release: :class:`Tau2Domain` plus the customer's pristine phone."""

    user_pristine: TelecomUserDB = field(default_factory=TelecomUserDB)

    def fresh_tools(self) -> TelecomTools:
        """Return both sides' tools over fresh deep copies of the pristine carrier database and phone."""
        return TelecomTools(self.pristine.model_copy(deep=True), self.user_pristine.model_copy(deep=True))


def _release_dir(path: Path) -> Path:
    base = path.parent if path.is_file() else path
    for cand in (base, base / "telecom", base / "data" / "tau2" / "domains" / "telecom"):
        if (cand / "db.toml").is_file() and (cand / "main_policy.md").is_file():
            return cand
    raise Tau2DomainError(
        f"{path}: no db.toml and main_policy.md for domain 'telecom' (expected a tau2 release folder such "
        "as data/tau2/domains/telecom/, or a tasks file next to them)"
    )


def _toml_model(path: Path, model: type[BaseModel]) -> BaseModel:
    try:
        return model.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise Tau2DomainError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise Tau2DomainError(f"{path}: invalid TOML ({exc})") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise Tau2DomainError(f"{path}: {loc}: {err['msg']} ({exc.error_count()} error(s))") from None


def load_telecom(path: Path, split: str | None = None) -> TelecomDomain:
    """Load the telecom release from a folder, tasks file or checkout; ``split`` keeps the ids
    ``split_<tasks>.json`` lists under that name (upstream's default and the leaderboard's is ``base``)."""
    folder = _release_dir(path)
    tasks_file = path if path.is_file() else folder / "tasks.json"
    if not tasks_file.is_file():
        raise Tau2DomainError(f"{tasks_file}: tasks file not found")
    files = {
        "db": folder / "db.toml",
        "user_db": folder / "user_db.toml",
        "policy": folder / "main_policy.md",
        "tech_support": folder / "tech_support_manual.md",
        "tasks": tasks_file,
    }
    pristine = _toml_model(files["db"], TelecomDB)
    user = _toml_model(files["user_db"], TelecomUserDB)
    try:
        main, manual = (files[k].read_text(encoding="utf-8") for k in ("policy", "tech_support"))
    except OSError as exc:
        raise Tau2DomainError(f"{exc.filename}: cannot read the policy ({exc.strerror})") from None
    policy = f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"
    tasks = select_split(_read_tasks(tasks_file, "telecom"), tasks_file, split, files)
    return TelecomDomain("telecom", TelecomTools, pristine, policy, tasks, files, split, user_pristine=user)
