"""``repair --format json`` and ``recover --format json``: one ``cachedoctor.repair/1`` document.

The plan, the result and (for ``recover``) the survey, with absolute paths and stable keys; the
contract is docs/repair-json.md. It is built from the same :class:`RepairReport` the text is,
so the two never disagree on what is left or on the exit code.
"""

from __future__ import annotations

from typing import Any

from cachedoctor import __version__
from cachedoctor.report import write_check
from cachedoctor.report.repair_plan_text import NEEDS_PERSON
from cachedoctor.report.repair_text import RepairReport

SCHEMA = "cachedoctor.repair/1"


def repair_document(report: RepairReport, command: str, targets: list[str]) -> dict[str, Any]:
    """The document of one ``repair`` (``command="repair"``) or ``recover`` run; ``targets`` are
    the absolute paths it was given (the scanned roots replace them where a scan ran)."""
    outcome, survey = report.outcome, report.survey
    before = outcome.before if outcome is not None else None
    layout = outcome.layout_line if outcome is not None else survey.layout_line if survey is not None else None
    return {
        "schema": SCHEMA,
        "tool": {"name": "cachedoctor", "version": __version__},
        "command": command,
        "dry_run": report.dry_run,
        "targets": list(before.targets) if before is not None else list(targets),
        "layout": layout,
        "notes": list(outcome.notes) if outcome is not None else [],
        "resumed_run": outcome.interrupted.run_id if outcome is not None and outcome.interrupted else None,
        "scan": None
        if before is None
        else {
            "deep": bool(before.options.deep),
            "files_read": before.stats.files_read,
            "findings": len(before.findings),
            "files_with_findings": len({f.path for f in before.findings}),
        },
        "survey": survey_document(survey) if survey is not None else None,
        "plan": plan_document(outcome) if outcome is not None else None,
        "result": result_document(report) if outcome is not None and not report.dry_run else None,
        "clean": report.clean and not report.worse,
        "exit_code": int(report.exit_code),
    }


def plan_document(outcome: Any) -> dict[str, Any]:
    plan = outcome.plan
    kinds: dict[str, set[str]] = {}
    for f in outcome.before.findings:
        kinds.setdefault(f.path, set()).add(f.kind)
    return {
        "actions": [
            {
                "path": a.path,
                "action": a.kind.value,
                "kinds": list(a.reasons),
                "source": a.source,
                "bytes": a.bytes,
                "blocked": a.blocked,
                "not_recomputed": a.note if a.kind.value != "drop-items" else None,
                **({"flagged": a.note} if a.kind.value == "drop-items" else {}),
            }
            for a in plan.actions
        ],
        "needs_person": [
            {"path": p, "kinds": sorted(kinds.get(p, ())), "reason": NEEDS_PERSON} for p in plan.needs_person
        ],
        "counts": plan.counts(),
    }


def result_document(report: RepairReport) -> dict[str, Any]:
    outcome = report.outcome
    states = report.states
    changes = report.before_after()
    left = report.left()
    ran = bool(outcome.results)
    return {
        "run_id": outcome.run_id if ran else None,
        "files": [
            {
                "path": r.path,
                "action": r.kind.value,
                "state": r.state.value,
                "message": r.message,
                "quarantined": r.quarantined,
            }
            for r in outcome.results
        ],
        "counts": {s: states.get(s, 0) for s in ("verified", "skipped", "blocked", "failed")},
        "problems": list(outcome.problems),
        "quarantine": report.quarantine_dirs(),
        "undo": report.undo(),
        "before_after": None if changes is None else {k: _pair(*v) for k, v in changes.items()},
        "refused": [{"path": p, "message": m} for p, m in write_check.refused(outcome)],
        "not_judged": [{"path": p, "message": m} for p, m in write_check.unjudged(outcome)],
        "worse": {k: _pair(*v) for k, v in report.worse.items()},
        "changed_by_others": sorted(report.others),
        "still_broken": [
            {"path": x.path, "kinds": list(x.kinds), "state": x.state, "message": x.message} for x in left
        ],
        "next": report.next_step(left),
    }


def survey_document(found: Any) -> dict[str, Any]:
    def damaged(findings: list[Any]) -> list[dict[str, Any]]:
        return [{"path": f.path, "kind": f.kind, "message": f.message} for f in findings]

    return {
        "temp_files": [{"path": f.path, "size": f.details.get("size", 0)} for f in found.temp_files],
        "read_deep": [
            {
                "written": r.since,
                "files": r.files,
                "damaged_files": len({f.path for f in r.damaged}),
                "damaged": damaged(r.damaged),
            }
            for r in found.reads
        ],
        "known_damaged": damaged(found.known_damaged),
        "held_locks": list(found.held_locks),
        "interrupted": [
            {
                "root": root,
                "run_id": run.run_id,
                "finished": len(run.verified),
                "unfinished": len(run.unfinished),
                "encoders": list(run.encoders),
                "scope": None if run.scope is None else {"only": _sorted(run.only), "keep_blocked": run.keep_blocked},
            }
            for root, run in found.interrupted
        ],
    }


def _sorted(kinds: Any) -> list[str] | None:
    return sorted(kinds) if kinds is not None else None


def _pair(before: int, after: int) -> dict[str, int]:
    return {"before": before, "after": after}


__all__ = ["SCHEMA", "plan_document", "repair_document", "result_document", "survey_document"]
