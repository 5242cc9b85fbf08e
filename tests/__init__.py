"""The project's tests; helpers shared by them (the public client is :mod:`crs_bridge.client`)."""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]


def columns(candidates):
    """A list of candidate objects as the engine takes them: bundles (``CompactCandidate``) through
    ``CompactColumns.of``, expanded ones (``MigrationCandidate``) through ``CandidateColumns.of``;
    an empty list as no bundles."""
    from crs_bridge.core import CandidateColumns, CompactColumns, MigrationCandidate

    candidates = list(candidates)
    if candidates and isinstance(candidates[0], MigrationCandidate):
        return CandidateColumns.of(candidates)
    return CompactColumns.of(candidates)
