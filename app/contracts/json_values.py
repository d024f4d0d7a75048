"""The values a JSON column of the contracts holds (findings.evidence, incidents.remedy) once
parsed: what ``json.loads`` returns, spelled as a type so readers check what they take out."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = str | int | float | bool | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]
