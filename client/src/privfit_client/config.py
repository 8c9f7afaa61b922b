"""Where the command line keeps the server URL and key: one JSON file readable by its owner only.

The file is ``<user config dir>/privfit-client/config.json`` (``~/.config/...`` on Linux,
following ``XDG_CONFIG_HOME``), written with mode 0600 in a 0700 directory. ``PRIVFIT_URL``
and ``PRIVFIT_KEY`` (or ``--url``/``--key``) take precedence over it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = ["Credentials", "config_path", "load", "save"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """A server URL and an API key (either may be missing)."""

    url: str | None
    key: str | None


def config_path() -> Path:
    """The config file's path."""
    return Path(platformdirs.user_config_dir("privfit-client")) / "config.json"


def load(path: Path | None = None) -> Credentials:
    """The saved credentials, or empty ones when nothing was saved."""
    path = path or config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Credentials(None, None)
    return Credentials(data.get("url"), data.get("key"))


def save(credentials: Credentials, path: Path | None = None) -> Path:
    """Write the credentials, readable and writable by the owner only; returns the path."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # the directory is this program's own
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"url": credentials.url, "key": credentials.key}, handle)
        handle.write("\n")
    os.chmod(path, 0o600)  # also when the file existed with wider permissions
    return path
