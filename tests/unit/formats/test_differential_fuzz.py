"""The differential fuzz test, seeded and small: healthy caches and exploit files are mutated where
parsers disagree (zip end records, offsets, compression methods, ``.npy`` headers and shapes,
pickle opcodes); every mutant that a real loader runs into a foreign global or an object array
must be ``unsafe-pickle`` in a quick and a deep scan. The oracle (``tests/differential.py``) and
the campaign (``tests/fuzz_campaign.py``) say how; ``make fuzz`` runs a long campaign.

On failure the message lists each mutant: its number (rebuilt alone from the seed and the number),
the seed file it came from, the mutator chain, what each loader reached, and the scan's verdicts.
"""

from __future__ import annotations

from pathlib import Path

from differential import LOADERS
from factories import PWNED_MARKER
from fuzz_campaign import campaign, mutants, seeds
from fuzz_mutations import MUTATORS

SEED, N = 27, 250


def test_oracle_agrees_with_every_seed(tmp_path: Path) -> None:
    """The oracle itself, on the unmutated seeds: every healthy trainer file opens under some
    loader and holds no object array (its globals make the benign set, which holds nothing from
    os, subprocess or an eval); every exploit seed reaches something outside it; the audit hook
    saw the unpickler's ``find_class`` calls. (What the scan says of the seeds is checked with
    the mutants, below.)"""
    result = campaign(0, SEED, tmp_path)
    assert result.oracle_problems == []
    assert result.scan_errors == []
    assert {"torch._utils._rebuild_tensor_v2", "collections.OrderedDict"} <= result.benign


def test_mutants_are_deterministic_and_cover_every_mutator(tmp_path: Path) -> None:
    """Mutant ``i`` of a campaign depends on the seed files, the seed and ``i`` only, and the
    suite's campaign uses every mutator at least once."""
    files = seeds(Path(PWNED_MARKER))
    first, second = mutants(files, N, SEED), mutants(files, N, SEED)
    assert [(m.index, m.chain, m.data) for m in first] == [(m.index, m.chain, m.data) for m in second]
    alone = mutants(files, 1, SEED, start=N - 1)
    assert (alone[0].chain, alone[0].data) == (first[-1].chain, first[-1].data)
    used = {name for m in first for step in m.chain.split(" + ") for name in step.split(">")}
    assert used == set(MUTATORS), sorted(set(MUTATORS) - used)
    assert len(first) == N  # every index made one


def test_every_mutant_a_loader_runs_is_unsafe_pickle(tmp_path: Path) -> None:
    result = campaign(N, SEED, tmp_path)
    assert result.oracle_problems == []
    assert result.scan_errors == []
    assert result.counts["dangerous"] >= N // 5, result.counts  # the campaign exercises the rule
    if result.alarms:  # the scanner fails closed: reported, not asserted (see differential.py)
        print(f"{len(result.alarms)} harmless mutants called unsafe-pickle:", *result.alarms, sep="\n  ")
    summary = [f"{count:4d}  {key}" for key, count in sorted(result.counts.items())]
    assert result.failures == [], "\n".join(
        [f"{len(result.failures)} dangerous file(s) not unsafe-pickle (loaders: {', '.join(LOADERS)}):"]
        + result.failures
        + summary
    )
