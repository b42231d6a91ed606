"""Where a git checkout is, and what it ignores: commands that write files
into a person's folder ask before touching a checkout's tracked tree."""

from __future__ import annotations

import subprocess
from pathlib import Path


def checkout_of(start: Path) -> Path | None:
    """The top of the git checkout holding `start` (`.git` is a folder, or a
    file in a worktree), or None outside any checkout."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def unignored(top: Path, paths: list[Path]) -> list[Path] | None:
    """Those of `paths` (inside the checkout `top`) that its ignore rules do
    not ignore, as git itself judges them; None when git cannot say (not
    installed, not a checkout it can read)."""
    if not paths:
        return []
    names = [str(path.relative_to(top)) for path in paths]
    try:
        done = subprocess.run(["git", "check-ignore", "-z", "--stdin"], cwd=top, input="\0".join(names) + "\0",
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode not in (0, 1):  # 1: none of them is ignored
        return None
    ignored = set(filter(None, done.stdout.split("\0")))
    return [path for path, name in zip(paths, names) if name not in ignored]
