"""The host's effective pip configuration, for a container build that must reach the same packages.

Merges the pip config files in pip's own order (global, user, then PIP_CONFIG_FILE) and the
PIP_* environment variables (which pip lets override the files) into one pip.conf written to OUT,
with every local path it names (find-links directories, file:// indexes, constraint files, CA
bundles) moved under PREFIX. Prints those host paths, one a line, for the caller to mount at
PREFIX/PATH: the build then sees them where the rewritten configuration says.

    python3 images/host_pip_config.py OUT.conf PREFIX  >  paths-to-mount
"""

from __future__ import annotations

import configparser
import os
import sys
from pathlib import Path

# Options whose values name files or directories on the host.
PATH_OPTIONS = ("find-links", "index-url", "extra-index-url", "constraint", "requirement", "cert", "client-cert")
# PIP_* variables that describe the host process, not where packages come from.
HOST_ONLY = {"PIP_CONFIG_FILE", "PIP_REQUIRE_VIRTUALENV", "PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT"}


def config_files() -> list[Path]:
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    home = Path.home()
    xdg_home = Path(os.environ.get("XDG_CONFIG_HOME", home / ".config"))
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs]
    files += [Path("/etc/pip.conf"), home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE") not in (None, "", os.devnull):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return [f for f in files if f.is_file()]


def merged() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read([str(f) for f in config_files()])
    if not parser.has_section("global"):
        parser.add_section("global")
    for name, value in sorted(os.environ.items()):
        if name.startswith("PIP_") and name not in HOST_ONLY:
            parser["global"][name[4:].lower().replace("_", "-")] = value
    return parser


def _local_path(token: str) -> Path | None:
    path = Path(token.removeprefix("file://"))
    return path if path.is_absolute() and path.exists() else None


def relocate(parser: configparser.ConfigParser, prefix: str) -> list[str]:
    """Move the local paths the configuration names under `prefix`; return the host paths to mount."""
    mounts: set[str] = set()
    for section in parser.sections():
        for option in PATH_OPTIONS:
            if option not in parser[section]:
                continue
            tokens = parser[section][option].split()
            for i, token in enumerate(tokens):
                path = _local_path(token)
                if path is None:
                    continue
                # A file:// simple index links its files as ../../files/...: mount the index's parent.
                mounts.add(str(path.parent if path.name == "simple" else path))
                tokens[i] = token.replace(str(path), prefix.rstrip("/") + str(path), 1)
            parser[section][option] = " ".join(tokens)
    return sorted(mounts)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    parser = merged()
    mounts = relocate(parser, sys.argv[2])
    with open(sys.argv[1], "w") as out:
        parser.write(out)
    print("\n".join(mounts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
