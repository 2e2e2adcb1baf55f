"""YAML files validated by a pydantic model, with one-line errors naming the file, the line and the key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from liger_perf.core.errors import UserError
from liger_perf.core.workspace import not_a_file

Model = TypeVar("Model", bound=BaseModel)


class YamlModel(BaseModel):
    """A model a YAML file fills: unknown keys refused, and a number's key given a number. Pydantic would read
    ``true`` as 1 and YAML reads ``yes``, ``on``, ``no`` and ``off`` as true and false, so ``trial_timeout_s: yes``
    would be one second; ``.nan`` would fail every bound with a message about the bound."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _a_number_where_one_goes(cls, value, info: ValidationInfo):
        if cls.model_fields[info.field_name].annotation in (int, float):
            if isinstance(value, bool):
                raise ValueError("give a number, not true or false (YAML reads yes, no, on and off as those)")
            if isinstance(value, float) and math.isnan(value):
                raise ValueError("give a number, not .nan")
        return value


def _line_of(text: str, loc: tuple) -> int | None:
    """The line (1-based) of the deepest key or list item of ``loc`` (a pydantic error's path: keys and list
    indexes) that the YAML text holds: ``kernels.1.budget`` is the line of that item's ``budget:``, an item that
    lacks a key its item's first line. None where not even the first key is in the text (a value overridden)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)),
                         None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def read_yaml_mapping(path: str | Path, what: str = "") -> tuple[dict, str]:
    """The mapping a YAML file holds, and its text; every way it can be wrong is one line (``UserError``)."""
    path = Path(path)
    name = f"{what} {path}".strip()
    if not path.is_file():
        raise UserError(f"{name} {not_a_file(path)}: " + ("pass the YAML file itself" if path.exists()
                                                          else "write it (see the README), or pass another file"))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{name} is not UTF-8 text (byte {e.start}): save it as UTF-8 YAML") from None
    except OSError as e:
        raise UserError(f"{name} cannot be read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)}): fix the syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys to values, found a {type(data).__name__}")
    odd = [key for key in data if not isinstance(key, str)]
    if odd:
        raise UserError(f"{path}: key {odd[0]!r} is not a name: every key is a word (see the README)")
    return data, text


def load_yaml_model(path: str | Path, model: type[Model], **overrides) -> Model:
    """Read ``path`` into ``model``; ``overrides`` that are not None win over the file's values."""
    path = Path(path)
    data, text = read_yaml_mapping(path)
    overrides_given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return model(**{**data, **overrides_given})
    except ValidationError as e:
        error = e.errors()[0]
        loc = [str(part) for part in error["loc"]]
        number = _line_of(text, tuple(error["loc"])) if loc and loc[0] not in overrides_given else None
        line = f":{number}" if number else ""
        where = ".".join(loc) or model.__name__
        if error["type"] == "extra_forbidden":
            allowed = (f"the keys are {', '.join(model.model_fields)}" if len(loc) == 1
                       else "the README lists the keys allowed there")
            raise UserError(f"{path}{line}: unknown key {where!r}: {allowed}") from None
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input")
        shown = f" (got {value!r})" if loc and not isinstance(value, (dict, list)) else ""
        raise UserError(f"{path}{line}: {where}: {message}{shown}") from None
