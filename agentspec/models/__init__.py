"""Model endpoints: one async client for any OpenAI-compatible server.

See :class:`ModelClient` (the seam), :class:`ModelConfig` (how to reach an
endpoint, ``ModelConfig.for_role`` for flags and environment variables) and
:class:`ChatResult` (what one turn returns).
"""

from agentspec.models.client import ChatStream as ChatStream
from agentspec.models.client import ModelClient as ModelClient
from agentspec.models.config import ModelConfig as ModelConfig
from agentspec.models.parsing import extract_tool_calls as extract_tool_calls
from agentspec.models.parsing import to_openai_messages as to_openai_messages
from agentspec.models.result import ChatResult as ChatResult
from agentspec.models.result import InvalidToolCall as InvalidToolCall
from agentspec.models.result import StreamEvent as StreamEvent
from agentspec.models.result import TextDelta as TextDelta
from agentspec.models.result import TokenLogprob as TokenLogprob
from agentspec.models.result import ToolCallDelta as ToolCallDelta
from agentspec.models.result import TopLogprob as TopLogprob
from agentspec.models.result import Usage as Usage

__all__ = [
    "ChatResult",
    "ChatStream",
    "InvalidToolCall",
    "ModelClient",
    "ModelConfig",
    "StreamEvent",
    "TextDelta",
    "TokenLogprob",
    "ToolCallDelta",
    "TopLogprob",
    "Usage",
    "extract_tool_calls",
    "to_openai_messages",
]
