"""An OpenAI-compatible server over local weights (the embedded backend).

``agentspec serve --model NAME_OR_PATH`` runs it; :func:`create_app` builds the
ASGI app, :class:`Engine` generates tokens for one model,
:class:`ServerThread` runs the server in-process.  How tokens are chosen
(plain or ToolSpec decoding, the tool grammar) belongs to
:mod:`agentspec.decoding`; the engine drives it through its generation
protocol.  Needs the ``[hf]`` and
``[server]`` extras.
"""

from agentspec.decoding.generation import SamplingParams as SamplingParams
from agentspec.serve.app import create_app as create_app
from agentspec.serve.engine import Engine as Engine
from agentspec.serve.server import ServerThread as ServerThread
from agentspec.serve.server import load_engines as load_engines

__all__ = ["Engine", "SamplingParams", "ServerThread", "create_app", "load_engines"]
