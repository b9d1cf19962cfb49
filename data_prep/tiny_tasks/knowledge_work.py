"""The ``knowledge_work`` tiny family: stage 08's embedded scale, three generated knowledge-work environments.

Each generator turns a sampled :class:`~data_prep.kw_taxonomy.EnvSpec` into an instance (small workspace
files, a SQLite system of record served like stage 04's apps, the private ground truth) and authors one
task on it: a short instruction (≤ 60 words, for the micro model), a weighted rubric of code criteria only
(so grading is deterministic at this scale; "must not" criteria carry negative weights) and a reference
deliverable built by code, which scores 1.0.

* ``invoice_ledger_reconciliation`` (ERP/GL): invoices in ``<tag>_invoices.csv``, a ``gl_entries`` table
  with one invoice missing, one posted at a different amount and unrelated entries; deliverable
  ``<tag>_recon.xlsx`` (sheet Recon: totals, difference, the missing invoice). The reference writes the
  totals and the difference as formulas over the amounts it read (``=1248.64+4198.62+…``, ``=B1-B2``).
* ``contract_dates_memo`` (GRC contract register): deliverable ``<party>_memo.md`` listing a counterparty's
  active contracts with their end dates; naming terminated or other parties' contracts costs weight.
* ``ticket_tracker_update`` (ticketing): a stale ``<tag>_tracker.csv`` to bring up to date from the
  ``tickets`` table; only changed fields are graded (a row found by its ticket id), so doing
  nothing scores 0.

Splits share no entity: vendors, counterparties, people, file-name tags and id ranges come from disjoint
pools, and every instruction names its instance's tag or counterparty every few words, so the stage's
held-out screens (exact prompt overlap, 8-gram rule) keep the train tasks. Output is a function of (seed,
split, index). An instance whose answers leak into what the agent sees
(:func:`data_prep.kw_filters.find_leaks`) is redrawn. :func:`generate` returns :class:`TinyTask` rows the
stage turns into agent rows (it registers :data:`FAMILY` and :data:`METRIC`); :func:`write_tasks` writes
the Harbor folders.
"""

from __future__ import annotations

import json
import random
import re
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from data_prep.awm_domains import Column, Table
from data_prep.kw_filters import find_leaks
from data_prep.kw_synthesis import Instance, KwTask, Proposal, task_of
from data_prep.kw_synthesis import write_tasks as write_task_folders
from data_prep.kw_taxonomy import EnvSpec, GroundTruth, SystemOfRecord, sample_spec
from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user
from rewards.knowledge_work import Criterion, KWLabel

FAMILY = "knowledge_work"
METRIC = "kw_rubric_score"
REWARD = "kw_rubric"  # the stage's rubric reward (rewards/knowledge_work.py) is registered under this name
DONE = "Done."
MAX_WORDS = 60
ENV_TYPES = ("invoice_ledger_reconciliation", "contract_dates_memo", "ticket_tracker_update")
#: Entity pools per split (disjoint): names, and the id ranges of invoices, contracts and tickets.
POOLS: dict[str, dict[str, Any]] = {
    "train": {
        "vendors": ["Alder Supply", "Birch Logistics", "Cobalt Paper", "Dune Freight", "Elm Office",
                    "Fjord Metals", "Garnet Foods", "Harbor Tools"],
        "parties": ["Acme Corp", "Borealis Ltd", "Cygnus Inc", "Delphi LLC", "Eos Group", "Fenwick plc"],
        "people": ["Ana Ruiz", "Ben Okafor", "Chen Wei", "Dara Singh", "Eli Novak", "Mia Torres"],
        "tags": ["alpha", "bravo", "charlie", "echo", "kilo", "lima", "oscar", "tango"],
        "invoice": 1000, "contract": 2000, "ticket": 100,
    },
    "heldout": {
        "vendors": ["Ivory Print", "Jasper Parts", "Kestrel Media", "Lark Cleaning", "Moss Energy"],
        "parties": ["Gaia Corp", "Helix Ltd", "Iris Inc", "Juno LLC"],
        "people": ["Fay Moreau", "Gil Haddad", "Hana Ito", "Ivo Petrov", "Jade Lin"],
        "tags": ["sierra", "victor", "yankee", "zulu"],
        "invoice": 9000, "contract": 8000, "ticket": 900,
    },
}  # fmt: skip
_TEXT, _REAL = "TEXT", "REAL"


