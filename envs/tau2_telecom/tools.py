"""The carrier (agent-side) toolkit of tau2 telecom: 13 tools plus task helpers.

Arguments arrive exactly as the model wrote them (nothing is coerced), so a
wrongly typed value fails only where Python itself would trip over it.  Every
check happens before any write, so a call that raises leaves the database
untouched; evaluation replays depend on that.
"""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
from collections.abc import Callable
from typing import Any

from agentspec.errors import ToolError
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect
from envs.tau2_telecom.clock import TODAY
from envs.tau2_telecom.data_model import (
    Bill,
    BillStatus,
    CarrierDB,
    Customer,
    Device,
    Line,
    LineItem,
    LineStatus,
    Plan,
)

_REFUEL_TOLERANCE = 1e-6


def _text(value: Any) -> str:
    """An enum member's value, or the text itself (assignments to records are not validated)."""
    return str(getattr(value, "value", value))


def _first_of_month(day: dt.date) -> dt.date:
    return day.replace(day=1)


def _last_of_month(day: dt.date) -> dt.date:
    return day.replace(day=calendar.monthrange(day.year, day.month)[1])


def _first_of_next_month(day: dt.date) -> dt.date:
    return _last_of_month(day) + dt.timedelta(days=1)


def _last_of_previous_month(day: dt.date) -> dt.date:
    return _first_of_month(day) - dt.timedelta(days=1)


