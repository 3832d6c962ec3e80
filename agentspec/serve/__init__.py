"""An OpenAI-compatible HTTP server over local weights (the embedded backend).

``agentspec serve --model NAME_OR_PATH`` runs it; :func:`create_app` builds the
ASGI app over one :class:`~agentspec.engine.Engine` per model,
:class:`ServerThread` runs the server in-process.  Generating tokens belongs to
the local engine (:mod:`agentspec.engine`: model, KV cache, generation,
batching, priority); how tokens are chosen with ToolSpec decoding belongs to
:mod:`agentspec.decoding`, which the engine drives through its generation
protocol.  Needs the ``[hf]`` and ``[server]`` extras.
"""

from agentspec.serve.app import create_app as create_app
from agentspec.serve.server import ServerThread as ServerThread
from agentspec.serve.server import load_engines as load_engines

__all__ = ["ServerThread", "create_app", "load_engines"]
