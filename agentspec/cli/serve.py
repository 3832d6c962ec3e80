"""``agentspec serve``: local models over an OpenAI-compatible HTTP API (handler: :func:`agentspec.serve.server.serve_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import POSITIVE, number


def add_parser(sub: Any) -> None:
    """Register ``serve``."""
    serve = sub.add_parser("serve", help="serve local models over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", action="append", required=True, help="NAME_OR_PATH (repeat to serve several)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=number(int, ge=0, le=65535), default=8000, help="0 picks a free port")
    serve.add_argument("--max-tokens", type=POSITIVE, default=2048, help="completion tokens when a request sets none")
    serve.add_argument("--decoder", choices=["greedy", "toolspec"], default="greedy",
                       help="toolspec: lossless tree-speculative decoding of greedy requests")
    serve.add_argument("--sidecar", nargs="?", const="smollm2-135m", default=None, metavar="MODEL",
                       help="with --decoder toolspec: a small model predicting each call in the background")
    serve.set_defaults(handler="agentspec.serve.server:serve_command")