def _code(cid: str, requirement: str, weight: float, **check: Any) -> Criterion:
    return Criterion(id=cid, requirement=requirement, weight=weight, kind="code", check=check)


def _day(rng: random.Random, start: date, span: int) -> date:
    return start + timedelta(days=rng.randrange(span))


# ---- (i) invoice ledger reconciliation ----------------------------------------------------------------
GL = (Table("gl_entries", "gl entry", Column("ref", _TEXT),
            (Column("vendor", _TEXT), Column("posted_on", _TEXT), Column("amount", _REAL),
             Column("account", _TEXT))),)  # fmt: skip


def reconciliation(spec: EnvSpec, rng: random.Random, split: str) -> Instance:
    """Invoices vs the general ledger: one invoice unposted, one posted at another amount, 2 unrelated."""
    pool, n, cur = POOLS[split], int(spec.dimensions["invoice_count"]), spec.dimensions["currency"]
    vendors = rng.sample(pool["vendors"], n) + [rng.choice(pool["vendors"]) for _ in range(2)]
    ids = [f"INV-{i}" for i in sorted(rng.sample(range(pool["invoice"], pool["invoice"] + 1000), n + 2))]
    amounts = [rng.randint(12_000, 480_000) / 100 for _ in range(n + 2)]
    days = [_day(rng, date(2025, 1, 1), 360).isoformat() for _ in range(n + 2)]
    missing, mismatched = rng.sample(range(n), 2)
    delta = rng.choice((-1, 1)) * rng.randint(500, 9_000) / 100
    rows = []
    for i in range(n + 2):
        if i == missing:
            continue
        posted = round(amounts[i] + (delta if i == mismatched else 0.0), 2)
        rows.append({"ref": ids[i], "vendor": vendors[i], "posted_on": days[i], "amount": posted,
                     "account": "2000-AP"})  # fmt: skip
    invoiced = round(sum(amounts[:n]), 2)
    posted = round(sum(r["amount"] for r in rows if r["ref"] in ids[:n]), 2)
    every = round(sum(r["amount"] for r in rows), 2)
    diff = round(invoiced - posted, 2)
    lines = [f"{ids[i]},{vendors[i]},{days[i]},{amounts[i]:.2f}" for i in range(n)]
    who, tag = spec.stakeholders[0], rng.choice(pool["tags"])
    inv, wb = f"{tag}_invoices.csv", f"{tag}_recon.xlsx"
    header = f"invoice_id,vendor,invoice_date,amount_{cur.lower()}\n"
    files = {inv: header + "\n".join(lines) + "\n",
             f"{tag}_notes.md": f"From: the {who}\nPlease tie out the {tag} supplier invoices ({cur}) to the "
                                f"ledger before {spec.stage}.\n"}  # fmt: skip
    instruction = (
        f"Reconcile {inv} with the gl_entries table of the {tag} ledger (match on ref). Write {wb}, sheet "
        f"Recon: B1 the {tag} invoice total, B2 the total the {tag} GL posted for those IDs, B3 the {tag} "
        f"difference B1 minus B2, B4 the {tag} invoice ID with no GL entry."
    )
    cell = {"type": "cell_value", "file": wb, "sheet": "Recon"}
    rubric = [
        _code("exists", f"{wb} exists.", 0.5, type="file_exists", file=wb),
        _code("invoiced", f"Recon!B1 is the invoice total {invoiced:.2f} {cur} over the {n} invoices.", 1.0,
              **cell, cell="B1", approx=invoiced, tolerance=0.01),
        _code("posted", f"Recon!B2 is {posted:.2f} {cur}, the GL amount posted against those invoices.", 1.0,
              **cell, cell="B2", approx=posted, tolerance=0.01),
        _code("difference", f"Recon!B3 is the unreconciled difference {diff:.2f} {cur}.", 2.0,
              **cell, cell="B3", approx=diff, tolerance=0.01),
        _code("missing", f"Recon!B4 names {ids[missing]} ({vendors[missing]}), the unposted invoice.", 1.5,
              **cell, cell="B4", equals=ids[missing]),
        _code("no_unrelated", f"Must not: Recon!B2 is {every:.2f}, counting GL entries of other refs.", -1.0,
              **cell, cell="B2", approx=every, tolerance=0.01),
    ]  # fmt: skip
    truth = GroundTruth(
        answers={"total_invoiced": invoiced, "total_posted": posted, "difference": diff},
        facts={"missing_invoice": ids[missing], "mismatched_invoice": ids[mismatched], "currency": cur,
               "gl_total_all_refs": every},
    )  # fmt: skip
    # The totals as formulas over the amounts as the agent reads them (the csv's text, the ledger's JSON
    # numbers): graded by value after recalculation, and a demonstration a small policy can follow by
    # copying, where a literal total would need five-figure sums done in its head.
    invoiced_f = "=" + "+".join(line.rsplit(",", 1)[1] for line in lines)
    posted_f = "=" + "+".join(json.dumps(r["amount"]) for r in rows if r["ref"] in ids[:n])
    reference = {wb: {"Recon": {"A1": "Total invoiced", "B1": invoiced_f, "A2": "Total posted in GL",
                                "B2": posted_f, "A3": "Difference", "B3": "=B1-B2", "A4": "Missing from GL",
                                "B4": ids[missing]}}}  # fmt: skip
    system = SystemOfRecord("ledger", spec.system, "General ledger", GL, {"gl_entries": rows})
    return _instance(spec, split, files, system, truth, instruction, [wb], rubric, reference)


