"""RelayRoom Knowledge Gateway.

A typed, provenance-tracked table of project facts behind a trust gate:
agents write candidates, and only independent CI issuers or the project owner
move an entry to trusted.
"""

__version__ = "0.1.0"
