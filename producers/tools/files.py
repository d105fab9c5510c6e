"""Workspace file tools: read (read-only) and write (idempotent: set-to-state)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from convdb.producers.errors import EffectError
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.schemas._types import EffectClass


class ReadArgs(ToolArgs):
    """Arguments of read_file."""

    path: str = Field(description="File path relative to the workspace.")


class WriteArgs(ToolArgs):
    """Arguments of write_file."""

    path: str = Field(description="File path relative to the workspace.")
    content: str = Field(description="The whole new content of the file.")


def resolve_in(workspace: Path, path: str) -> Path:
    """`path` inside the workspace; raises `EffectError` for a path that escapes it."""
    root = workspace.resolve()
    full = (root / path).resolve()
    if root != full and root not in full.parents:
        raise EffectError(f"path {path!r} is outside the workspace")
    return full


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ReadFileTool(Tool):
    """Reads a text file of the workspace."""

    name: ClassVar[str] = "read_file"
    description: ClassVar[str] = "Read a text file from the workspace."
    effect_class: ClassVar[EffectClass] = "read_only"
    Args: ClassVar[type[ToolArgs]] = ReadArgs
    workspace: Path

    def execute(self, operation: Operation) -> ToolResult:
        """Return the file's text, or an error result when it is missing."""
        path = resolve_in(self.workspace, operation.arguments["path"])
        try:
            return ToolResult(path.read_text())
        except OSError as exc:
            raise EffectError(f"cannot read {operation.arguments['path']}: {exc.strerror}") from exc


class WriteFileTool(Tool):
    """Writes a whole file: doing it twice leaves the same state as doing it once."""

    name: ClassVar[str] = "write_file"
    description: ClassVar[str] = "Write (create or replace) a text file in the workspace."
    effect_class: ClassVar[EffectClass] = "idempotent"
    Args: ClassVar[type[ToolArgs]] = WriteArgs
    supports_lookup: ClassVar[bool] = True
    workspace: Path

    def target(self, arguments: dict[str, Any]) -> str | None:
        """The file written."""
        return f"file:{arguments.get('path', '')}"

    def execute(self, operation: Operation) -> ToolResult:
        """Write atomically (temp file + rename) so a crash never leaves half a file."""
        args = operation.arguments
        path = resolve_in(self.workspace, args["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(args["content"])
        os.replace(tmp, path)
        return self._result(args)

    def lookup(self, operation: Operation) -> ToolResult | None:
        """Done when the file already holds exactly the intended content."""
        args = operation.arguments
        path = resolve_in(self.workspace, args["path"])
        try:
            current = path.read_text()
        except FileNotFoundError:
            return None
        return self._result(args) if current == args["content"] else None

    @staticmethod
    def _result(args: dict[str, Any]) -> ToolResult:
        content = args["content"]
        return ToolResult(
            f"wrote {len(content)} characters to {args['path']}",
            provider_receipt=f"sha256:{_digest(content)}",
        )
