"""``agentspec serve``: local models over an OpenAI-compatible HTTP API (handler:
:func:`agentspec.cli.commands.serve.serve_command`, which runs the chosen ``--engine``).
"""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import POSITIVE, number


def add_parser(sub: Any) -> None:
    """Register ``serve``."""
    serve = sub.add_parser("serve", help="serve local models over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", action="append", required=True,
                       help="NAME_OR_PATH (repeat to serve several: they decode in parallel, the cores split among "
                            "the models stepping at once)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=number(int, ge=0, le=65535), default=8000, help="0 picks a free port")
    serve.add_argument("--max-tokens", type=POSITIVE, default=2048, help="completion tokens when a request sets none")
    serve.add_argument("--max-request-bytes", type=POSITIVE, default=None, metavar="BYTES",
                       help="the largest chat request body (default 4 MiB; embedded engine): a larger one is "
                            "refused 413 unread")
    serve.add_argument("--max-queued-requests", type=POSITIVE, default=None, metavar="N",
                       help="chat requests in progress at once, queued or decoding (default 32; embedded engine): "
                            "more are refused 429 with Retry-After, since each queued prompt holds its key/values")
    serve.add_argument("--decoder", choices=["greedy", "toolspec"], default="greedy",
                       help="toolspec: lossless tree-speculative decoding of greedy requests")
    serve.add_argument("--sidecar", nargs="?", const="smollm2-135m", default=None, metavar="MODEL",
                       help="with --decoder toolspec: a small model predicting each call in the background")
    serve.add_argument("--prefix-cache-gb", type=number(float, ge=0), default=None, metavar="GB",
                       help="key/values each model's prefix cache keeps (default 2, or a twelfth of the memory): "
                            "a long agent prompt that falls out of it is prefilled again, minutes on a CPU")
    serve.add_argument("--engine", choices=list(ENGINES), default="embedded",
                       help="embedded: fp32 torch (ToolSpec decoding); llama-cpp: llama.cpp on the GGUF (extra [llama])")
    serve.set_defaults(handler="agentspec.cli.commands.serve:serve_command")


ENGINES = ("embedded", "llama-cpp")
"""The ``--engine`` choices (:data:`agentspec.cli.commands.serve.ENGINES` serves each)."""
