"""The demo's fan-out act: one agent hands three tasks to sub-agents, each a conversation of its own on
another partition, and folds their results back into one observation.

Played while the crash act's second runner still serves every partition; read back through the
query API (the parent's view, its children's route) as the console shows it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from convdb.infra.errors import InfraError
from convdb.infra.partitioner import partition_for

SERVICES = ("billing", "search", "mail")
FAN_OUT_TASK = "\n".join(
    [
        "Check the release notes of three services at once, one sub-agent each.",
        "!delegate "
        + json.dumps(
            {"tasks": [{"message": f"Check the release notes of the {name} service."} for name in SERVICES]}
        ),
    ]
)
"""The parent's task: one `delegate` call with three children (the scripted model plays it)."""


@dataclass
class DelegationStory:
    """The fan-out act as the read side shows it."""

    parent: str
    parent_status: str
    children: list[dict[str, Any]] = field(default_factory=list)
    """Per child: conversation_id, execution_status, partition, summary (from the parent's observation)."""
    results_in_observation: int = 0
    total_tokens: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The act as a JSON-able dict (the `--json` summary's `delegation`)."""
        return {
            "parent": self.parent,
            "parent_status": self.parent_status,
            "children": len(self.children),
            "children_finished": sum(1 for c in self.children if c["execution_status"] == "finished"),
            "partitions": len({c["partition"] for c in self.children}),
            "results_in_observation": self.results_in_observation,
            "total_tokens": self.total_tokens,
            "seconds": round(self.seconds, 2),
        }


def play(api: httpx.Client, partitions: int, timeout: float = 60) -> DelegationStory:
    """Post the parent's task (agent `delegator`) and wait until the read side shows the parent and
    its three children stopped; raises InfraError if they do not within `timeout`."""
    started = time.monotonic()
    parent = f"demo-fanout-{uuid.uuid4().hex[:8]}"
    posted = api.post(
        f"/conversations/{parent}/messages", json={"content": FAN_OUT_TASK, "agent": "delegator"}
    )
    posted.raise_for_status()
    deadline = started + timeout
    while True:
        summary = api.get(f"/conversations/{parent}")
        status = summary.json()["execution_status"] if summary.status_code == 200 else None
        kids = api.get(f"/conversations/{parent}/children")
        children = kids.json()["children"] if kids.status_code == 200 else []
        stopped = len(children) == len(SERVICES) and all(
            c["execution_status"] == "finished" for c in children
        )
        if status == "finished" and stopped:
            break
        if time.monotonic() > deadline:
            raise InfraError(f"the fan-out act did not end: parent {status}, children {children}")
        time.sleep(0.2)
    observed = _observation(api, parent)
    results = {c["conversation_id"]: c for c in observed.get("children", [])}
    story = DelegationStory(parent, status, total_tokens=kids.json()["total"]["tokens"])
    for child in children:
        cid = child["conversation_id"]
        result = results.get(cid, {})
        story.children.append(
            {
                "conversation_id": cid,
                "execution_status": child["execution_status"],
                "partition": partition_for(cid, partitions),
                "summary": result.get("summary", ""),
            }
        )
    story.results_in_observation = sum(
        1 for r in results.values() if r.get("status") == "finished" and r.get("summary")
    )
    story.seconds = time.monotonic() - started
    return story


def _observation(api: httpx.Client, parent: str) -> dict[str, Any]:
    """The parent's observation of its `delegate` call, parsed."""
    events = api.get(f"/conversations/{parent}/view").json()["events"]
    for event in events:
        if event["kind"] == "observation" and event.get("tool_name") == "delegate":
            parsed: dict[str, Any] = json.loads(event["content"])
            return parsed
    return {}


def tell(out: Any, story: DelegationStory, console_url: str) -> None:
    """Print the act with the tree, each child linked to its console page (`out`: a rich Console)."""
    out.print("\n[bold]4. One agent hands three tasks to sub-agents[/bold] (fan-out, fan-in)")
    out.print(
        f"  {story.parent} ({story.parent_status}) started {len(story.children)} child conversations on "
        f"{len({c['partition'] for c in story.children})} partitions and read their "
        f"{story.results_in_observation} results back in one observation ({story.total_tokens:,} tokens "
        "in the whole tree):",
        highlight=False,
    )
    out.print(f"  {console_url}/console/conversations/{story.parent}", highlight=False)
    for i, child in enumerate(story.children):
        last = i == len(story.children) - 1
        cid = child["conversation_id"]
        out.print(
            f"  {'└─' if last else '├─'} {cid} (partition {child['partition']}): {child['execution_status']}"
            f' · "{child["summary"][:60]}"\n'
            f"  {'  ' if last else '│ '}   {console_url}/console/conversations/{cid}",
            highlight=False,
        )
