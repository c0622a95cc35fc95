"""``check_log``: read a whole log and report what is damaged (``baf check``).

Every store gets baf's own checks, through the ``SessionLog`` interface only:

- every record of every session is read, so each one's own checks run (decoding, a store's
  checksum, no missing seq), and a damaged record is reported by session and seq; reading goes on
  after it, so one damaged record does not hide the next;
- each session is folded, passing *through* its snapshots, so a snapshot is compared in full with
  the fold of the records before it (a load only runs the cheap checks; see ``baf.log.snapshot``);
- the store's unfinished-work index (``unfinished_sessions``) is compared with the rule folded over
  every session's records (``baf.log.work``).

Then the store's own storage checks (``SessionLog.check_storage``; for SQLite, its integrity check).
Nothing is written: open the log read-only to be sure of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from baf.errors import CorruptRecordError, CorruptSnapshotError, LogError
from baf.log.projection import SessionProjection
from baf.log.record import Record
from baf.log.store import SessionLog
from baf.log.work import IDLE, WORK_KINDS, work_after

__all__ = ["CheckReport", "Finding", "check_log"]

# Problems reported per session before the rest of it is skipped (a big gap or a damaged page would
# otherwise report every seq after it).
_PER_SESSION: Final = 20
_CHUNK: Final = 5000


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing ``check_log`` found: damage, or (``damage=False``) a note worth knowing."""

    message: str
    session_id: str | None = None
    seq: int | None = None
    damage: bool = True

    def __str__(self) -> str:
        where = (
            ""
            if self.session_id is None
            else f"session {self.session_id!r}" + ("" if self.seq is None else f" seq {self.seq}")
        )
        return f"{where}: {self.message}" if where else self.message


@dataclass(slots=True)
class CheckReport:
    """What ``check_log`` read and found."""

    sessions: int = 0
    records: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        """Whether any finding is damage."""
        return any(finding.damage for finding in self.findings)


async def check_log(log: SessionLog) -> CheckReport:
    """Read every record of ``log`` and report what is damaged (see the module docstring)."""
    report = CheckReport()
    try:
        session_ids = await log.sessions()
    except LogError as exc:
        report.findings.append(Finding(f"the session list cannot be read: {exc}"))
        session_ids = []
    report.sessions = len(session_ids)
    expected_unfinished: list[str] = []
    damaged: set[str] = set()
    for session_id in session_ids:
        unfinished = await _check_session(log, session_id, report)
        if unfinished is None:
            damaged.add(session_id)
        elif unfinished:
            expected_unfinished.append(session_id)
    try:
        listed = await log.unfinished_sessions()
    except LogError as exc:
        report.findings.append(Finding(f"the unfinished-work index cannot be read: {exc}"))
    else:
        for session_id in sorted(set(listed) - set(expected_unfinished) - damaged):
            report.findings.append(Finding("listed as having unfinished work, but its records say not", session_id))
        for session_id in sorted(set(expected_unfinished) - set(listed)):
            report.findings.append(Finding("has unfinished work, but the index does not list it", session_id))
    for damage, message in await log.check_storage():
        report.findings.append(Finding(message, damage=damage))
    return report


async def _check_session(log: SessionLog, session_id: str, report: CheckReport) -> bool | None:
    """Read and fold one session, adding what is wrong to ``report``; whether it has unfinished work
    (None if it is damaged: then its work status cannot be told)."""
    check = _SessionCheck(session_id, report)
    after = 0
    while check.problems < _PER_SESSION:
        try:
            async for chunk in log.read_chunks(session_id, after_seq=after, size=_CHUNK):
                check.fold(chunk)
                after = chunk[-1].seq
            return None if check.problems else check.status.unfinished
        except LogError as exc:
            seq = getattr(exc, "seq", None) or after + 1
            if seq > after + 1:
                # The records before the bad one were whole, but the chunk failed as one: read them alone.
                async for chunk in log.read_chunks(session_id, after_seq=after, size=seq - 1 - after):
                    check.fold(chunk)
                    break
            check.found(exc.reason if isinstance(exc, CorruptRecordError) else str(exc), seq)
            check.projection = None
            after = seq  # go on after the damaged (or missing) record
    report.findings.append(Finding(f"more than {_PER_SESSION} problems: the rest of it was not checked", session_id))
    return None


class _SessionCheck:
    """The fold and work status of one session as ``check_log`` reads it."""

    def __init__(self, session_id: str, report: CheckReport) -> None:
        self.session_id = session_id
        self.report = report
        self.projection: SessionProjection | None = SessionProjection(session_id)
        self.status = IDLE
        self.problems = 0

    def found(self, message: str, seq: int | None) -> None:
        self.problems += 1
        self.report.findings.append(Finding(message, self.session_id, seq))

    def fold(self, records: list[Record]) -> None:
        for record in records:
            self.report.records += 1
            if record.kind in WORK_KINDS:
                self.status = work_after(self.status, record.kind, record.seq, record.data)
            if self.projection is None:
                continue
            try:
                self.projection.apply(record)
            except CorruptRecordError as exc:
                self.found(exc.reason, exc.seq)
                # A refused snapshot changes nothing in the fold, which goes on (and checks the next
                # one); past any other record it refused, the fold cannot be trusted.
                if not isinstance(exc, CorruptSnapshotError):
                    self.projection = None
