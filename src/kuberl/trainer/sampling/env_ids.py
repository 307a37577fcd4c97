"""What `spec.env.id` names, and importing whatever registers it.

Three forms, told apart by what follows the colon:

- `CartPole-v1`, `ALE/Pong-v5`: a registered Gymnasium id. Ids in a well-known namespace
  (`ALE/...`) import the package that registers them first (`ale_py`).
- `ale_py:ALE/Pong-v5`: Gymnasium's own `module:EnvId` form: import `module`, then look up the id.
  After the colon comes an env id: it has a `/` namespace or a `-vN` version.
- `my_pkg.envs:Corridor`: a user's class. After the colon comes a Python name (letters, digits,
  `_`, dots), with neither `/` nor `-`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym

from kuberl.api.types import PYTHON_NAME

# Namespaces whose ids exist only once a package is imported: namespace -> (module, what to pip install).
KNOWN_NAMESPACES: dict[str, tuple[str, str]] = {"ALE": ("ale_py", "ale-py (kuberl[atari])")}
# Modules Gymnasium's own envs import lazily -> the distribution that provides them.
PIP_NAMES: dict[str, str] = {
    "ale_py": "ale-py (kuberl[atari])",
    "cv2": "opencv-python-headless (kuberl[atari])",
    "mujoco": "mujoco (kuberl[mujoco])",
    "imageio": "imageio (kuberl[mujoco])",
    "Box2D": "box2d",
    "pygame": "pygame",
}



class EnvNotFound(ValueError):
    """The env id names nothing Gymnasium knows and no importable class."""


@dataclass(frozen=True)
class EnvId:
    """A parsed `spec.env.id`: a user's class, or a Gymnasium id and the module that registers it."""

    kind: Literal["class", "gymnasium"]
    module: str | None  # imported first (class: the class's module; gymnasium: the registering module)
    name: str  # the class name, or the Gymnasium id


def parse_env_id(env_id: str) -> EnvId:
    """Tell the three forms apart (see the module's docstring); raises EnvNotFound for a malformed one."""
    if ":" not in env_id:
        namespace = env_id.split("/", 1)[0] if "/" in env_id else None
        module = KNOWN_NAMESPACES[namespace][0] if namespace in KNOWN_NAMESPACES else None
        return EnvId("gymnasium", module, env_id)
    module, _, rest = env_id.partition(":")
    if not PYTHON_NAME.match(module) or not rest:
        raise EnvNotFound(f"{env_id!r}: expected package.module:Class or module:EnvId (such as ale_py:ALE/Pong-v5)")
    if PYTHON_NAME.match(rest):
        return EnvId("class", module, rest)
    return EnvId("gymnasium", module, rest)


def missing_package_hint(exc: ImportError) -> str:
    """The distribution to install for a failed import, as a sentence; a module no distribution is known for
    may be a user's own, found through PYTHONPATH."""
    missing = (getattr(exc, "name", None) or "").split(".")[0]
    if missing in PIP_NAMES:
        return f"install {PIP_NAMES[missing]}"
    if missing:
        return f"install {missing}, or put the folder that holds {missing} on PYTHONPATH"
    return "install the package that provides it"


def import_module(module: str, env_id: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise EnvNotFound(f"{env_id!r} needs the Python module {module!r}, which cannot be imported "
                          f"({exc}): {missing_package_hint(exc)}") from None


def import_env_class(env_id: str) -> type[gym.Env]:
    """Import "package.module:Class"; raises EnvNotFound with the reason."""
    parsed = parse_env_id(env_id)
    if parsed.kind != "class" or parsed.module is None:
        raise EnvNotFound(f"{env_id!r}: expected package.module:Class")
    try:
        module = importlib.import_module(parsed.module)
    except ImportError as exc:
        raise EnvNotFound(f"{env_id!r}: cannot import module {parsed.module!r} ({exc})") from None
    env_class: object = module
    for part in parsed.name.split("."):
        env_class = getattr(env_class, part, None)
        if env_class is None:
            raise EnvNotFound(f"{env_id!r}: module {parsed.module!r} has no attribute {parsed.name!r}")
    if not isinstance(env_class, type) or not issubclass(env_class, gym.Env):
        raise EnvNotFound(f"{env_id!r}: {parsed.name} is not a gymnasium.Env subclass")
    return env_class


def gym_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of a Gymnasium id (either form), importing its package; raises EnvNotFound."""
    parsed = parse_env_id(env_id)
    if parsed.kind != "gymnasium":
        raise EnvNotFound(f"{env_id!r} names a class, not a Gymnasium id")
    if parsed.module is not None:
        import_module(parsed.module, env_id)
    try:
        return gym.spec(parsed.name)
    except gym.error.Error as exc:
        raise EnvNotFound(f"unknown Gymnasium env id {parsed.name!r} ({exc})") from None
