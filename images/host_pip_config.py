"""The host's effective pip configuration, for a container build that must reach the same packages.

Merges the pip config files in pip's own order (global, user, then PIP_CONFIG_FILE) and the
PIP_* environment variables (which pip lets override the files) into one pip.conf, written to the
given path, and prints the local paths that configuration names (find-links directories, file://
indexes, constraint files, CA bundles), one per line, so the caller can mount them read-only.

    python3 images/host_pip_config.py OUT.conf  >  paths-to-mount
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


def local_paths(parser: configparser.ConfigParser) -> list[str]:
    paths: set[str] = set()
    for section in parser.sections():
        for option in PATH_OPTIONS:
            for token in parser[section].get(option, "").split():
                path = Path(token.removeprefix("file://"))
                if not path.is_absolute() or not path.exists():
                    continue
                # A file:// simple index links its files as ../../files/...: mount the index's parent.
                paths.add(str(path.parent if path.name == "simple" else path))
    return sorted(paths)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    parser = merged()
    with open(sys.argv[1], "w") as out:
        parser.write(out)
    print("\n".join(local_paths(parser)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
