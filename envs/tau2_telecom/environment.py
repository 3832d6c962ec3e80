"""The telecom environment: carrier DB and phone, their toolkits, routing and sync.

Normal mode: the agent (``assistant``) owns the 13 carrier tools, the user
owns the 30 phone tools.  Solo mode: the agent owns both (routed by tool
name) and the user owns none.  After every successful call, and whenever the
evaluator asks, :meth:`TelecomEnvironment.sync` copies line status,
roaming, data-limit and payment-request facts between carrier and phone.
"""

from __future__ import annotations

import hashlib
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self

from agentspec.env import StateSnapshot
from agentspec.errors import EnvError, ToolNotFound
from agentspec.tools import Toolkit
from agentspec.types import Effect, Observation, Requestor, ToolCall, ToolSpec, canonical_json
from envs.tau2_telecom.data_model import BillStatus, CarrierDB, LineStatus
from envs.tau2_telecom.tools import CarrierTools
from envs.tau2_telecom.user_data_model import PaymentRequest, PhoneDB
from envs.tau2_telecom.user_tools import PhoneTools

EnvType = Literal["user", "assistant"]


@lru_cache(maxsize=8)
def _template(telecom_dir: Path) -> bytes:
    """Parse both TOML files once per process; environments start from copies."""
    carrier = CarrierDB.load(telecom_dir / "db.toml")
    phone = PhoneDB.load(telecom_dir / "user_db.toml")
    return pickle.dumps((carrier, phone), protocol=pickle.HIGHEST_PROTOCOL)


class TelecomEnvironment:
    """Both sides of the telecom domain; implements :class:`agentspec.env.Environment`."""

    def __init__(self, carrier: CarrierDB, phone: PhoneDB, *, solo: bool = False) -> None:
        self.carrier = CarrierTools(carrier)
        self.phone = PhoneTools(phone)
        self.solo = solo
        self.sync()

    @classmethod
    def from_dir(cls, telecom_dir: Path, *, solo: bool = False) -> TelecomEnvironment:
        carrier, phone = pickle.loads(_template(Path(telecom_dir).resolve()))
        return cls(carrier, phone, solo=solo)

    # --- tools -----------------------------------------------------------------

    def toolkit(self, env_type: EnvType) -> Toolkit:
        return self.phone if env_type == "user" else self.carrier

    def tool_specs(self, requestor: Requestor = "assistant") -> list[ToolSpec]:
        if self.solo:
            return [] if requestor == "user" else self.carrier.specs() + self.phone.specs()
        return self.toolkit(requestor).specs()

    def owner(self, name: str, requestor: Requestor) -> Toolkit:
        """The toolkit that runs ``name`` for ``requestor``; raises ToolNotFound otherwise."""
        if self.solo:
            if requestor == "assistant":
                for kit in (self.phone, self.carrier):
                    if kit.has_tool(name):
                        return kit
        else:
            kit = self.toolkit(requestor)
            if kit.has_tool(name):
                return kit
        raise ToolNotFound(f"Tool '{name}' not found.")

    def effect(self, name: str) -> Effect:
        for kit in (self.carrier, self.phone):
            if kit.has_tool(name):
                return kit.effect(name)
        return Effect.MUTATING

    def execute(self, call: ToolCall, requestor: Requestor = "assistant") -> Observation:
        """Run one call for ``requestor``; sync after a success (a failed call changes nothing)."""
        try:
            kit = self.owner(call.name, requestor)
        except ToolNotFound as exc:
            return Observation(call_id=call.id, name=call.name, content=f"Error: {exc}", error=True, requestor=requestor)
        observation = kit.run(call, requestor)
        if not observation.error:
            self.sync()
        return observation

    def run_function(self, env_type: EnvType, func_name: str, arguments: dict[str, Any]) -> Any:
        """Call an initialisation or assertion function by name on one side, then sync."""
        result = self.toolkit(env_type).call_function(func_name, arguments)
        self.sync()
        return result

    # --- sync ------------------------------------------------------------------

    def sync(self) -> None:
        """Copy carrier facts to the phone and payments back (idempotent; no network search)."""
        phone = self.phone.db
        number = phone.surroundings.phone_number
        if number is None:
            return
        db = self.carrier.db
        line = db.line_by_phone(number)
        if line is None:
            raise EnvError(f"sync: no line has the phone number {number}")
        plan = db.plan(line.plan_id)
        if plan is None:
            raise EnvError(f"sync: line {line.line_id} has unknown plan {line.plan_id}")
        phone.surroundings.line_active = line.status == LineStatus.ACTIVE
        phone.surroundings.roaming_allowed = line.roaming_enabled
        phone.surroundings.mobile_data_usage_exceeded = line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb
        self._sync_payments(number)

    def _sync_payments(self, number: str) -> None:
        phone, db = self.phone.db, self.carrier.db
        request = phone.surroundings.payment_request
        if request is not None and request.paid:
            bill = db.bill(request.bill_id)
            if bill is not None:
                bill.status = BillStatus.PAID
            phone.surroundings.payment_request = None
        if phone.surroundings.payment_request is not None:
            return  # an unpaid request is never replaced
        customer = db.customer_by_phone(number)
        if customer is None:
            return
        for bill_id in customer.bill_ids:
            bill = db.bill(bill_id)
            if bill is not None and bill.status == BillStatus.AWAITING_PAYMENT:
                phone.surroundings.payment_request = PaymentRequest(bill_id=bill.bill_id, amount_due=bill.total_due)
                return

    # --- snapshots -------------------------------------------------------------

    def snapshot(self) -> StateSnapshot:
        return StateSnapshot.of((self.carrier.db, self.phone.db), canonical=_canonical)

    def restore(self, snapshot: StateSnapshot) -> Self:
        carrier, phone = snapshot.load()
        return type(self)(carrier, phone, solo=self.solo)

    def dump_state(self) -> dict[str, Any]:
        """Both databases as JSON (run-log checkpoints: data, never pickle)."""
        return {"carrier": self.carrier.db.model_dump(mode="json"), "phone": self.phone.db.model_dump(mode="json")}

    def load_state(self, state: Any) -> Self:
        """A new environment in a :meth:`dump_state` state; pydantic refuses anything else."""
        if not isinstance(state, dict) or set(state) != {"carrier", "phone"}:
            raise EnvError("a telecom state is an object with exactly 'carrier' and 'phone'")
        carrier, phone = CarrierDB.model_validate(state["carrier"]), PhoneDB.model_validate(state["phone"])
        return type(self)(carrier, phone, solo=self.solo)

    def state_digest(self) -> str:
        return hashlib.sha256(_canonical((self.carrier.db, self.phone.db)).encode()).hexdigest()


def _canonical(state: tuple[CarrierDB, PhoneDB]) -> str:
    return canonical_json([db.model_dump(mode="json") for db in state])
