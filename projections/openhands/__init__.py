"""OpenHands ⇄ convdb: the pure mapping behind the webhook routes, `import` and `export`.

What maps 1:1 (OpenHands kind → convdb event): SystemPromptEvent → SystemPromptEvent (prompt
text, tool names), MessageEvent → MessageEvent (role, text, llm_response_id), ActionEvent →
ActionEvent (tool, call id, arguments as canonical JSON, thought text, llm_response_id,
risk), ObservationEvent → ObservationEvent (action id, tool, call id, text, is_error),
UserRejectObservation → UserRejectEvent, AgentErrorEvent → AgentErrorEvent, Condensation →
CondensationEvent, PauseEvent / InterruptEvent → PauseEvent, ConversationStateUpdateEvent of
`execution_status` → StateUpdateEvent (annotation). Every event keeps id, timestamp, source
and parent.

What is carried (exported back unchanged): every field `rebuild` cannot produce, as a patch in
`extension` (typed actions and observations, tool specs, thinking blocks, raw tool-call
arguments, classification, ...); kinds convdb has no type for, as `ExternalEvent`; and the
conversation-level records (ConversationInfo posts, imported base_state.json and meta.json) as
`ExternalEvent` annotations with the record in `extension`.

What is derived (never exported; marked `derived_from` in `extension`): operation id, intent
hash and effect class of actions (from the tools' MCP annotations), execution status and
active leaf from state snapshots, `LLMUsageEvent`s from statistics, titles from
ConversationInfo / meta.json.
"""

from convdb.projections.openhands._check import RECORD_KINDS, check_events, check_record
from convdb.projections.openhands._export import OpenHandsConversation, export
from convdb.projections.openhands._fields import conversation_key
from convdb.projections.openhands._ingest import Received, ingest
from convdb.projections.openhands._kinds import KNOWN_KINDS, ORIGIN
from convdb.projections.openhands._state import OpenHandsState, initial, marks_of, resume

__all__ = [
    "KNOWN_KINDS",
    "ORIGIN",
    "RECORD_KINDS",
    "OpenHandsConversation",
    "OpenHandsState",
    "Received",
    "check_events",
    "check_record",
    "conversation_key",
    "export",
    "ingest",
    "initial",
    "marks_of",
    "resume",
]
