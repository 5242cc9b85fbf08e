"""The project's tests; helpers shared by them (the public client is :mod:`crs_bridge.client`)."""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
