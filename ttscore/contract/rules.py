"""A model family's request rules, declared once as data and checked the same way on both sides.

The gateway checks a request against its family's `FamilyRules` in API field names before any work
starts; the family's runtime checks what reaches it over gRPC with the same rules, so a direct
Triton client gets the same message for the same mistake. `InvalidRequest.param` names the field.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

from ttscore.contract.errors import InvalidRequest


@dataclass(frozen=True)
class FieldRule:
    """An integer knob: accepted range (inclusive) and the default when the request leaves it out."""

    name: str  # the Speech API field name
    lo: int
    hi: int
    default: int | None

    def check(self, value: object) -> int | None:
        """The value as an int (None stays None), or InvalidRequest naming the field."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy integers pass
            raise InvalidRequest(f"'{self.name}' must be an integer", self.name)
        v = int(value)
        if not self.lo <= v <= self.hi:
            raise InvalidRequest(f"'{self.name}' must be between {self.lo} and {self.hi}, got {v}", self.name)
        return v

    def resolve(self, value: object) -> int:
        """Checked value, or the default."""
        checked = self.check(value)
        if checked is not None:
            return checked
        if self.default is None:
            raise InvalidRequest(f"Missing required parameter: '{self.name}'", self.name)
        return self.default


@dataclass(frozen=True)
class FamilyRules:
    family: str
    tasks: tuple[str, ...]  # the Speech API task types the family serves
    fields: tuple[FieldRule, ...]
    exclusive: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> fields only it accepts
    required: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> fields it needs

    def field(self, name: str) -> FieldRule:
        for rule in self.fields:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def check_task_fields(self, task: str, given: Mapping[str, object]) -> None:
        """Cross-field rules: fields only one task accepts (e.g. cloning inputs), each task's required fields."""
        for owner, names in self.exclusive.items():
            if task == owner:
                continue
            for name in names:
                if given.get(name) is not None:
                    raise InvalidRequest(f"'{name}' is only valid for {owner} task", name)
        for name in self.required.get(task, ()):
            value = given.get(name)
            if not (isinstance(value, str) and value.strip()):
                raise InvalidRequest(f"{task} task requires '{name}'", name)
