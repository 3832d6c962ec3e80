"""How to reach one OpenAI-compatible model endpoint.

A :class:`ModelConfig` is a plain value; :meth:`ModelConfig.for_role` builds
one for a role of the benchmark ("agent", "user", "speculator", ...) from a
command-line ``URL_OR_NAME`` and ``AGENTSPEC_<ROLE>_*`` environment variables::

    >>> env = {"AGENTSPEC_AGENT_BASE_URL": "http://gpu:8000/v1"}
    >>> cfg = ModelConfig.for_role("agent", "qwen3-8b", env=env)
    >>> (cfg.base_url, cfg.model)
    ('http://gpu:8000/v1', 'qwen3-8b')
    >>> ModelConfig.for_role("user", "http://gpu:8001/v1#llama", env={}).model
    'llama'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentspec.errors import ConfigError, first_problem

__all__ = ["ModelConfig"]

_SCHEMES = ("http://", "https://")


class ModelConfig(BaseModel):
    """Endpoint, model and request defaults for one :class:`~agentspec.models.ModelClient`.

    ``model=""`` means "discover it": the client asks ``GET /models`` and uses
    the only model served there.  ``timeout_s`` bounds each attempt; failed
    attempts (connection errors, timeouts, 429, 5xx) are retried
    ``max_retries`` times with exponential backoff from ``backoff_s`` up to
    ``backoff_max_s`` seconds, with jitter.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str = ""
    api_key: str = "EMPTY"
    timeout_s: float = Field(default=120, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=8, ge=0)
    temperature: float | None = 0.0
    max_tokens: int | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    parse_text_tool_calls: bool = True
    """Look for tool calls written as text when the endpoint returned none natively."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(_SCHEMES):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        _check_url(value)
        return value.rstrip("/")

    @classmethod
    def for_role(
        cls,
        role: str,
        spec: str | None = None,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> ModelConfig:
        """Configure the model of ``role`` from a ``URL_OR_NAME`` flag and the environment.

        ``spec`` (else ``AGENTSPEC_<ROLE>_MODEL``) is one of

        * ``http://host:port/v1``: the endpoint; the model is discovered later;
        * ``http://host:port/v1#MODEL``: endpoint and model;
        * ``MODEL``: a model name; the endpoint comes from ``base_url``, else
          ``AGENTSPEC_<ROLE>_BASE_URL``, else ``OPENAI_BASE_URL``.

        The API key comes from ``AGENTSPEC_<ROLE>_API_KEY``, else
        ``OPENAI_API_KEY``, else ``"EMPTY"``; ``AGENTSPEC_<ROLE>_TIMEOUT`` sets
        ``timeout_s``.  ``overrides`` (any other field) win over everything.

        Raises :class:`~agentspec.errors.ConfigError` naming the flag and the
        variable to set when no endpoint is given, or when a value is invalid.
        """
        env = os.environ if env is None else env  # read here: as a default it would print the environment in help()
        prefix = "AGENTSPEC_" + role.upper().replace("-", "_") + "_"
        spec = spec or env.get(prefix + "MODEL") or None
        url, model = _split_spec(spec)
        url = url or base_url or env.get(prefix + "BASE_URL") or env.get("OPENAI_BASE_URL")
        if not url:
            raise ConfigError(
                f"no endpoint for the {role} model: pass --{role}-model URL[#MODEL] "
                f"(or --{role}-base-url URL), or set {prefix}BASE_URL or OPENAI_BASE_URL"
            )
        fields: dict[str, Any] = {"base_url": url, "model": model}
        fields["api_key"] = env.get(prefix + "API_KEY") or env.get("OPENAI_API_KEY") or "EMPTY"
        if env.get(prefix + "TIMEOUT"):
            fields["timeout_s"] = _parse_timeout(prefix + "TIMEOUT", env[prefix + "TIMEOUT"])
        fields.update(overrides)
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ConfigError(f"invalid configuration for the {role} model: {first_problem(exc, 'value')}") from exc


def _check_url(value: str) -> None:
    """Reject a URL the HTTP client would choke on later (``http://[::1``: httpx.InvalidURL mid-run)."""
    import httpx

    try:
        url = httpx.URL(value)
        urlsplit(value).port  # noqa: B018 - raises ValueError for a port out of range
    except (httpx.InvalidURL, ValueError) as exc:
        raise ValueError(f"base_url {value!r} is not a valid URL: {exc}") from None
    if not url.host:
        raise ValueError(f"base_url {value!r} names no host")


def _split_spec(spec: str | None) -> tuple[str | None, str]:
    """``URL``, ``URL#MODEL`` or ``MODEL`` -> (url or None, model or "")."""
    if not spec:
        return None, ""
    spec = spec.strip()
    if spec.startswith(_SCHEMES):
        url, _, model = spec.partition("#")
        return url, model.strip()
    return None, spec


def _parse_timeout(name: str, value: str) -> float:
    try:
        timeout = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    if timeout <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return timeout
