"""The carrier's records (agent side of tau2 telecom), as loaded from ``db.toml``.

Every record rejects unknown fields when it is built, but attribute assignment
afterwards is not validated: tools mutate records in place, as the reference
does, so they must assign the proper enum members themselves.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from enum import Enum
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationError

from agentspec.errors import DataError


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A date and time written as the reference's replies write it, "2025-01-15 10:30:00" (a space, not ISO's "T").
DateTime = Annotated[dt.datetime, PlainSerializer(str, return_type=str, when_used="json")]


class AccountStatus(str, Enum):
    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_VERIFICATION = "Pending Verification"
    CLOSED = "Closed"


class PaymentMethodType(str, Enum):
    CREDIT_CARD = "Credit Card"
    DEBIT_CARD = "Debit Card"
    PAYPAL = "PayPal"


class LineStatus(str, Enum):
    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    PENDING_ACTIVATION = "Pending Activation"
    CLOSED = "Closed"


class BillStatus(str, Enum):
    DRAFT = "Draft"
    ISSUED = "Issued"
    AWAITING_PAYMENT = "Awaiting Payment"
    PAID = "Paid"
    OVERDUE = "Overdue"
    DISPUTED = "Disputed"


class DeviceType(str, Enum):
    PHONE = "phone"
    ROUTER = "router"
    TABLET = "tablet"
    WATCH = "watch"
    OTHER = "other"


class Plan(_Record):
    plan_id: str
    name: str
    data_limit_gb: float
    price_per_month: float
    data_refueling_price_per_gb: float


class Address(_Record):
    street: str
    city: str
    state: str
    zip_code: str


class PaymentMethod(_Record):
    method_type: PaymentMethodType
    account_number_last_4: str
    expiration_date: str  # "MM/YYYY", kept as text: tools only report it


class Customer(_Record):
    customer_id: str
    full_name: str
    date_of_birth: str  # "YYYY-MM-DD"; compared as text by get_customer_by_name
    email: str
    phone_number: str
    address: Address
    account_status: AccountStatus = AccountStatus.PENDING_VERIFICATION
    payment_methods: list[PaymentMethod] = Field(default_factory=list)
    line_ids: list[str] = Field(default_factory=list)
    bill_ids: list[str] = Field(default_factory=list)
    created_at: DateTime = dt.datetime(2025, 1, 1)
    last_extension_date: dt.date | None = None
    goodwill_credit_used_this_year: float = 0.0


class Line(_Record):
    line_id: str
    phone_number: str
    status: LineStatus = LineStatus.PENDING_ACTIVATION
    plan_id: str
    device_id: str | None = None
    data_used_gb: float = 0.0
    data_refueling_gb: float = 0.0
    roaming_enabled: bool = False
    contract_end_date: dt.date | None = None
    last_plan_change_date: dt.date | None = None
    last_sim_replacement_date: dt.date | None = None
    suspension_start_date: dt.date | None = None


class LineItem(_Record):
    description: str
    amount: float
    date: dt.date
    item_type: str


class Bill(_Record):
    bill_id: str
    customer_id: str
    period_start: dt.date
    period_end: dt.date
    issue_date: dt.date
    total_due: float
    due_date: dt.date
    line_items: list[LineItem] = Field(default_factory=list)
    status: BillStatus = BillStatus.DRAFT


class Device(_Record):
    device_id: str
    device_type: DeviceType
    model: str
    imei: str | None = None
    is_esim_capable: bool
    activated: bool = False
    activation_date: DateTime | None = None
    last_esim_transfer_date: DateTime | None = None


class CarrierDB(_Record):
    """The whole carrier store.  Lookups scan in list order and return the first match."""

    plans: list[Plan] = Field(default_factory=list)
    customers: list[Customer] = Field(default_factory=list)
    lines: list[Line] = Field(default_factory=list)
    bills: list[Bill] = Field(default_factory=list)
    devices: list[Device] = Field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> CarrierDB:
        """Read a ``db.toml``; a missing or malformed file is a :class:`DataError`."""
        try:
            with open(path, "rb") as handle:
                raw = tomllib.load(handle)
            return cls.model_validate(raw)
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise DataError(f"cannot load carrier database {path}: {exc}") from exc

    def customer(self, customer_id: str) -> Customer | None:
        return next((c for c in self.customers if c.customer_id == customer_id), None)

    def line(self, line_id: str) -> Line | None:
        return next((line for line in self.lines if line.line_id == line_id), None)

    def bill(self, bill_id: str) -> Bill | None:
        return next((b for b in self.bills if b.bill_id == bill_id), None)

    def plan(self, plan_id: str) -> Plan | None:
        return next((p for p in self.plans if p.plan_id == plan_id), None)

    def device(self, device_id: str) -> Device | None:
        return next((d for d in self.devices if d.device_id == device_id), None)

    def line_by_phone(self, phone_number: str) -> Line | None:
        return next((line for line in self.lines if line.phone_number == phone_number), None)

    def customer_by_phone(self, phone_number: str) -> Customer | None:
        """The first customer whose primary number, or one of whose lines' numbers, matches.

        Customers are scanned in order and each one is checked on both counts
        before moving on, so an earlier customer's line beats a later
        customer's primary number.
        """
        for customer in self.customers:
            if customer.phone_number == phone_number:
                return customer
            for line_id in customer.line_ids:
                line = self.line(line_id)
                if line is not None and line.phone_number == phone_number:
                    return customer
        return None
