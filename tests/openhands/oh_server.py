"""The agent-server's ConversationService, in process, streaming its webhooks to a URL (see oh_driver)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openhands.agent_server.config import WebhookSpec
from openhands.agent_server.conversation_service import ConversationService
from openhands.agent_server.models import UpdateConversationRequest
from openhands.sdk import LLM, Agent, Tool
from openhands.sdk.conversation.request import SendMessageRequest, StartConversationRequest
from openhands.sdk.llm import TextContent
from openhands.sdk.workspace import LocalWorkspace

STOPPED = ("finished", "error", "stuck", "paused")


async def serve(spec: dict[str, Any], script: deque[Any], reply: Callable[..., Any]) -> dict[str, Any]:
    """Run one scripted conversation with tool calls to its end, set its title, close the service.

    Closing flushes the webhook queue, so every event has been posted (and answered 2xx) on return.
    """
    root = Path(spec["dir"])
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "a.txt").write_text("a\n")
    webhook = WebhookSpec(
        base_url=spec["url"],
        headers=spec["headers"],
        event_buffer_size=spec.get("buffer", 5),
        # Full batches go out from the publishing task; a timer flush can be cancelled mid-retry
        # when the service closes (the agent-server then drops that batch), which would hide the
        # retry this test forces.
        flush_delay=30.0,
        num_retries=5,
        retry_delay=0,
    )
    script.extend(
        [
            reply(
                "Looking at the workspace.",
                [
                    ("glob", {"pattern": "*.txt"}),
                    (
                        "task_tracker",
                        {"command": "plan", "task_list": [{"title": "check", "status": "todo"}]},
                    ),
                ],
            ),
            reply(None, [("glob", {"pattern": "**/*.md"})]),
            reply(None, [("finish", {"message": "Found a.txt."})]),
        ]
    )
    agent = Agent(
        llm=LLM(model="gpt-4o-mini", api_key="sk-offline", usage_id="agent"),
        tools=[Tool(name="glob"), Tool(name="task_tracker")],
    )
    request = StartConversationRequest(
        agent=agent,
        workspace=LocalWorkspace(working_dir=str(workspace)),
        initial_message=SendMessageRequest(
            content=[TextContent(text="Which text files are there?")], run=True
        ),
        autotitle=False,
    )
    service = ConversationService(
        conversations_dir=root / "conversations",
        webhook_specs=[webhook],
        session_api_key="agent-server-own-key",
    )
    async with service:
        info, _ = await service.start_conversation(request)
        deadline = time.monotonic() + 120
        while (await service.get_conversation(info.id)).execution_status.value not in STOPPED:
            if time.monotonic() > deadline:
                raise TimeoutError("the scripted conversation did not stop")
            await asyncio.sleep(0.05)
        await service.update_conversation(info.id, UpdateConversationRequest(title=spec["title"]))
        final = await service.get_conversation(info.id)
    return {
        "id": str(info.id),
        "dir": str(root / "conversations" / info.id.hex),
        "execution_status": final.execution_status.value,
        "title": final.title,
    }
