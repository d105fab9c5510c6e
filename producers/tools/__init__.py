"""Tools with effect classes, and the standard tool set."""

from __future__ import annotations

from pathlib import Path

from convdb.producers.tools.base import Operation, Tool, ToolResult, canonical_json, find_tool, intent_hash
from convdb.producers.tools.files import ReadFileTool, WriteFileTool
from convdb.producers.tools.tracker import CreateIssueTool, NotifyTool


def standard_tools(
    workspace: Path, tracker_url: str | None = None, timeout_s: float = 10.0
) -> tuple[Tool, ...]:
    """read_file and write_file on the workspace, plus create_issue and notify with a tracker."""
    tools: list[Tool] = [ReadFileTool(workspace=workspace), WriteFileTool(workspace=workspace)]
    if tracker_url:
        url = tracker_url.rstrip("/")
        tools += [
            CreateIssueTool(base_url=url, timeout_s=timeout_s),
            NotifyTool(base_url=url, timeout_s=timeout_s),
        ]
    return tuple(tools)


__all__ = [
    "CreateIssueTool",
    "NotifyTool",
    "Operation",
    "ReadFileTool",
    "Tool",
    "ToolResult",
    "WriteFileTool",
    "canonical_json",
    "find_tool",
    "intent_hash",
    "standard_tools",
]
