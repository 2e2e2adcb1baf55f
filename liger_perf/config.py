"""YAML files validated by a pydantic model, with one-line errors naming the file, the line and the key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from liger_perf.errors import UserError

Model = TypeVar("Model", bound=BaseModel)


def _key_lines(text: str) -> dict[str, int]:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def read_yaml_mapping(path: str | Path, what: str = "") -> tuple[dict, str]:
    """The mapping a YAML file holds, and its text; every way it can be wrong is one line (``UserError``)."""
    path = Path(path)
    name = f"{what} {path}".strip()
    if not path.is_file():
        raise UserError(f"{name} does not exist: write it (see the README), or pass another file")
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
    lines = _key_lines(text)
    try:
        return model(**{**data, **{k: v for k, v in overrides.items() if v is not None}})
    except ValidationError as e:
        error = e.errors()[0]
        loc = [str(part) for part in error["loc"]]
        key = loc[0] if loc else ""
        line = f":{lines[key]}" if key in lines else ""
        where = ".".join(loc) or model.__name__
        if error["type"] == "extra_forbidden":
            allowed = (f"the keys are {', '.join(model.model_fields)}" if len(loc) == 1
                       else "the README lists the keys allowed there")
            raise UserError(f"{path}{line}: unknown key {where!r}: {allowed}") from None
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input")
        shown = f" (got {value!r})" if loc and not isinstance(value, (dict, list)) else ""
        raise UserError(f"{path}{line}: {where}: {message}{shown}") from None
