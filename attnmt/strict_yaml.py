"""YAML as configs read it: ``StrictLoader`` (a SafeLoader without anchors, aliases or merge
keys, YAML 1.2 floats), and the line of every key (``key_lines``) and of the first repeated one
(``duplicate_key``), so that config errors name the file and line."""

from __future__ import annotations

import re
from typing import Any

import yaml


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` for configs: no anchors, aliases or merge keys (an alias bomb expands
    exponentially, a recursive alias never ends, ``<<`` slips keys past the duplicate check), each
    refused with the line it is on; a plain ``1e-3`` is a float as in YAML 1.2 (1.1 reads a
    string), so a quoted "10" can stay a string and be refused where a number belongs."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed in a config", event.start_mark)
        return super().compose_node(parent, index)

    def flatten_mapping(self, node):
        for key, _ in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys (<<) are not allowed in a config", key.start_mark)
        super().flatten_mapping(node)

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # Python refuses to convert over 4300 digits
            raise yaml.constructor.ConstructorError(
                None, None, f"a number of {len(node.value)} digits is too large", node.start_mark) from None


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each (section, key) path of a YAML mapping to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = path + (str(key.value),)
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)

    try:
        root = yaml.compose(text, Loader=StrictLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def duplicate_key(text: str) -> tuple[str, int] | None:
    """The first key that a mapping of the YAML text repeats (safe_load silently keeps the last),
    as (dotted path, 1-based line)."""

    def walk(node: yaml.Node, path: tuple[str, ...]) -> tuple[str, int] | None:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                name = str(key.value)
                if name in seen:
                    return ".".join(path + (name,)), key.start_mark.line + 1
                seen.add(name)
                found = walk(value, path + (name,))
                if found:
                    return found
        return None

    try:
        root = yaml.compose(text, Loader=StrictLoader)
    except yaml.YAMLError:
        return None
    return walk(root, ()) if root is not None else None
