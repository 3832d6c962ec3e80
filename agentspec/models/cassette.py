"""Record a run's model responses, and replay them: real decisions, repeatable figures, no model needed.

``agentspec run --record DIR`` stores every completion a model client receives in ``DIR/responses.jsonl``, one
JSON line each: the model (as the run named it: ``qwen2.5-coder-0.5b``, an endpoint URL), the request's digest,
and the completion.  ``--replay DIR`` answers the same requests from it without reaching any model, and raises
:class:`ReplayMiss` for a request it never saw: a replay never invents an answer.

The digest is the sha256 of the request body in canonical JSON, without the served model id (an embedded
server's id for a local model may differ between runs; the model is the key's other half) and without the
per-request id SPORK gives the authority's request for its hints.  A streamed request is stored as the
completion the stream assembled, and replayed as one text delta and that completion.  A recording run answers a
request it already recorded from the recording too (the modes of one run ask many of the same questions):
recordings assume that the same request gets the same answer, as greedy decoding gives.  Chain verification
(:mod:`agentspec.models.chain_verification`) records the same way: the endpoint's probe (``{"agentspec_probe": ...}``) and
each verification (``{"agentspec_verify_chain": path, ...}``), with the verdict as the answer; a replay of a
recording made without them verifies nothing (smc then commits as the paper does, and its summary says why)::

    cassette = Cassette(Path("runs/rec"), "record")
    async with ModelClient(config, cassette=cassette.for_model("qwen2.5-coder-0.5b")) as client: ...
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentspec.errors import ConfigError
from agentspec.types import canonical_json

FILE = "responses.jsonl"
VOLATILE = ("agentspec_request_id", "agentspec_predicted_calls", "priority")
"""``extra_body`` fields that do not change a request's answer: its name for SPORK's hints, the speculator's
predicted calls (draft hints: they change how fast the answer comes, not what it is, and depend on timing), and
its priority (when it runs, not what it says)."""


class ReplayMiss(ConfigError):
    """A replayed run asked a model something the recording never asked (a different run, or a changed prompt)."""


def request_digest(body: dict[str, Any]) -> str:
    """sha256 of what decides a request's answer: ``body`` without the model id, streaming and volatile fields."""
    kept = {k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}
    if isinstance(kept.get("extra_body"), dict):
        extra = {k: v for k, v in kept.pop("extra_body").items() if k not in VOLATILE}
        if extra:
            kept["extra_body"] = extra
    return hashlib.sha256(canonical_json(kept).encode()).hexdigest()


@dataclass
class Cassette:
    """The responses of one run, in ``folder``: written (``record``) or read (``replay``)."""

    folder: Path
    mode: Literal["record", "replay"]
    _answers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        path = self.folder / FILE
        if self.mode == "replay":
            if not path.is_file():
                raise ConfigError(f"--replay {self.folder}: no {FILE} there (record one with --record)")
            self._load(path)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            if path.is_file():
                self._load(path)  # recording into an earlier recording adds to it

    def _load(self, path: Path) -> None:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                self._answers[(record["model"], record["digest"])] = record["completion"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ConfigError(f"{path} line {number}: not a recorded response ({type(exc).__name__}: {exc})") from exc

    def for_model(self, model: str) -> ModelTape:
        """The part of the cassette one client uses: requests to ``model``."""
        return ModelTape(self, model)

    def answer(self, model: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The recorded completion of ``body``: replaying, :class:`ReplayMiss` when there is none; recording, None
        (the request goes to the model)."""
        digest = request_digest(body)
        found = self._answers.get((model, digest))
        if found is not None or self.mode == "record":
            return found
        known = sum(1 for m, _ in self._answers if m == model)
        raise ReplayMiss(
            f"--replay {self.folder}: no recorded response of {model!r} to this request (digest {digest[:12]}; "
            f"{known} recorded for that model). Replay the same run (same flags, data and code) that was recorded"
        )

    def store(self, model: str, body: dict[str, Any], completion: dict[str, Any]) -> None:
        key = (model, request_digest(body))
        if key in self._answers:
            return  # greedy answers repeat: the first is the record
        self._answers[key] = completion
        line = json.dumps({"model": model, "digest": key[1], "completion": completion}, separators=(",", ":"))
        with (self.folder / FILE).open("a", encoding="utf-8") as out:
            out.write(line + "\n")


@dataclass(frozen=True)
class ModelTape:
    """A cassette as one model's client sees it."""

    cassette: Cassette
    model: str

    @property
    def replaying(self) -> bool:
        return self.cassette.mode == "replay"

    def answer(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The recorded completion of ``body`` (see :meth:`Cassette.answer`): a recording run answers a repeat
        from the tape, as a replay will."""
        return self.cassette.answer(self.model, body)

    def store(self, body: dict[str, Any], completion: dict[str, Any]) -> None:
        self.cassette.store(self.model, body, completion)
