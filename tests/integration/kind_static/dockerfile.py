"""A small Dockerfile reader for the static checks (no Docker here, no linter that installs).

It knows the instruction grammar the three images use: comments, line continuations, JSON
(exec) or shell form arguments and multi-stage ``FROM ... AS name``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

FROM = re.compile(r"^(?P<image>\S+?)(\s+AS\s+(?P<alias>\S+))?$", re.IGNORECASE)
IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9][a-z0-9._/-]*)(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*))?"
    r"(@sha256:(?P<digest>[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM it belongs to

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form ENTRYPOINT/CMD, or None for the shell form."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) else None


@dataclass(frozen=True)
class BaseImage:
    repo: str
    tag: str | None
    digest: str | None


def instructions(path: Path) -> list[Instruction]:
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, args.strip(), stage))
    assert not pending, f"{path}: ends inside a continued line"
    return out


def global_args(steps: list[Instruction]) -> dict[str, str]:
    """``ARG NAME=default`` before the first ``FROM`` (what a ``FROM ${NAME}`` resolves to)."""
    defaults = {}
    for step in steps:
        if step.stage >= 0:
            break
        if step.keyword == "ARG":
            name, sep, default = step.args.partition("=")
            assert sep, f"ARG {name} before FROM has no default: the upstream build needs one"
            defaults[name.strip()] = default.strip()
    return defaults


def from_images(steps: list[Instruction]) -> list[str]:
    """The image reference of every ``FROM``, as written (``${BASE}`` unresolved)."""
    refs = []
    for step in steps:
        if step.keyword == "FROM":
            match = FROM.match(step.args)
            assert match, f"unreadable FROM {step.args!r}"
            refs.append(match["image"])
    return refs


def base_images(steps: list[Instruction]) -> list[BaseImage]:
    """External bases of every stage (``FROM <earlier stage>`` is not one), with ``${ARG}``
    resolved to the default the Dockerfile declares (the upstream pin)."""
    args = global_args(steps)
    aliases: set[str] = set()
    bases = []
    for step in steps:
        if step.keyword != "FROM":
            continue
        match = FROM.match(step.args)
        assert match, f"unreadable FROM {step.args!r}"
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], match["image"])
        if image not in aliases:
            parsed = IMAGE.match(image)
            assert parsed, f"unreadable image reference {image!r}"
            bases.append(BaseImage(parsed["repo"], parsed["tag"], parsed["digest"]))
        if match["alias"]:
            aliases.add(match["alias"])
    return bases


def final_stage(steps: list[Instruction]) -> list[Instruction]:
    last = max(step.stage for step in steps)
    return [step for step in steps if step.stage == last]


def ignore_rules(path: Path) -> list[tuple[bool, str]]:
    """``.dockerignore`` as (negated, pattern) in file order."""
    rules = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        rules.append((negated, line.lstrip("!").strip("/")))
    return rules


def _matches(pattern: str, name: str) -> bool:
    """Docker's matching: ``**`` spans directories, ``*`` stays within one; a pattern that
    matches a directory matches everything under it."""
    regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
    regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    parts = name.split("/")
    return any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1))


def ignored(rules: list[tuple[bool, str]], name: str) -> bool:
    """Whether the build context leaves ``name`` (repo-relative) out; the last match wins."""
    verdict = False
    for negated, pattern in rules:
        if _matches(pattern, name):
            verdict = not negated
    return verdict
