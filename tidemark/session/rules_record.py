"""The lake's session rules record: the rules its sessions follow.

The gap, allowed lateness, watermark delay and gap boundary (tidemark/base/session_rules.py defines
them).

    <lake>/_rules/rules-000001.json   the rules the lake was first written with
    <lake>/_rules/rules-000002.json   one more file per deliberate change (`tidemark rules migrate`)

The record with the highest sequence is the lake's rules. Every record is written once and never
modified, so the folder is the history of the rules and of when they changed. Each holds a
fingerprint of the rules (`rules_id`): equal rules, equal ids, whatever their spelling ("60m", "1h").
The gap boundary is recorded only when it is `merge`: a record without it means `split`, so the
records and ids of lakes written before the boundary was a rule keep their meaning and identity.

Who reads and writes it:
- the stream records its rules at its first start on a lake (create-if-absent, so two streams
  starting at once on an empty lake cannot both win with different rules) and refuses to start on a
  lake recorded with other rules (unless told to migrate: tidemark/deduplication/rules_migration.py);
- the dedup (`tidemark dedup`, the DAG's spark-submit, the migration) takes its rules from here,
  refuses explicit rules that disagree, and writes `rules_id` into every version marker, so that
  `changed_since(marker, rules_in_force(lake)[0])` says whether a version was made under other
  rules (a rules change makes every date's current version stale);
- `tidemark up` checks the rule options it was given against the record before starting anything.

A lake written before the record existed has none: the dedup then uses the default rules with a
warning (what every DAG run used before), and the stream's next start records its rules, which
become the lake's (docs/lake-layout.md). Pure pyarrow and JSON: no Spark, usable from the DAG and
the function.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
import tenacity

from tidemark.base.logs import get_logger
from tidemark.base.session_rules import DEFAULT_GAP_BOUNDARY, RULE_NAMES, SessionRules
from tidemark.base.times import now_iso_z
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

log = get_logger("rules")

FORMAT = 1
_RECORD_NAME = re.compile(r"^rules-(\d{6})\.json$")
# How a rule is typed on a command line, for messages an operator can act on.
OPTION = {
    "gap": "--gap",
    "allowed_lateness": "--allowed-lateness",
    "watermark_delay": "--watermark-delay",
    "gap_boundary": "--gap-boundary",
}


class RulesMismatch(ValueError):
    """Rules given to a command disagree with the rules recorded in the lake."""


class InvalidRulesRecord(ValueError):
    """A file of the rules folder that is not a valid record (edited by hand, or not tidemark's)."""


@dataclass(frozen=True)
class Recorded:
    """One rules record: the rules, their id, and when and why they became the lake's."""

    sequence: int
    rules: SessionRules
    rules_id: str
    recorded_at: str
    reason: str
    recorded_by: str
    previous_rules_id: str | None

    def to_json(self) -> dict[str, Any]:
        """The record as its file holds it."""
        return {
            "format": FORMAT,
            "sequence": self.sequence,
            "rules": self.rules.describe(),
            "rules_us": self.rules.micros(),
            "rules_id": self.rules_id,
            "recorded_at": self.recorded_at,
            "reason": self.reason,
            "recorded_by": self.recorded_by,
            "previous_rules_id": self.previous_rules_id,
        }

    def describe(self) -> str:
        """The record as a line: 'gap 20m, ... (rules record 1, recorded 2026-03-06T...)'."""
        return f"{describe_rules(self.rules)} (rules record {self.sequence}, recorded {self.recorded_at})"


def describe_rules(rules: SessionRules) -> str:
    """The rules as a phrase: 'gap 30m, allowed lateness 1h, watermark delay 10m'."""
    # describe() leaves the default boundary out: messages about existing lakes read as before.
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in rules.describe().items())


