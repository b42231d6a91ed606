"""The provider modules by the name a check map uses.  A new CI provider is
a new small module with the same functions, listed here."""

from __future__ import annotations

from types import ModuleType

from gateway.ci.oidc import generic, github, gitlab

PROVIDERS: dict[str, ModuleType] = {github.NAME: github, gitlab.NAME: gitlab, generic.NAME: generic}
