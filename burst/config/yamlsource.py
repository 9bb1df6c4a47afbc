"""YAML documents that remember where every key and value stood in their file.

The configuration loader (load.py) validates the data; when a field is wrong it asks the
document for the file, line and column of that field, so admins get `FILE:LINE:COLUMN: path: why`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path as FilePath
from typing import Any

import yaml

Path = tuple[str | int, ...]

# Hostile files are refused before they cost anything: a file over the size of the largest request
# kube-apiserver accepts (3 MiB, its MaxRequestBodyBytes) is not read, and a file whose aliases
# would expand it past MAX_VALUES values (a "billion laughs" bomb: nine aliases of nine aliases...)
# is refused as soon as the count is passed, before the expansion is built.
MAX_BYTES = 3 * 1024 * 1024
MAX_VALUES = 100_000


@dataclass(frozen=True, slots=True)
class Position:
    file: str
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class YamlSyntaxError(ValueError):
    def __init__(self, position: Position, message: str) -> None:
        super().__init__(message)
        self.position = position
        self.message = message


@dataclass
class Document:
    file: str
    data: Any
    start: Position
    values: dict[Path, Position] = field(default_factory=dict)
    keys: dict[Path, Position] = field(default_factory=dict)

    def position(self, path: Path, *, key: bool = False) -> Position:
        """Where `path` stands (its key when `key`), or its nearest ancestor that exists."""
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            at_key, at_value = self.keys.get(prefix), self.values.get(prefix)
            # A block mapping or list starts on the line after its key: the key names it better.
            if at_key is not None and (key or at_value is None or at_value.line > at_key.line):
                return at_key
            if at_value is not None:
                return at_value
        return self.start


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads YAML floats as Decimal, so `12.40` stays exactly 12.40."""


def _decimal(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    text = str(loader.construct_scalar(node))
    try:
        return Decimal(text.replace("_", ""))
    except InvalidOperation:
        return loader.construct_yaml_float(node)


_Loader.add_constructor("tag:yaml.org,2002:float", _decimal)


def _pos(file: str, mark: Any) -> Position:
    return Position(file, mark.line + 1, mark.column + 1)


def read(file: FilePath) -> str:
    """A YAML file's text; YamlSyntaxError if it is too large or unreadable."""
    where = Position(str(file), 1, 1)
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise YamlSyntaxError(
                where, f"{size / 2**20:.1f} MiB is over the {MAX_BYTES // 2**20} MiB burst reads"
            )
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlSyntaxError(where, f"cannot read: {exc.__class__.__name__}: {exc}") from None


def _build(loader: _Loader, doc: Document, node: yaml.Node, path: Path, count: list[int]) -> Any:
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise YamlSyntaxError(
            _pos(doc.file, node.start_mark),
            f"expands to over {MAX_VALUES:,} values (aliases repeat what they name): refused",
        )
    doc.values[path] = _pos(doc.file, node.start_mark)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<:` merge keys
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str | int):
                raise YamlSyntaxError(
                    _pos(doc.file, key_node.start_mark), "mapping keys must be strings"
                )
            if key in out:
                raise YamlSyntaxError(_pos(doc.file, key_node.start_mark), f"duplicate key {key!r}")
            doc.keys[(*path, key)] = _pos(doc.file, key_node.start_mark)
            out[key] = _build(loader, doc, value_node, (*path, key), count)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, doc, item, (*path, i), count) for i, item in enumerate(node.value)]
    return loader.construct_object(node)


def load_documents(text: str, file: str) -> Iterator[Document]:
    """Every non-empty document of a YAML stream; raises YamlSyntaxError with its position."""
    loader = _Loader(text)
    count = [0]  # values built in the whole file, aliases counted each time they are used
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            doc = Document(file, None, _pos(file, node.start_mark))
            doc.data = _build(loader, doc, node, (), count)
            yield doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = _pos(file, mark) if mark else Position(file, 1, 1)
        raise YamlSyntaxError(position, f"YAML syntax: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(Position(file, 1, 1), f"YAML: {exc}") from None
    finally:
        loader.dispose()