def fingerprint(rules: SessionRules) -> str:
    """The rules' id: a hash of their canonical (microsecond) values."""
    canonical = json.dumps(rules.micros(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(resources.files("tidemark").joinpath("schemas/rules_record.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def parse_record(doc: object, where: str = "rules record") -> Recorded:
    """A record from its JSON, checked against the schema and its own fingerprint."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        field = "/".join(str(p) for p in first.path) or "(top level)"
        raise InvalidRulesRecord(f"{where}: {field}: {first.message}")
    assert isinstance(doc, dict)  # the schema's top level is an object
    try:
        rules = SessionRules.from_micros(doc["rules_us"])
    except ValueError as exc:
        raise InvalidRulesRecord(f"{where}: {exc}") from None
    if fingerprint(rules) != doc["rules_id"]:
        raise InvalidRulesRecord(f"{where}: rules_id {doc['rules_id']} is not the fingerprint of its rules")
    return Recorded(
        doc["sequence"],
        rules,
        doc["rules_id"],
        doc["recorded_at"],
        doc["reason"],
        doc["recorded_by"],
        doc["previous_rules_id"],
    )


def _sequences(lake: Lake) -> list[int]:
    found = []
    for name in lake.rules_dir().names():
        match = _RECORD_NAME.match(name)
        if match and int(match.group(1)) > 0:
            found.append(int(match.group(1)))
    return sorted(found)


def _read(lake: Lake, sequence: int) -> Recorded:
    path = lake.rules_record(sequence)
    try:
        doc = path.read_json()
    except ValueError as exc:  # not JSON
        raise InvalidRulesRecord(f"{path}: {exc}") from None
    if doc is None:
        raise InvalidRulesRecord(f"{path}: listed but not readable")
    record = parse_record(doc, path)
    if record.sequence != sequence:
        raise InvalidRulesRecord(f"{path}: holds sequence {record.sequence}")
    return record


def history(lake: Lake) -> list[Recorded]:
    """Every rules record of the lake, oldest first ([] for a lake without a record)."""
    return [_read(lake, sequence) for sequence in _sequences(lake)]


def current(lake: Lake) -> Recorded | None:
    """The lake's rules and their id (the newest record), or None when the lake has no record.

    rules_in_force() adds the defaults for a lake without a record.
    """
    sequences = _sequences(lake)
    return _read_settled(lake, sequences[-1]) if sequences else None


def rules_in_force(lake: Lake) -> tuple[SessionRules, str, Recorded | None]:
    """(rules, rules_id, record): the recorded rules, or the defaults for a lake without a record."""
    recorded = current(lake)
    rules = recorded.rules if recorded else SessionRules()
    return rules, fingerprint(rules), recorded


# ---- versions made under which rules -------------------------------------------------------------


def marker_fields(rules: SessionRules) -> dict[str, Any]:
    """What a dedup version marker records about the rules it was made under."""
    return {"rules_id": fingerprint(rules), "rules": rules}


def changed_since(marker: VersionRecord | None, rules: SessionRules) -> bool:
    """Were the lake's rules changed since this dedup version was made?

    `rules`: the lake's rules now (rules_in_force(lake)[0]).

    A version written before versions recorded their rules id is judged by its gap and boundary,
    the rules the dedup's output depends on: such a version predates the boundary, so it was made
    under `split`. No version at all: nothing to judge (False).
    """
    if marker is None:
        return False
    if marker.rules_id:
        return marker.rules_id != fingerprint(rules)
    return marker.gap != rules.gap or rules.gap_boundary != DEFAULT_GAP_BOUNDARY


def same_rules(a: VersionRecord, b: VersionRecord) -> bool:
    """Were these two dedup version markers made under the same rules (by id, else by gap)?"""
    if a.rules_id and b.rules_id:
        return a.rules_id == b.rules_id
    return a.gap == b.gap


def outdated(lake: Lake, marker: VersionRecord) -> str | None:
    """Why a run's version must not be published (the lake's rules changed while it ran), or None.

    Checked at commit time, so that a run started before a migration cannot publish old-rules
    sessions after it. A lake without a record has nothing to compare with (None).
    """
    recorded = current(lake)
    if recorded is None or marker.rules_id == recorded.rules_id:
        return None
    return (
        f"the lake's session rules changed while the run ran: it used "
        f"{describe_rules(marker.rules) if marker.rules else 'unrecorded rules'}, "
        f"the lake now records {recorded.describe()}"
    )


# ---- checking rules given to a command -----------------------------------------------------------


def _given(requested: SessionRules | dict[str, Any] | None) -> tuple[SessionRules | None, tuple[str, ...]]:
    """(rules to compare, which of them were given) for a full set or a few typed options."""
    if requested is None:
        return None, ()
    if isinstance(requested, SessionRules):
        return requested, RULE_NAMES
    return SessionRules().with_overrides(requested), tuple(n for n in RULE_NAMES if n in requested)


def mismatch(lake: Lake, recorded: Recorded, given: SessionRules, names: tuple[str, ...], who: str) -> str:
    """The refusal message: both values of each rule that differs, and what to do instead."""
    differing = [n for n in names if getattr(recorded.rules, n) != getattr(given, n)]
    pairs = "; ".join(
        f"{OPTION[n]} {given.value(n)} given, the lake records {recorded.rules.value(n)}" for n in differing
    )
    migrate = " ".join(f"{OPTION[n]} {given.value(n)}" for n in differing)
    return (
        f"{who}: session rules disagree with the lake {lake}: {pairs} "
        f"(rules record {recorded.sequence}, recorded {recorded.recorded_at}). "
        f"Leave the rule options out to use the lake's rules, or change the rules deliberately with "
        f"`tidemark rules migrate --lake {lake} {migrate}` (records them and re-deduplicates every date)."
    )


def check(
    lake: Lake, requested: SessionRules | dict[str, Any] | None, who: str
) -> tuple[SessionRules, Recorded | None]:
    """The rules a command must use: the lake's, with the requested ones checked against them.

    Requested rules that disagree raise RulesMismatch naming both values. A lake without a record
    gives the requested rules (unrequested ones at their defaults).
    """
    given, names = _given(requested)
    recorded = current(lake)
    if recorded is None:
        return (given or SessionRules()), None
    if given is not None and any(getattr(recorded.rules, n) != getattr(given, n) for n in names):
        raise RulesMismatch(mismatch(lake, recorded, given, names, who))
    return recorded.rules, recorded


def for_dedup(lake: Lake, requested: SessionRules | dict[str, Any] | None = None) -> tuple[SessionRules, str]:
    """(rules, rules_id) for deduplicating a date of this lake: see check()."""
    rules, recorded = check(lake, requested, "dedup")
    if recorded is None:
        log.warning(
            "the lake has no session rules record: deduplicating with "
            + ("the rules given" if requested is not None else "the default rules"),
            lake=lake,
            **rules.describe(),
            hint="the stream records its rules at its next start; `tidemark rules show` explains",
        )
    return rules, fingerprint(rules)


# ---- writing records ----------------------------------------------------------------------------


def _now() -> str:
    return now_iso_z()


def _create(lake: Lake, record: Recorded) -> Recorded:
    """Write record number `record.sequence` unless it exists; returns the record that is there."""
    path = lake.rules_record(record.sequence)
    text = json.dumps(record.to_json(), sort_keys=True, indent=1) + "\n"
    if path.create_text_if_absent(text):
        log.info(
            "session rules recorded",
            lake=lake,
            sequence=record.sequence,
            rules_id=record.rules_id,
            reason=record.reason,
            **record.rules.describe(),
        )
        return record
    return _read_settled(lake, record.sequence)


def _read_settled(lake: Lake, sequence: int) -> Recorded:
    """A record that may be brand new (another writer's, created at this moment).

    On a store whose
    writes are not atomic (a reader can list an object whose bytes are still arriving) it may read
    empty for a moment: read again for two seconds before calling it invalid.
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(InvalidRulesRecord),
        stop=tenacity.stop_after_delay(2),
        wait=tenacity.wait_fixed(0.1),
        reraise=True,
    )
    return retrying(_read, lake, sequence)


def ensure(lake: Lake, requested: SessionRules | dict[str, Any] | None, recorded_by: str) -> Recorded:
    """The stream's first start on a lake records its rules; later starts must bring the same ones.

    Returns the lake's record. Raises RulesMismatch when the lake records other rules, or when
    another writer recorded other rules first at the same moment.
    """
    rules, recorded = check(lake, requested, recorded_by)
    if recorded is not None:
        return recorded
    legacy = bool(lake.sessions_root().event_dates())
    reason = "adopted: the lake was written before rules were recorded" if legacy else "first start on an empty lake"
    if legacy:
        log.warning(
            "the lake was written before session rules were recorded: recording these as its rules",
            lake=lake,
            **rules.describe(),
            hint="dates published under another gap are listed by `tidemark rules show`",
        )
    mine = Recorded(1, rules, fingerprint(rules), _now(), reason, recorded_by, None)
    there = _create(lake, mine)
    if there.rules_id != mine.rules_id:
        raise RulesMismatch(
            mismatch(lake, there, rules, RULE_NAMES, recorded_by)
            + " (another writer recorded its rules first, at the same time)"
        )
    return there


def record_change(lake: Lake, rules: SessionRules, recorded_by: str, reason: str = "migration") -> Recorded:
    """Make `rules` the lake's rules by adding a record (a no-op when they already are).

    The new record's number is the current one + 1, created only if absent: of two concurrent
    changes one wins, the other raises RulesMismatch naming what won.
    """
    recorded = current(lake)
    if recorded is not None and recorded.rules_id == fingerprint(rules):
        return recorded
    mine = Recorded(
        (recorded.sequence + 1) if recorded else 1,
        rules,
        fingerprint(rules),
        _now(),
        reason,
        recorded_by,
        recorded.rules_id if recorded else None,
    )
    there = _create(lake, mine)
    if there.rules_id != mine.rules_id:
        raise RulesMismatch(
            f"{recorded_by}: another change recorded other rules at the same time: "
            f"{there.describe()}; nothing was changed"
        )
    log.info(
        "session rules changed",
        lake=lake,
        sequence=there.sequence,
        rules_id=there.rules_id,
        previous_rules_id=there.previous_rules_id,
        **rules.describe(),
    )
    return there