# ---- (ii) contract dates memo ---------------------------------------------------------------------------
CONTRACTS = (Table("contracts", "contract", Column("contract", _TEXT),
                   (Column("counterparty", _TEXT), Column("start_date", _TEXT), Column("end_date", _TEXT),
                    Column("status", _TEXT))),)  # fmt: skip


def contract_memo(spec: EnvSpec, rng: random.Random, split: str) -> Instance:
    """A counterparty's active contracts and their end dates, from the contract register."""
    pool, k = POOLS[split], int(spec.dimensions["active_count"])
    target, other = rng.sample(pool["parties"], 2)
    ids = [f"C-{i}" for i in rng.sample(range(pool["contract"], pool["contract"] + 1000), k + 3)]
    ends = [(date(2025, 6, 1) + timedelta(days=d)).isoformat() for d in rng.sample(range(1200), k + 3)]
    starts = [_day(rng, date(2021, 1, 1), 1000).isoformat() for _ in range(k + 3)]
    parties = [target] * (k + 1) + [other, other]
    statuses = ["active"] * k + ["terminated", "active", "active"]
    rows = [{"contract": c, "counterparty": p, "start_date": s, "end_date": e, "status": st}
            for c, p, s, e, st in zip(ids, parties, starts, ends, statuses, strict=True)]  # fmt: skip
    rows = rng.sample(rows, len(rows))
    who = spec.stakeholders[0]
    request = (f"From: the {who}\nSubject: {target} renewal review\n\nWe are preparing the {target} renewal "
               "review. What does the contract register hold on them?\n")  # fmt: skip
    slug = target.split()[0].lower()
    memo_md, files = f"{slug}_memo.md", {f"{slug}_request.md": request}
    instruction = (
        f"Write {memo_md} for the {target} renewal review. For each active {target} contract in the "
        f"register, give the {target} contract ID and end date (YYYY-MM-DD). Skip terminated {target} "
        "contracts and other counterparties."
    )
    rubric = [_code("exists", f"{memo_md} exists.", 0.5, type="file_exists", file=memo_md)]
    for i in range(k):
        rubric += [
            _code(f"id_{i}", f"{memo_md} names active {target} contract {ids[i]}.", 1.0,
                  type="contains", file=memo_md, text=ids[i]),
            _code(f"end_{i}", f"{memo_md} gives {ids[i]}'s end date, {ends[i]}.", 1.0,
                  type="date_in", file=memo_md, date=ends[i]),
        ]  # fmt: skip
    for i in range(k, k + 3):
        why = "terminated" if i == k else f"with {other}"
        rubric += [
            _code(f"not_id_{i}", f"Must not: {memo_md} lists contract {ids[i]} ({why}).", -1.0,
                  type="contains", file=memo_md, text=ids[i]),
            _code(f"not_end_{i}", f"Must not: {memo_md} gives {ends[i]}, the end date of {ids[i]}.", -1.0,
                  type="date_in", file=memo_md, date=ends[i]),
        ]  # fmt: skip
    truth = GroundTruth(
        lookups={f"{ids[i]}.end_date": ends[i] for i in range(k)},
        facts={"counterparty": target, "active": ids[:k], "terminated": ids[k], "other_party": other,
               "other_contracts": ids[k + 1 :], "excluded_end_dates": ends[k:]},
    )  # fmt: skip
    table = "\n".join(f"| {ids[i]} | {ends[i]} |" for i in range(k))
    memo = f"# {target}: active contracts\n\nFor: general counsel\n\n| Contract | End date |\n|---|---|\n"
    memo += table + "\n"
    system = SystemOfRecord("contracts", spec.system, "Contract register", CONTRACTS, {"contracts": rows})
    return _instance(spec, split, files, system, truth, instruction, [memo_md], rubric, {memo_md: memo})


