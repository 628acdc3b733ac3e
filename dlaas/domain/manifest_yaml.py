"""A manifest's YAML read safely into plain data, and the paths its problems name.

Pure logic, no I/O: `load_yaml(text)` reads the YAML with no anchors or aliases (no
"billion laughs"), at most `MAX_DEPTH` levels deep and `MAX_MANIFEST_BYTES` long, and joins
folded commands as FfDL ran them; `check_shape(data)` refuses what no store, proto or Docker
call can carry. Every refusal is an `InvalidManifest` naming the field
(dlaas/domain/manifest.py validates the fields themselves).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from dlaas.domain.errors import InvalidManifest

MAX_MANIFEST_BYTES = 2**20
MAX_DEPTH = 32  # nesting of mappings and lists, anywhere in the manifest

# Fields named in problems as the manifest documents them (pydantic reports aliases).
_SHOWN_NAMES = {(None, "memory_mb"): "memory"} | {
    ("connection", alias): ours
    for alias, ours in (
        ("auth_url", "endpoint"),
        ("user_name", "access_key"),
        ("password", "secret_key"),
    )
}


def field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for i, item in enumerate(loc):
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("function-after[_elastic_range()]",):
            continue
        else:
            parent = None if i == 0 else loc[i - 1]
            name = _SHOWN_NAMES.get((parent, str(item)), str(item))
            parts.append(("." if parts else "") + name)
    return "".join(parts) or "(manifest)"


# A refusal lists at most this many problems: a huge bad manifest gets a short answer.
MAX_PROBLEMS = 20


def capped_problems(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], f"(manifest): and {len(problems) - MAX_PROBLEMS} more"]


_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad_text(s: str) -> str:
    """What is wrong with a string no store, proto or Docker call can carry, or ''."""
    if "\x00" in s:
        return "must not contain a NUL character"
    if _SURROGATE.search(s):  # e.g. a lone "\ud800" in JSON: not encodable as UTF-8
        return "must be valid Unicode text (it holds a lone surrogate)"
    return ""


def check_shape(data: Any) -> None:
    """Raise InvalidManifest unless `data` nests at most MAX_DEPTH levels and every
    string in it (keys too) is text every adapter can carry.

    Iterative on purpose: a deep document must not overflow the stack here either.
    """
    problems: list[str] = []
    stack: list[tuple[tuple[Any, ...], Any, int]] = [((), data, 1)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                problems.append(f"{field_path(path)}: nested deeper than {MAX_DEPTH} levels")
                continue
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and (bad := _bad_text(key)):
                    # The parent is named: the bad name itself is no help to read.
                    problems.append(f"{field_path(path)}: a field name {bad}")
                stack.append(((*path, key), item, depth + 1))
        elif isinstance(value, str) and (bad := _bad_text(value)):
            problems.append(f"{field_path(path)}: {bad}")
    if problems:
        raise InvalidManifest(capped_problems(problems))


class _ManifestLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors or aliases, and with bounded nesting.

    Aliases let a few hundred bytes expand to gigabytes ("billion laughs"), and the
    composer recurses once per level, so deep nesting would end in a RecursionError.
    A manifest has no use for either; both are refused where they appear.
    """

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def construct_scalar(self, node: Any) -> Any:
        value = super().construct_scalar(node)
        if node.style == ">" and isinstance(value, str):
            return join_folded(value)
        return value

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if event.anchor is not None:  # an anchor (&name) or an alias (*name)
            raise _refusal(event, "YAML anchors and aliases (&name, *name) are not allowed")
        if self._depth > MAX_DEPTH:  # containers nest MAX_DEPTH deep, +1 for the scalar
            raise _refusal(event, f"nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# A line break and the indentation of the line after it: a more-indented line of a
# folded (`>`) scalar, which YAML keeps on a line of its own.
_CONTINUATION = re.compile(r"\n[ \t]+")


def join_folded(value: str) -> str:
    """A folded (`command: >`) scalar as FfDL ran it: one line.

    YAML folds the lines of `>` into one, except lines indented deeper than the first, which
    keep their line break. FfDL's examples indent their continuation lines:

        command: >
          python train.py --data ${DATA_DIR}
            --epochs 20

    is "python train.py --data ${DATA_DIR}\n  --epochs 20\n" to YAML, and `sh -c` ran
    `--epochs 20` as a second command. FfDL ran it as one line, so an indented line here
    continues the one before it. A line break before an unindented line (a blank line in
    the YAML) is kept: the writer asked for it. Literal (`|`) scalars are left as written.
    """
    return _CONTINUATION.sub(" ", value).strip()


def _refusal(event: Any, what: str) -> InvalidManifest:
    mark = event.start_mark
    return InvalidManifest([f"(manifest): {what} (line {mark.line + 1}, column {mark.column + 1})"])


def load_yaml(text: str | bytes) -> dict[str, Any]:
    """The manifest's YAML as plain data, read as parse_manifest reads it (folded commands
    joined, no aliases, bounded); for code that rewrites a manifest and stores it again,
    so that the text stored means what the text submitted meant."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise InvalidManifest([f"(manifest): larger than {MAX_MANIFEST_BYTES // 2**20} MiB"])
    loader = None
    try:
        # The reader checks the characters as it is made: a control character raises here.
        loader = _ManifestLoader(text)
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "not valid YAML"
        raise InvalidManifest([f"(manifest): malformed YAML{where}: {problem}"]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise InvalidManifest(["(manifest): must be a YAML mapping of fields"])
    return data