class TelecomTools(Toolkit):
    """What a telecom customer-service agent can see and do in the carrier's systems.

    Named as the reference names its toolkit, because Python writes the class name into the error a call with a
    missing or unknown argument gets ("TelecomTools.get_customer_by_id() missing 1 required positional argument:
    ..."), and that error is the call's reply. The rest of agentspec calls it :data:`CarrierTools`.
    """

    def __init__(self, db: CarrierDB) -> None:
        self.db = db

    # ------------------------------------------------------------------ lookups that raise

    def _customer(self, customer_id: str) -> Customer:
        customer = self.db.customer(customer_id)
        if customer is None:
            raise ToolError(f"Customer with ID {customer_id} not found")
        return customer

    def _line(self, line_id: str) -> Line:
        line = self.db.line(line_id)
        if line is None:
            raise ToolError(f"Line with ID {line_id} not found")
        return line

    def _bill(self, bill_id: str) -> Bill:
        bill = self.db.bill(bill_id)
        if bill is None:
            raise ToolError(f"Bill with ID {bill_id} not found")
        return bill

    def _plan(self, plan_id: str) -> Plan:
        plan = self.db.plan(plan_id)
        if plan is None:
            raise ToolError(f"Plan with ID {plan_id} not found")
        return plan

    def _device(self, device_id: str) -> Device:
        device = self.db.device(device_id)
        if device is None:
            raise ToolError(f"Device with ID {device_id} not found")
        return device

    def _owned_line(self, customer_id: str, line_id: str) -> Line:
        """The line, provided the customer exists, lists it, and it exists."""
        customer = self._customer(customer_id)
        if line_id not in customer.line_ids:
            raise ToolError(f"Line {line_id} not found for customer {customer_id}")
        return self._line(line_id)

    def _customer_bills(self, customer: Customer) -> list[Bill]:
        return [self._bill(bill_id) for bill_id in customer.bill_ids]

    # ------------------------------------------------------------------ read tools

    @tool(Effect.READ_ONLY)
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        """Find a customer by phone number: their primary contact number or the number of one of their lines.

        Args:
            phone_number: The phone number to search for, e.g. "555-123-2002".
        """
        customer = self.db.customer_by_phone(phone_number)
        if customer is None:
            raise ToolError(f"Customer with phone number {phone_number} not found")
        return customer

    @tool(Effect.READ_ONLY)
    def get_customer_by_id(self, customer_id: str) -> Customer:
        """Get a customer's full profile by customer ID.

        Args:
            customer_id: The customer ID, e.g. "C1001".
        """
        return self._customer(customer_id)

    @tool(Effect.READ_ONLY)
    def get_customer_by_name(self, full_name: str, dob: str) -> list[Customer]:
        """Search customers by full name and date of birth; the date of birth is required for verification.

        Returns every matching customer (possibly none).

        Args:
            full_name: The customer's full name (case-insensitive).
            dob: The date of birth in YYYY-MM-DD format.
        """
        wanted = full_name.lower()
        return [c for c in self.db.customers if c.full_name.lower() == wanted and c.date_of_birth == dob]

    @tool(Effect.READ_ONLY)
    def get_details_by_id(self, id: str) -> Line | Device | Bill | Customer | Plan:  # noqa: A002 - the reference's argument name
        """Get the details of a line, device, bill, customer or plan from its ID.

        The kind of record is decided by the ID's first letter: L (line), D (device), B (bill), C (customer), P (plan).

        Args:
            id: The ID, e.g. "L1002", "D1001", "B1003", "C1001" or "P1002".
        """
        finders: dict[str, Callable[[str], Line | Device | Bill | Customer | Plan]] = {
            "L": self._line, "D": self._device, "B": self._bill, "C": self._customer, "P": self._plan,
        }
        # startswith (not id[:1]): an ID that is not text then fails in the reference's words.
        finder = next((found for prefix, found in finders.items() if id.startswith(prefix)), None)
        if finder is None:
            raise ToolError(f"Unknown ID format or type: {id}")
        return finder(id)

    @tool(Effect.READ_ONLY)
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Bill]:
        """List a customer's bills, most recently issued first.

        Args:
            customer_id: The customer ID, e.g. "C1001".
            limit: The maximum number of bills to return. Defaults to 12.
        """
        bills = self._customer_bills(self._customer(customer_id))
        # sorted() with reverse=True is stable: bills issued the same day keep bill_ids order.
        newest_first = sorted(bills, key=lambda bill: bill.issue_date, reverse=True)
        return newest_first[:limit]

    @tool(Effect.READ_ONLY)
    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Get a line's data usage this billing cycle, its plan's data limit, the data refuelled and the cycle end date.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID, e.g. "L1002".
        """
        line = self._owned_line(customer_id, line_id)
        plan = self._plan(line.plan_id)
        # Numbers as their text and the date as YYYY-MM-DD, in the reference's words.
        return {
            "line_id": line.line_id,
            "data_used_gb": str(line.data_used_gb),
            "data_limit_gb": str(plan.data_limit_gb),
            "data_refueling_gb": str(line.data_refueling_gb),
            "cycle_end_date": str(_last_of_month(TODAY)),
        }

    # ------------------------------------------------------------------ write tools

    @tool(Effect.MUTATING)
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        """Suspend an active line. A suspended line is charged a $5/month holding fee.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID to suspend.
            reason: Why the line is being suspended.
        """
        line = self._owned_line(customer_id, line_id)
        if line.status != LineStatus.ACTIVE:
            raise ToolError("Line must be active to suspend")
        # The reason is accepted but not recorded, and the fee is announced but never billed (as the reference).
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        return {
            "message": "Line suspended successfully. $5/month holding fee will apply.",
            "line": line,
        }

    @tool(Effect.MUTATING)
    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Resume a suspended (or pending-activation) line so it becomes active again.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID to resume.
        """
        line = self._owned_line(customer_id, line_id)
        if line.status not in (LineStatus.SUSPENDED, LineStatus.PENDING_ACTIVATION):
            raise ToolError("Line must be suspended to resume")
        # Deliberately no contract_end_date check: the policy, not the tool, forbids that case.
        line.status = LineStatus.ACTIVE
        line.suspension_start_date = None
        return {"message": "Line resumed successfully", "line": line}

    @tool(Effect.MUTATING)
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Send the customer a payment request for one of their bills; the bill becomes AWAITING PAYMENT.

        A customer can only have one bill awaiting payment at a time. This tool does not check that the bill is overdue.

        Args:
            customer_id: The customer ID the bill belongs to.
            bill_id: The bill ID to request payment for.
        """
        customer = self._customer(customer_id)
        if any(bill.status == BillStatus.AWAITING_PAYMENT for bill in self._customer_bills(customer)):
            raise ToolError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._bill(bill_id)
        # Whatever the bill's current status, even Paid: the reference checks nothing more.
        bill.status = BillStatus.AWAITING_PAYMENT
        return f"Payment request sent to the customer for bill {bill_id}"

    @tool(Effect.IDEMPOTENT)
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Enable international data roaming on a line, at no cost to the customer.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID to enable roaming on.
        """
        line = self._owned_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled"
        line.roaming_enabled = True
        return "Roaming enabled successfully"

    @tool(Effect.IDEMPOTENT)
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Disable international data roaming on a line.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID to disable roaming on.
        """
        line = self._owned_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled"
        line.roaming_enabled = False
        return "Roaming disabled successfully"

    @tool(Effect.EXTERNAL)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the customer to a human agent, with a summary of their issue.

        Only transfer if the request cannot be handled within the scope of your actions.

        Args:
            summary: A summary of the customer's issue and what has been tried.
        """
        return "Transfer successful"

    @tool(Effect.MUTATING)
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        """Add extra data to a line for this cycle, charged at the plan's refuelling price per GB.

        The charge is added to the customer's next (draft) bill.

        Args:
            customer_id: The customer ID that owns the line.
            line_id: The line ID to refuel.
            gb_amount: How many GB of data to add; must be positive.
        """
        line = self._owned_line(customer_id, line_id)  # its status is deliberately not checked
        if gb_amount <= 0:
            raise ToolError("Refuel amount must be positive")
        plan = self._plan(line.plan_id)
        price = plan.data_refueling_price_per_gb
        charge = gb_amount * price  # never rounded: totals keep the exact float
        customer = self._customer(customer_id)
        draft = self._draft_bill(customer)  # may raise; do it before the first write
        line.data_refueling_gb += gb_amount
        self._add_charge(draft, f"Data refueling: {gb_amount} GB at ${price}/GB", charge)
        # The amounts as their text, in the reference's words.
        return {
            "message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
            "new_data_refueling_gb": str(line.data_refueling_gb),
            "charge": str(charge),
        }

    # ------------------------------------------------------------------ one-time charge

    def _draft_bill(self, customer: Customer) -> Bill:
        """The customer's first draft bill, in bill_ids order, created (next month) if there is none."""
        for bill in self._customer_bills(customer):
            if bill.status == BillStatus.DRAFT:
                return bill
        issue = _first_of_next_month(TODAY)
        bill = Bill(
            bill_id=self._new_bill_id(customer.customer_id),
            customer_id=customer.customer_id,
            period_start=issue,
            period_end=_last_of_month(issue),
            issue_date=issue,
            total_due=0.0,
            due_date=issue + dt.timedelta(days=14),
            line_items=[],
            status=BillStatus.DRAFT,
        )
        self.db.bills.append(bill)
        customer.bill_ids.append(bill.bill_id)
        return bill

    def _new_bill_id(self, customer_id: str) -> str:
        # DEVIATION from the reference, which uses "B" + 8 random hex digits (uuid4).
        # Speculation replays calls in forks and evaluation replays whole
        # trajectories, so the id must be a function of the state: hash the
        # customer id and the current number of bills (a counter breaks the
        # practically impossible tie with an existing id).
        salt = 0
        while True:
            seed = f"{customer_id}:{len(self.db.bills)}" + (f":{salt}" if salt else "")
            candidate = "B" + hashlib.sha256(seed.encode()).hexdigest()[:8].upper()
            if self.db.bill(candidate) is None:
                return candidate
            salt += 1

    @staticmethod
    def _add_charge(bill: Bill, description: str, amount: float) -> None:
        item_type = "Credit" if amount < 0 else "Charge"
        bill.line_items.append(LineItem(description=description, amount=amount, date=TODAY, item_type=item_type))
        bill.total_due += amount

    # ------------------------------------------------------------------ task initialisation helpers (not tools)

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        """Set a line's data used this cycle (tasks use 15.1 GB to exceed P1002's 15 GB)."""
        line = self._owned_line(customer_id, line_id)
        line.data_used_gb = data_used_gb
        return f"Data usage of line {line_id} set to {data_used_gb} GB."

    def suspend_line_for_overdue_bill(self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool) -> str:
        """Give the customer an overdue bill for last month's charge of this line and suspend the line.

        With ``contract_ended`` the line's contract is also made to have ended last month.
        """
        line = self._line(line_id)  # no ownership check, as the reference
        if line.status != LineStatus.ACTIVE:
            raise ToolError(f"Line {line_id} is not active (status: {_text(line.status)})")
        plan = self._plan(line.plan_id)
        if plan.price_per_month <= 0:
            raise ToolError(f"Plan {plan.plan_id} has no monthly price to bill")
        customer = self._customer(customer_id)
        if any(bill.status == BillStatus.OVERDUE for bill in self._customer_bills(customer)):
            raise ToolError(f"Customer {customer_id} already has an overdue bill")

        period_end = _last_of_previous_month(TODAY)
        period_start = _first_of_month(period_end)
        amount = plan.price_per_month
        bill = Bill(
            bill_id=new_bill_id,
            customer_id=customer_id,
            period_start=period_start,
            period_end=period_end,
            issue_date=period_start,
            total_due=amount,
            due_date=period_start + dt.timedelta(days=14),
            line_items=[LineItem(description=f"Charge for line {line_id}", amount=amount, date=TODAY, item_type="Charge")],
            status=BillStatus.OVERDUE,
        )
        self.db.bills.append(bill)
        customer.bill_ids.append(new_bill_id)
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        if contract_ended:
            line.contract_end_date = period_end
        return f"Line {line_id} suspended for overdue bill {new_bill_id}."

    # ------------------------------------------------------------------ assertions (evaluation, not tools)

    def assert_data_refueling_amount(self, customer_id: str, line_id: str, expected_amount: float) -> bool:
        """Whether the owned line's refuelled data equals ``expected_amount`` (within 1e-6 GB)."""
        line = self._owned_line(customer_id, line_id)
        return abs(line.data_refueling_gb - expected_amount) < _REFUEL_TOLERANCE

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: LineStatus | str) -> bool:
        """Whether the owned line's status is ``expected_status`` (an enum member or its text)."""
        line = self._owned_line(customer_id, line_id)
        return line.status == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        """True if the bill is the customer's and overdue; otherwise raises (never returns False)."""
        customer = self._customer(customer_id)
        if overdue_bill_id not in customer.bill_ids:
            raise ToolError(f"Bill {overdue_bill_id} does not belong to customer {customer_id}")
        bill = self._bill(overdue_bill_id)
        if bill.status != BillStatus.OVERDUE:
            raise ToolError(f"Bill {overdue_bill_id} is not overdue (status: {_text(bill.status)})")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """True if the bill does not exist or has been paid; any other status (even Awaiting Payment) is False."""
        bill = self.db.bill(overdue_bill_id)
        return bill is None or bill.status == BillStatus.PAID


CarrierTools = TelecomTools