# ---- (iii) ticket tracker update ------------------------------------------------------------------------
TICKETS = (Table("tickets", "ticket", Column("ticket", _TEXT),
                 (Column("title", _TEXT), Column("status", _TEXT), Column("owner", _TEXT),
                  Column("updated_on", _TEXT))),)  # fmt: skip
TITLES = {
    "IT": (
        "Laptop will not boot",
        "VPN drops hourly",
        "Printer jam",
        "Password reset loop",
        "Monitor flicker",
    ),
    "HR": (
        "Payroll query",
        "Leave balance wrong",
        "Contract copy request",
        "Onboarding pack",
        "Benefits form",
    ),
    "facilities": ("Leaking tap", "Broken chair", "Lift noise", "Door badge fault", "Heating too low"),
}
STATUSES = ("open", "in_progress", "waiting", "closed")


def ticket_tracker(spec: EnvSpec, rng: random.Random, split: str) -> Instance:
    """A stale tracker: every listed ticket's status changed since, some owners too; one ticket unlisted."""
    pool, k = POOLS[split], int(spec.dimensions["ticket_count"])
    ids = [f"T-{i}" for i in sorted(rng.sample(range(pool["ticket"], pool["ticket"] + 90), k + 1))]
    titles = rng.sample(TITLES[spec.dimensions["team"]], k + 1)
    people = rng.sample(pool["people"], len(pool["people"]))
    old_people, new_people = people[:2], people[2:]
    old = [(rng.choice(STATUSES[:2]), rng.choice(old_people)) for _ in range(k)]
    new = []
    for status, owner in old:
        moved = rng.random() < 0.5
        new.append(
            (rng.choice([s for s in STATUSES if s != status]), rng.choice(new_people) if moved else owner)
        )
    new.append((rng.choice(STATUSES), rng.choice(new_people)))  # the unlisted ticket
    rows = [{"ticket": ids[i], "title": titles[i], "status": new[i][0], "owner": new[i][1],
             "updated_on": _day(rng, date(2025, 3, 1), 60).isoformat()} for i in range(k + 1)]  # fmt: skip
    header = "ticket,title,status,owner\n"
    stale = "".join(f"{ids[i]},{titles[i]},{old[i][0]},{old[i][1]}\n" for i in range(k))
    fresh = "".join(f"{ids[i]},{titles[i]},{new[i][0]},{new[i][1]}\n" for i in range(k))
    tag = rng.choice(pool["tags"])
    trk = f"{tag}_tracker.csv"
    instruction = (
        f"Update {trk} from the {tag} ticketing system: for each {tag} ticket listed, set status and owner "
        f"to the current {tag} values. Keep the header, columns and row order; add no new {tag} tickets."
    )

    def field(i: int, column: int, value: str) -> dict[str, str]:  # ticket i's row, found by its id
        skip = r"[^,\n]*," * (column - 1)
        pattern = rf'(?m)^\s*{re.escape(ids[i])}\s*,{skip}\s*"?{re.escape(value)}"?\s*(?:,|$)'
        return {"type": "regex", "file": trk, "pattern": pattern}

    rubric, lookups = [], {}
    for i in range(k):
        rubric.append(_code(f"status_{i}", f"{trk}: {ids[i]}'s row has status {new[i][0]}.", 1.0,
                            **field(i, 2, new[i][0])))  # fmt: skip
        lookups[f"{ids[i]}.status"] = new[i][0]
        if new[i][1] != old[i][1]:
            rubric.append(_code(f"owner_{i}", f"{trk}: {ids[i]}'s row has owner {new[i][1]}.", 1.0,
                                **field(i, 3, new[i][1])))  # fmt: skip
            lookups[f"{ids[i]}.owner"] = new[i][1]
    rubric.append(_code("no_extra", f"Must not: {trk} lists {ids[k]}, a ticket not on the tracker.",
                        -1.0, type="contains", file=trk, text=ids[k]))  # fmt: skip
    truth = GroundTruth(lookups=lookups, facts={"tracked": ids[:k], "unlisted": ids[k]})
    system = SystemOfRecord("tickets", spec.system, "Ticketing system", TICKETS, {"tickets": rows})
    return _instance(spec, split, {trk: header + stale}, system, truth, instruction, [trk], rubric,
                     {trk: header + fresh})  # fmt: skip


