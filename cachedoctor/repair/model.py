"""The repair vocabulary: actions and what each item came to. (What a recompute must produce,
:class:`RecomputeSpec`, is the layouts' to say: it lives in ``layouts/interface.py``.)

An :class:`Action` is one cache path and the one thing repair will do to it. It is planned from
the scan's findings, recorded in the journal before anything changes, carried to a worker (so
it is a small frozen record of plain values), and judged again under the file's lock just
before it runs: a file that changed since the scan is left alone.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field, fields

from cachedoctor.errors import PathError
from cachedoctor.layouts.interface import RecomputeSpec  # what a layout says a recompute makes (re-exported)


class RepairError(PathError):
    """Repair cannot start or cannot go on (a full disk, a foreign journal, too many GPUs)."""


class Declined(Exception):
    """The user said no at the prompt: nothing was changed."""


class NotRewritable(Exception):
    """The file cannot be written again here (not torch, unsafe, unreadable, a key this repair
    cannot make): the item is blocked, and nothing was written."""


class ActionKind(str, enum.Enum):
    """What repair does to one path. The first four are the findings' ``fix`` values."""

    REWRITE_CPU = "rewrite-cpu"  # same tensors, every storage on cpu
    CLONE_STORAGE = "clone-storage"  # each tensor saved as its own view's data (and on cpu)
    QUARANTINE = "quarantine"  # moved to the quarantine, nothing written in its place
    RECOMPUTE = "recompute"  # encoded again from its source; the old file goes to quarantine
    CLEANUP = "cleanup"  # a temp file of cachedoctor's own interrupted write: deleted
    #: a diffusion-pipe cache folder's index cut before its first bad item (``shards.py``): the
    #: trainer re-caches the rest; the path is the folder's ``metadata.db``
    DROP_ITEMS = "drop-items"

    @property
    def lossless(self) -> bool:
        return self in (ActionKind.REWRITE_CPU, ActionKind.CLONE_STORAGE)


class ItemState(str, enum.Enum):
    PLANNED = "planned"
    DONE = "done"  # written (or moved); not yet read back
    VERIFIED = "verified"  # read back with the safe reader and found healthy
    SKIPPED = "skipped"  # changed since the scan, or healthy already: left alone
    BLOCKED = "blocked"  # cannot be done here (no encoder, no source, unknown format)
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Stat:
    """What a path looked like when the action was planned: the precondition for acting."""

    size: int
    mtime_ns: int
    ino: int

    @classmethod
    def of(cls, path: str) -> Stat | None:
        """``None`` when nothing is at ``path``; a symlink that leads nowhere (dangling, or a
        loop) is something, the link itself: repair moves it, never what it points to."""
        import errno
        import os

        try:
            st = os.stat(path)
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError) and exc.errno != errno.ELOOP:
                raise
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return None
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    path: str
    root: str  # the cache root whose .cachedoctor/ holds this action's quarantine and journal
    reasons: tuple[str, ...]  # finding kinds behind it
    source: str | None = None
    before: Stat | None = None  # None: the path did not exist (a missing entry)
    spec: RecomputeSpec | None = None
    blocked: str | None = None  # why it cannot be carried out here
    note: str | None = None  # a quarantine in place of a recompute: why it could not be made again
    etag: str | None = None  # an object in a remote cache: its ETag when scanned (every request is conditional on it)

    @property
    def recompute(self) -> RecomputeSpec:
        """The spec of a recompute action (the planner gives every one a spec)."""
        if self.spec is None:
            raise ValueError(f"{self.path}: a {self.kind.value} action carries no recompute spec")
        return self.spec

    @property
    def bytes(self) -> int:
        """The file's size when planned (0 for a missing entry)."""
        return self.before.size if self.before else 0

    def to_json(self) -> str:
        """The journal's record of the action. Built field by field (``asdict`` deep-copies
        every value, a measurable share of planning a million rewrites); the same JSON."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["kind"] = self.kind.value
        if self.before is not None:
            data["before"] = {"size": self.before.size, "mtime_ns": self.before.mtime_ns, "ino": self.before.ino}
        if self.spec is not None:
            data["spec"] = asdict(self.spec)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Action:
        data = json.loads(text)
        data["kind"] = ActionKind(data["kind"])
        data["reasons"] = tuple(data["reasons"])
        data["before"] = Stat(**data["before"]) if data.get("before") else None
        spec = data.get("spec")
        if spec:
            for name in ("latent_hw", "resize", "crop", "pre_resize", "keys", "peers", "scaling"):
                if spec.get(name) is not None:
                    spec[name] = tuple(spec[name])
            spec["metadata"] = tuple(tuple(pair) for pair in spec.get("metadata", ()))
            data["spec"] = RecomputeSpec(**spec)
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ItemResult:
    path: str
    kind: ActionKind
    state: ItemState
    message: str = ""
    quarantined: str | None = None
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass(slots=True)
class RepairPlan:
    actions: list[Action] = field(default_factory=list)
    needs_person: list[str] = field(default_factory=list)  # name collisions: a person must rename

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for action in self.actions:
            label = "blocked" if action.blocked else action.kind.value
            out[label] = out.get(label, 0) + 1
        return dict(sorted(out.items()))

    def rewrite_bytes(self, kind: ActionKind | None = None) -> int:
        return sum(a.bytes for a in self.actions if a.kind.lossless and not a.blocked and kind in (None, a.kind))

    def runnable(self) -> list[Action]:
        return [a for a in self.actions if not a.blocked]


def still_failing(url: str, exc: Exception, what: str = "cannot be read", then: str = "try again later") -> RepairError:
    """One line (exit 2), worded as the scan's, for a request still failing after the store's
    retries: an endpoint that keeps failing is no bug to show a traceback for; waiting is what
    to do. ``<why>`` names the request's own URL where it is not ``url``."""
    return RepairError(url, f"{what} ({str(exc).removeprefix(url + ': ')}); {then}")
