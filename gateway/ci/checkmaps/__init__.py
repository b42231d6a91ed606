"""Check maps: which CI systems may vote for a project, and which entries each check supports."""

from gateway.ci.checkmaps.model import CheckMap, CheckRule, Problem
from gateway.ci.checkmaps.registry import CheckmapRegistry, Snapshot
from gateway.ci.checkmaps.validate import validate_text

__all__ = ["CheckMap", "CheckRule", "CheckmapRegistry", "Problem", "Snapshot", "validate_text"]