def _instance(
    spec: EnvSpec, split: str, files: dict[str, Any], system: SystemOfRecord, truth: GroundTruth,
    instruction: str, deliverables: list[str], rubric: list[Criterion], reference: dict[str, Any],
) -> Instance:  # fmt: skip
    proposal = Proposal(instruction=instruction, deliverables=deliverables, rubric=rubric)
    return Instance(f"{spec.env_type}-{spec.spec_id}", spec, files, system, truth, proposal, reference, split)


BUILDERS = {
    "invoice_ledger_reconciliation": reconciliation,
    "contract_dates_memo": contract_memo,
    "ticket_tracker_update": ticket_tracker,
}


def kw_tasks(n: int, seed: int, split: str = "train") -> list[KwTask]:
    """Return ``n`` tasks of ``split``, the three environment types in turn (redrawn until leak-free)."""
    check_split(split)
    out = []
    for i in range(n):
        env_type = ENV_TYPES[i % len(ENV_TYPES)]
        for attempt in range(16):
            rng = rng_for("knowledge_work", seed, split, i, attempt)
            instance = BUILDERS[env_type](sample_spec(env_type, rng), rng, split)
            instance.id = f"kw-{split}-{seed}-{i:04d}"
            task = task_of(instance, instance.proposal, "generator")  # type: ignore[arg-type]
            if not find_leaks(task):
                break
        else:
            raise RuntimeError(f"knowledge_work: task {i} of seed {seed} ({split}) leaks in 16 draws")
        out.append(task)
    return out


def tiny_task(task: KwTask) -> TinyTask:
    """The TinyTask row of ``task``: the instruction as the prompt, the rubric as the label."""
    spec = task.instance.spec
    label = KWLabel(rubric=task.rubric, deliverables=list(task.deliverables))
    meta = {"family": FAMILY, "reward": REWARD, "source": "tiny_tasks", "category": "Knowledge Work",
            "task": task.name, "env_type": spec.env_type, "split": task.instance.split}  # fmt: skip
    return TinyTask(task.name, user(task.instruction), label.model_dump(mode="json", exclude_none=True), meta,
                    "", DONE)  # fmt: skip


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tiny knowledge-work tasks of ``split`` (deterministic in seed, split and index)."""
    return [tiny_task(t) for t in kw_tasks(n, seed, split)]


def write_tasks(out: Path, n: int, seed: int, split: str = "train") -> list[Path]:
    """Write the Harbor folders of :func:`kw_tasks` under ``out``; return their paths."""
    return write_task_folders(Path(out), kw_tasks(n, seed, split))
