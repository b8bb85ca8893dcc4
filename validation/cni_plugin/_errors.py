"""The CNI error a plugin prints, and the spec's codes."""

from __future__ import annotations

import json

__all__ = [
    "CODE_AGENT",
    "CODE_DECODE",
    "CODE_INCOMPATIBLE_VERSION",
    "CODE_INVALID_CONFIG",
    "CODE_INVALID_ENV",
    "CODE_IO",
    "CODE_NOT_AVAILABLE",
    "CODE_TRY_AGAIN",
    "CODE_UNSUPPORTED_FIELD",
    "Frozen",
    "PluginError",
]

# The CNI spec's well-known error codes (SPEC.md, "Error"); 100 and up are a plugin's own.
CODE_INCOMPATIBLE_VERSION = 1
CODE_UNSUPPORTED_FIELD = 2
CODE_INVALID_ENV = 4
CODE_IO = 5
CODE_DECODE = 6
CODE_INVALID_CONFIG = 7
CODE_TRY_AGAIN = 11
#: STATUS: the plugin cannot serve ADDs now (spec 1.1).
CODE_NOT_AVAILABLE = 50
#: The agent refused the plugin's call for good (a bad token, a bad stage name):
#: not transient, so not code 11.
CODE_AGENT = 100


class PluginError(Exception):
    """A failure the plugin reports as the spec's error JSON on stdout."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(f"{msg} ({details})" if details else msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> str:
        body: dict[str, object] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            body["details"] = self.details
        return json.dumps(body)


class Frozen:
    """A value object whose attributes are set once, in ``__init__``.

    Not a frozen dataclass: ``dataclasses`` imports ``inspect`` (7-10 ms of
    the plugin's start on this host, paid by every sandbox's ADD)."""

    __slots__: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__}.{name}: read-only")

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(repr(getattr(self, n)) for n in self.__slots__))
