"""The carrier (agent-side) tools of tau2 telecom, against the real ``db.toml``."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pytest

from agentspec.errors import DataError, ToolError
from agentspec.types import Effect, ToolCall
from envs.tau2_telecom.data_model import (
    AccountStatus,
    BillStatus,
    CarrierDB,
    Customer,
    LineStatus,
)
from envs.tau2_telecom.tools import CarrierTools

DB_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2" / "telecom" / "db.toml"
TODAY = dt.date(2025, 2, 25)


@pytest.fixture(scope="module")
def pristine() -> CarrierDB:
    return CarrierDB.load(DB_PATH)


@pytest.fixture
def db(pristine: CarrierDB) -> CarrierDB:
    return pristine.model_copy(deep=True)


@pytest.fixture
def tools(db: CarrierDB) -> CarrierTools:
    return CarrierTools(db)


def run(tools: CarrierTools, name: str, **arguments: object):
    """Run through the toolkit's safe path: (content, error flag)."""
    obs = tools.run(ToolCall(name=name, arguments=arguments))
    return obs.content, obs.error


def run_json(tools: CarrierTools, name: str, **arguments: object):
    content, error = run(tools, name, **arguments)
    assert not error, content
    return json.loads(content)


# ---------------------------------------------------------------- data model and seed facts


def test_plans_table(db: CarrierDB) -> None:
    rows = [(p.plan_id, p.name, p.data_limit_gb, p.price_per_month, p.data_refueling_price_per_gb) for p in db.plans]
    assert rows == [
        ("P1001", "Basic Plan", 5.0, 40.0, 5.0),
        ("P1002", "Premium Plan", 15.0, 65.0, 2.0),
        ("P1003", "Unlimited Plus", 999.0, 85.0, 0.1),
        ("P1004", "Family Share", 25.0, 120.0, 3.0),
        ("P1005", "IoT Basic", 1.0, 15.0, 10.0),
    ]


def test_seed_customer_c1001(db: CarrierDB) -> None:
    c = db.customer("C1001")
    assert c is not None
    assert (c.full_name, c.date_of_birth, c.phone_number) == ("John Smith", "1985-06-15", "555-123-2002")
    assert c.line_ids == ["L1001", "L1002", "L1003"]
    assert c.bill_ids == ["B1001", "B1002", "B1003"]
    statuses = [db.bill(b).status for b in c.bill_ids]
    assert statuses == [BillStatus.PAID, BillStatus.ISSUED, BillStatus.DRAFT]
    b1003 = db.bill("B1003")
    assert b1003.total_due == 0.0 and b1003.issue_date == dt.date(2025, 3, 1) and b1003.line_items == []


def test_seed_line_l1002(db: CarrierDB) -> None:
    line = db.line("L1002")
    assert line.phone_number == "555-123-2002"
    assert line.status == LineStatus.ACTIVE
    assert line.plan_id == "P1002"
    assert line.data_used_gb == 8.7 and line.data_refueling_gb == 0.0
    assert line.roaming_enabled is True
    assert line.contract_end_date == dt.date(2026, 12, 31)


def test_seed_other_customers(db: CarrierDB) -> None:
    c2, c3, c4 = db.customer("C1002"), db.customer("C1003"), db.customer("C1004")
    c2_bills = [db.bill(b) for b in c2.bill_ids]
    assert db.bill("B1005").status == BillStatus.OVERDUE and "B1005" in c2.bill_ids
    assert all(b.status != BillStatus.DRAFT for b in c2_bills)
    assert c3.account_status == AccountStatus.SUSPENDED
    assert db.bill("B1006").status == BillStatus.DISPUTED and c3.bill_ids == ["B1006"]
    assert c4.line_ids == [] and c4.bill_ids == []


def test_records_forbid_unknown_fields() -> None:
    with pytest.raises(ValueError):
        Customer.model_validate(
            {
                "customer_id": "C9",
                "full_name": "X",
                "date_of_birth": "2000-01-01",
                "email": "x@example.com",
                "phone_number": "1",
                "address": {"street": "s", "city": "c", "state": "st", "zip_code": "z"},
                "nickname": "unknown field",
            }
        )


def test_customer_defaults() -> None:
    c = Customer.model_validate(
        {
            "customer_id": "C9",
            "full_name": "X",
            "date_of_birth": "2000-01-01",
            "email": "x@example.com",
            "phone_number": "1",
            "address": {"street": "s", "city": "c", "state": "st", "zip_code": "z"},
        }
    )
    assert c.account_status == AccountStatus.PENDING_VERIFICATION
    assert c.created_at == dt.datetime(2025, 1, 1)
    assert c.goodwill_credit_used_this_year == 0.0 and c.last_extension_date is None


def test_load_missing_file_is_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        CarrierDB.load(tmp_path / "nope.toml")


def test_db_lookups(db: CarrierDB) -> None:
    assert db.plan("P1003").name == "Unlimited Plus"
    assert db.device("D1002").model == "Smartphone Pro Max"
    assert db.line_by_phone("555-123-2004").line_id == "L1004"
    assert db.line_by_phone("000") is None
    assert db.customer_by_phone("555-123-1002").customer_id == "C1002"  # primary number
    assert db.customer_by_phone("555-123-2001").customer_id == "C1001"  # a line's number
    assert db.customer_by_phone("555-123-2009").customer_id == "C1003"
    assert db.customer_by_phone("000") is None
    assert db.customer("C9999") is None and db.bill("B0") is None


# ---------------------------------------------------------------- specs


def test_specs_names_args_and_effects(tools: CarrierTools) -> None:
    specs = {spec.name: spec for spec in tools.specs()}
    expected_required = {
        "get_customer_by_phone": ["phone_number"],
        "get_customer_by_id": ["customer_id"],
        "get_customer_by_name": ["full_name", "dob"],
        "get_details_by_id": ["id"],
        "suspend_line": ["customer_id", "line_id", "reason"],
        "resume_line": ["customer_id", "line_id"],
        "get_bills_for_customer": ["customer_id"],
        "send_payment_request": ["customer_id", "bill_id"],
        "get_data_usage": ["customer_id", "line_id"],
        "enable_roaming": ["customer_id", "line_id"],
        "disable_roaming": ["customer_id", "line_id"],
        "transfer_to_human_agents": ["summary"],
        "refuel_data": ["customer_id", "line_id", "gb_amount"],
    }
    assert set(specs) == set(expected_required)
    for name, required in expected_required.items():
        assert specs[name].parameters["required"] == required, name
        assert specs[name].description, name
        for arg, schema in specs[name].parameters["properties"].items():
            assert schema.get("description"), (name, arg)
    limit = specs["get_bills_for_customer"].parameters["properties"]["limit"]
    assert limit["type"] == "integer" and limit["default"] == 12
    assert specs["refuel_data"].parameters["properties"]["gb_amount"]["type"] == "number"

    effects = {name: spec.effect for name, spec in specs.items()}
    reads = {"get_customer_by_phone", "get_customer_by_id", "get_customer_by_name", "get_details_by_id",
             "get_bills_for_customer", "get_data_usage"}
    assert {n for n, e in effects.items() if e is Effect.READ_ONLY} == reads
    assert {n for n, e in effects.items() if e is Effect.IDEMPOTENT} == {"enable_roaming", "disable_roaming"}
    assert {n for n, e in effects.items() if e is Effect.EXTERNAL} == {"transfer_to_human_agents"}
    assert {n for n, e in effects.items() if e is Effect.MUTATING} == {
        "suspend_line", "resume_line", "send_payment_request", "refuel_data"}


def test_helpers_are_not_tools(tools: CarrierTools) -> None:
    for name in ("set_data_usage", "suspend_line_for_overdue_bill", "assert_line_status", "assert_no_overdue_bill"):
        assert not tools.has_tool(name)


# ---------------------------------------------------------------- customer lookups


def test_get_customer_by_phone(tools: CarrierTools) -> None:
    assert run_json(tools, "get_customer_by_phone", phone_number="555-123-2002")["customer_id"] == "C1001"
    assert run_json(tools, "get_customer_by_phone", phone_number="555-123-2003")["customer_id"] == "C1001"
    assert run_json(tools, "get_customer_by_phone", phone_number="555-123-1003")["customer_id"] == "C1003"
    content, error = run(tools, "get_customer_by_phone", phone_number="555-000-0000")
    assert error and content == "Error: Customer with phone number 555-000-0000 not found"


def test_get_customer_by_id_serialises_record(tools: CarrierTools) -> None:
    data = run_json(tools, "get_customer_by_id", customer_id="C1001")
    assert data["account_status"] == "Active"
    assert data["created_at"] == "2025-01-15 10:30:00"  # a space, not ISO's "T", as the reference writes it
    assert data["payment_methods"][0]["method_type"] == "Credit Card"
    assert data["address"]["zip_code"] == "90210"
    _, error = run(tools, "get_customer_by_id", customer_id="C9999")
    assert error


def test_get_customer_by_name(tools: CarrierTools) -> None:
    found = run_json(tools, "get_customer_by_name", full_name="jOHN smith", dob="1985-06-15")
    assert [c["customer_id"] for c in found] == ["C1001"]
    assert run_json(tools, "get_customer_by_name", full_name="John Smith", dob="1985-06-16") == []
    assert run_json(tools, "get_customer_by_name", full_name="John  Smith", dob="1985-06-15") == []


def test_missing_or_extra_argument_is_error(tools: CarrierTools) -> None:
    # Python's own text, naming the toolkit class as the reference's does.
    assert run(tools, "get_customer_by_id") == (
        "Error: TelecomTools.get_customer_by_id() missing 1 required positional argument: 'customer_id'", True)
    assert run(tools, "get_customer_by_id", customer_id="C1001", extra=1) == (
        "Error: TelecomTools.get_customer_by_id() got an unexpected keyword argument 'extra'", True)


# ---------------------------------------------------------------- get_details_by_id


@pytest.mark.parametrize(
    ("record_id", "key"),
    [("L1002", "line_id"), ("D1001", "device_id"), ("B1003", "bill_id"), ("C1004", "customer_id"), ("P1005", "plan_id")],
)
def test_get_details_by_id_dispatch(tools: CarrierTools, record_id: str, key: str) -> None:
    assert run_json(tools, "get_details_by_id", id=record_id)[key] == record_id


def test_get_details_by_id_dates_and_enums(tools: CarrierTools) -> None:
    device = run_json(tools, "get_details_by_id", id="D1002")
    assert device["device_type"] == "phone" and device["activation_date"] == "2025-02-15 11:45:00"
    bill = run_json(tools, "get_details_by_id", id="B1001")
    assert bill["status"] == "Paid" and bill["issue_date"] == "2025-01-05" and len(bill["line_items"]) == 4


@pytest.mark.parametrize("record_id", ["X1001", "l1002", "", "1002"])
def test_get_details_by_id_unknown_prefix(tools: CarrierTools, record_id: str) -> None:
    content, error = run(tools, "get_details_by_id", id=record_id)
    assert error and content == f"Error: Unknown ID format or type: {record_id}"


def test_get_details_by_id_of_a_number_is_error(tools: CarrierTools) -> None:
    assert run(tools, "get_details_by_id", id=5) == ("Error: 'int' object has no attribute 'startswith'", True)


@pytest.mark.parametrize("record_id", ["L9999", "D9999", "B9999", "C9999", "P9999", "Cx"])
def test_get_details_by_id_not_found(tools: CarrierTools, record_id: str) -> None:
    content, error = run(tools, "get_details_by_id", id=record_id)
    assert error and "not found" in content


def test_get_details_by_id_dispatches_on_first_char_only(tools: CarrierTools) -> None:
    # "L" + a customer id is looked up as a line, so it is not found.
    assert run(tools, "get_details_by_id", id="LC1001")[1]


# ---------------------------------------------------------------- ownership


@pytest.mark.parametrize(
    "name", ["get_data_usage", "enable_roaming", "disable_roaming", "resume_line"]
)
@pytest.mark.parametrize(
    ("customer_id", "line_id"),
    [("C9999", "L1002"), ("C1002", "L1002"), ("C1004", "L1001")],
)
def test_ownership_errors(tools: CarrierTools, db: CarrierDB, name: str, customer_id: str, line_id: str) -> None:
    before = db.model_dump()
    content, error = run(tools, name, customer_id=customer_id, line_id=line_id)
    if customer_id == "C9999":
        assert error and content == f"Error: Customer with ID {customer_id} not found"
    else:
        assert error and content == f"Error: Line {line_id} not found for customer {customer_id}"
    assert db.model_dump() == before


def test_listed_but_missing_line_is_error(tools: CarrierTools, db: CarrierDB) -> None:
    db.customer("C1004").line_ids.append("L7777")
    content, error = run(tools, "get_data_usage", customer_id="C1004", line_id="L7777")
    assert error and "not found" in content


def test_suspend_and_refuel_check_ownership(tools: CarrierTools) -> None:
    assert run(tools, "suspend_line", customer_id="C1002", line_id="L1002", reason="x")[1]
    assert run(tools, "refuel_data", customer_id="C1002", line_id="L1002", gb_amount=1.0)[1]


# ---------------------------------------------------------------- suspend / resume


def test_suspend_line(tools: CarrierTools, db: CarrierDB) -> None:
    result = run_json(tools, "suspend_line", customer_id="C1001", line_id="L1002", reason="travel")
    assert result["message"] == "Line suspended successfully. $5/month holding fee will apply."
    assert result["line"]["status"] == "Suspended" and result["line"]["suspension_start_date"] == "2025-02-25"
    line = db.line("L1002")
    assert line.status == LineStatus.SUSPENDED and line.suspension_start_date == TODAY
    assert all(not b.line_items for b in db.bills if b.bill_id == "B1003")  # the fee is never charged
    content, error = run(tools, "suspend_line", customer_id="C1001", line_id="L1002", reason="again")
    assert error and content == "Error: Line must be active to suspend"


def test_suspend_line_rejects_non_active(tools: CarrierTools) -> None:
    assert run(tools, "suspend_line", customer_id="C1001", line_id="L1003", reason="x")[1]


def test_resume_line(tools: CarrierTools, db: CarrierDB) -> None:
    result = run_json(tools, "resume_line", customer_id="C1001", line_id="L1003")
    assert result["message"] == "Line resumed successfully"
    assert result["line"]["status"] == "Active" and result["line"]["suspension_start_date"] is None
    assert db.line("L1003").status == LineStatus.ACTIVE and db.line("L1003").suspension_start_date is None
    content, error = run(tools, "resume_line", customer_id="C1001", line_id="L1003")
    assert error and content == "Error: Line must be suspended to resume"


def test_resume_line_pending_activation(tools: CarrierTools, db: CarrierDB) -> None:
    db.line("L1001").status = LineStatus.PENDING_ACTIVATION
    run_json(tools, "resume_line", customer_id="C1001", line_id="L1001")
    assert db.line("L1001").status == LineStatus.ACTIVE


def test_resume_line_rejects_closed(tools: CarrierTools, db: CarrierDB) -> None:
    db.line("L1001").status = LineStatus.CLOSED
    assert run(tools, "resume_line", customer_id="C1001", line_id="L1001")[1]


def test_resume_line_ignores_contract_end(tools: CarrierTools, db: CarrierDB) -> None:
    tools.suspend_line_for_overdue_bill("C1001", "L1002", "B1234321", True)
    assert db.line("L1002").contract_end_date == dt.date(2025, 1, 31)
    run_json(tools, "resume_line", customer_id="C1001", line_id="L1002")
    assert db.line("L1002").status == LineStatus.ACTIVE


# ---------------------------------------------------------------- bills


def test_get_bills_for_customer_newest_first(tools: CarrierTools) -> None:
    bills = run_json(tools, "get_bills_for_customer", customer_id="C1001")
    assert [b["bill_id"] for b in bills] == ["B1003", "B1002", "B1001"]
    limited = run_json(tools, "get_bills_for_customer", customer_id="C1001", limit=2)
    assert [b["bill_id"] for b in limited] == ["B1003", "B1002"]
    assert run_json(tools, "get_bills_for_customer", customer_id="C1004") == []


def test_get_bills_for_customer_stable_sort(tools: CarrierTools, db: CarrierDB) -> None:
    # Give all three the same issue date: ties must keep bill_ids order.
    for bill_id in ("B1001", "B1002", "B1003"):
        db.bill(bill_id).issue_date = dt.date(2025, 1, 5)
    db.customer("C1001").bill_ids = ["B1002", "B1003", "B1001"]
    bills = run_json(tools, "get_bills_for_customer", customer_id="C1001")
    assert [b["bill_id"] for b in bills] == ["B1002", "B1003", "B1001"]


def test_get_bills_for_customer_limit_is_a_python_slice(tools: CarrierTools) -> None:
    assert [b["bill_id"] for b in run_json(tools, "get_bills_for_customer", customer_id="C1001", limit=-1)] == [
        "B1003", "B1002"]
    assert run_json(tools, "get_bills_for_customer", customer_id="C1001", limit=0) == []
    assert run(tools, "get_bills_for_customer", customer_id="C1001", limit="3")[1]
    assert run(tools, "get_bills_for_customer", customer_id="C9999")[1]


def test_send_payment_request(tools: CarrierTools, db: CarrierDB) -> None:
    content, error = run(tools, "send_payment_request", customer_id="C1002", bill_id="B1005")
    assert not error and content == "Payment request sent to the customer for bill B1005"
    assert db.bill("B1005").status == BillStatus.AWAITING_PAYMENT


def test_send_payment_request_any_status_even_paid(tools: CarrierTools, db: CarrierDB) -> None:
    run(tools, "send_payment_request", customer_id="C1001", bill_id="B1001")
    assert db.bill("B1001").status == BillStatus.AWAITING_PAYMENT


def test_send_payment_request_check_order(tools: CarrierTools, db: CarrierDB) -> None:
    content, error = run(tools, "send_payment_request", customer_id="C9999", bill_id="B1001")
    assert error and content == "Error: Customer with ID C9999 not found"
    db.bill("B1002").status = BillStatus.AWAITING_PAYMENT
    # The awaiting-payment check comes before the ownership check of bill_id.
    content, error = run(tools, "send_payment_request", customer_id="C1001", bill_id="B1005")
    assert error and content == "Error: A bill is already awaiting payment for this customer"
    db.bill("B1002").status = BillStatus.ISSUED
    content, error = run(tools, "send_payment_request", customer_id="C1001", bill_id="B1005")
    assert error and content == "Error: Bill B1005 not found for customer C1001"
    assert db.bill("B1005").status == BillStatus.OVERDUE


def test_only_one_bill_awaiting_payment(tools: CarrierTools, db: CarrierDB) -> None:
    run(tools, "send_payment_request", customer_id="C1001", bill_id="B1002")
    content, error = run(tools, "send_payment_request", customer_id="C1001", bill_id="B1003")
    assert error and db.bill("B1003").status == BillStatus.DRAFT


# ---------------------------------------------------------------- data usage and roaming


def test_get_data_usage(tools: CarrierTools) -> None:
    assert run_json(tools, "get_data_usage", customer_id="C1001", line_id="L1002") == {
        "line_id": "L1002",
        "data_used_gb": "8.7",  # the numbers as text, as the reference answers
        "data_limit_gb": "15.0",
        "data_refueling_gb": "0.0",
        "cycle_end_date": "2025-02-28",
    }


def test_roaming_enable_disable_idempotent(tools: CarrierTools, db: CarrierDB) -> None:
    already_on, error = run(tools, "enable_roaming", customer_id="C1001", line_id="L1002")
    assert not error and already_on == "Roaming was already enabled" and db.line("L1002").roaming_enabled is True

    turned_off, _ = run(tools, "disable_roaming", customer_id="C1001", line_id="L1002")
    assert turned_off == "Roaming disabled successfully" and db.line("L1002").roaming_enabled is False
    already_off, error = run(tools, "disable_roaming", customer_id="C1001", line_id="L1002")
    assert not error and already_off == "Roaming was already disabled" and db.line("L1002").roaming_enabled is False

    turned_on, _ = run(tools, "enable_roaming", customer_id="C1001", line_id="L1002")
    assert turned_on == "Roaming enabled successfully" and db.line("L1002").roaming_enabled is True


def test_transfer_to_human_agents_changes_nothing(tools: CarrierTools, db: CarrierDB) -> None:
    before = db.model_dump()
    content, error = run(tools, "transfer_to_human_agents", summary="locked SIM")
    assert not error and content == "Transfer successful"
    assert db.model_dump() == before


# ---------------------------------------------------------------- refuel and the one-time charge


def test_refuel_charges_existing_draft_bill(tools: CarrierTools, db: CarrierDB) -> None:
    result = run_json(tools, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0)
    assert result == {  # the amounts as text, as the reference answers
        "message": "Successfully added 2.0 GB of data for line L1002 for $4.00",
        "new_data_refueling_gb": "2.0",
        "charge": "4.0",
    }
    assert db.line("L1002").data_refueling_gb == 2.0
    b1003 = db.bill("B1003")
    assert b1003.total_due == 4.0
    [item] = b1003.line_items
    assert (item.amount, item.date, item.item_type) == (4.0, TODAY, "Charge")
    assert item.description == "Data refueling: 2.0 GB at $2.0/GB"
    assert len(db.bills) == 6 and db.customer("C1001").bill_ids == ["B1001", "B1002", "B1003"]


def test_refuel_accumulates_unrounded(tools: CarrierTools, db: CarrierDB) -> None:
    run_json(tools, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount=0.1)
    run_json(tools, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount=0.2)
    assert db.line("L1002").data_refueling_gb == 0.1 + 0.2
    assert db.bill("B1003").total_due == 0.1 * 2.0 + 0.2 * 2.0
    assert len(db.bill("B1003").line_items) == 2


def test_refuel_ignores_line_status(tools: CarrierTools, db: CarrierDB) -> None:
    run_json(tools, "refuel_data", customer_id="C1001", line_id="L1003", gb_amount=1.0)  # L1003 is Suspended
    assert db.line("L1003").data_refueling_gb == 1.0 and db.bill("B1003").total_due == 5.0


@pytest.mark.parametrize("amount", [0, 0.0, -1.5])
def test_refuel_non_positive_is_error(tools: CarrierTools, db: CarrierDB, amount: float) -> None:
    before = db.model_dump()
    content, error = run(tools, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount=amount)
    assert error and content == "Error: Refuel amount must be positive"
    assert db.model_dump() == before


def test_refuel_string_amount_is_error(tools: CarrierTools) -> None:
    assert run(tools, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount="2")[1]


def expected_new_bill_id(customer_id: str, bill_count: int) -> str:
    return "B" + hashlib.sha256(f"{customer_id}:{bill_count}".encode()).hexdigest()[:8].upper()


def test_refuel_creates_deterministic_draft_bill(tools: CarrierTools, db: CarrierDB) -> None:
    result = run_json(tools, "refuel_data", customer_id="C1002", line_id="L1004", gb_amount=1.5)
    assert result["charge"] == str(1.5 * 0.1)  # the unrounded float's text: "0.15000000000000002"
    new_id = expected_new_bill_id("C1002", 6)
    assert db.customer("C1002").bill_ids == ["B1004", "B1005", new_id]
    bill = db.bills[-1]
    assert bill.bill_id == new_id and bill.customer_id == "C1002"
    assert (bill.period_start, bill.period_end) == (dt.date(2025, 3, 1), dt.date(2025, 3, 31))
    assert bill.issue_date == dt.date(2025, 3, 1) and bill.due_date == dt.date(2025, 3, 15)
    assert bill.status == BillStatus.DRAFT
    assert bill.total_due == 1.5 * 0.1
    assert [i.amount for i in bill.line_items] == [1.5 * 0.1]

    # A second refuel reuses that draft rather than creating another.
    run_json(tools, "refuel_data", customer_id="C1002", line_id="L1004", gb_amount=1.0)
    assert len(db.bills) == 7 and len(bill.line_items) == 2


def test_new_bill_id_is_reproducible(pristine: CarrierDB) -> None:
    ids = []
    for _ in range(2):
        db = pristine.model_copy(deep=True)
        CarrierTools(db).refuel_data("C1002", "L1004", 1.0)
        ids.append(db.bills[-1].bill_id)
    assert ids[0] == ids[1]


# ---------------------------------------------------------------- initialisation helpers


def test_set_data_usage(tools: CarrierTools, db: CarrierDB) -> None:
    tools.set_data_usage("C1001", "L1002", 15.1)
    assert db.line("L1002").data_used_gb == 15.1
    with pytest.raises(ToolError):
        tools.set_data_usage("C1002", "L1002", 1.0)


def test_suspend_line_for_overdue_bill(tools: CarrierTools, db: CarrierDB) -> None:
    tools.suspend_line_for_overdue_bill("C1001", "L1002", "B1234321", False)
    bill = db.bills[-1]
    assert bill.bill_id == "B1234321" and bill.customer_id == "C1001"
    assert (bill.period_start, bill.period_end) == (dt.date(2025, 1, 1), dt.date(2025, 1, 31))
    assert (bill.issue_date, bill.due_date) == (dt.date(2025, 1, 1), dt.date(2025, 1, 15))
    assert bill.status == BillStatus.OVERDUE and bill.total_due == 65.0
    [item] = bill.line_items
    assert (item.description, item.amount, item.date, item.item_type) == ("Charge for line L1002", 65.0, TODAY, "Charge")
    assert db.customer("C1001").bill_ids[-1] == "B1234321"
    line = db.line("L1002")
    assert line.status == LineStatus.SUSPENDED and line.suspension_start_date == TODAY
    assert line.contract_end_date == dt.date(2026, 12, 31)
    # The overdue bill is visible to the agent as a normal record.
    assert run_json(tools, "get_details_by_id", id="B1234321")["status"] == "Overdue"


def test_suspend_line_for_overdue_bill_contract_ended(tools: CarrierTools, db: CarrierDB) -> None:
    tools.suspend_line_for_overdue_bill("C1001", "L1002", "B1234321", True)
    assert db.line("L1002").contract_end_date == dt.date(2025, 1, 31)


def test_suspend_line_for_overdue_bill_preconditions(tools: CarrierTools, db: CarrierDB) -> None:
    before = db.model_dump()
    with pytest.raises(ToolError):
        tools.suspend_line_for_overdue_bill("C1001", "L1003", "B1", False)  # L1003 is not Active
    with pytest.raises(ToolError):
        tools.suspend_line_for_overdue_bill("C1002", "L1004", "B1", False)  # C1002 already has B1005 Overdue
    with pytest.raises(ToolError):
        tools.suspend_line_for_overdue_bill("C1001", "L9999", "B1", False)
    db.plan("P1002").price_per_month = 0.0
    with pytest.raises(ToolError):
        tools.suspend_line_for_overdue_bill("C1001", "L1002", "B1", False)
    db.plan("P1002").price_per_month = 65.0
    assert db.model_dump() == before


def test_suspend_line_for_overdue_bill_skips_ownership(tools: CarrierTools, db: CarrierDB) -> None:
    # L1001 belongs to C1001, yet the bill goes to C1004: the reference does not check.
    tools.suspend_line_for_overdue_bill("C1004", "L1001", "B1234321", False)
    assert db.customer("C1004").bill_ids == ["B1234321"] and db.bill("B1234321").total_due == 40.0


def test_overdue_flow_end_to_end(tools: CarrierTools, db: CarrierDB) -> None:
    tools.suspend_line_for_overdue_bill("C1001", "L1002", "B1234321", False)
    assert tools.assert_no_overdue_bill("B1234321") is False
    run(tools, "send_payment_request", customer_id="C1001", bill_id="B1234321")
    assert tools.assert_no_overdue_bill("B1234321") is False  # Awaiting Payment is not enough
    db.bill("B1234321").status = BillStatus.PAID  # what the phone-side payment does via sync
    assert tools.assert_no_overdue_bill("B1234321") is True
    run_json(tools, "resume_line", customer_id="C1001", line_id="L1002")
    assert tools.assert_line_status("C1001", "L1002", "Active") is True


# ---------------------------------------------------------------- assertions


def test_assert_data_refueling_amount(tools: CarrierTools, db: CarrierDB) -> None:
    assert tools.assert_data_refueling_amount("C1001", "L1002", 0.0) is True
    assert tools.assert_data_refueling_amount("C1001", "L1002", 2.0) is False
    tools.refuel_data("C1001", "L1002", 2.0)
    assert tools.assert_data_refueling_amount("C1001", "L1002", 2.0) is True
    db.line("L1002").data_refueling_gb = 2.0 + 5e-7
    assert tools.assert_data_refueling_amount("C1001", "L1002", 2.0) is True
    db.line("L1002").data_refueling_gb = 2.0 + 2e-6
    assert tools.assert_data_refueling_amount("C1001", "L1002", 2.0) is False
    with pytest.raises(ToolError):
        tools.assert_data_refueling_amount("C1002", "L1002", 2.0)


def test_assert_line_status(tools: CarrierTools) -> None:
    assert tools.assert_line_status("C1001", "L1002", "Active") is True
    assert tools.assert_line_status("C1001", "L1002", LineStatus.ACTIVE) is True
    assert tools.assert_line_status("C1001", "L1003", "Active") is False
    assert tools.assert_line_status("C1001", "L1003", "Suspended") is True
    with pytest.raises(ToolError):
        tools.assert_line_status("C1001", "L1004", "Active")


def test_assert_overdue_bill_exists(tools: CarrierTools) -> None:
    assert tools.assert_overdue_bill_exists("C1002", "B1005") is True
    with pytest.raises(ToolError):
        tools.assert_overdue_bill_exists("C1001", "B1005")  # not theirs
    with pytest.raises(ToolError):
        tools.assert_overdue_bill_exists("C1001", "B1002")  # theirs, but Issued
    with pytest.raises(ToolError):
        tools.assert_overdue_bill_exists("C9999", "B1005")


def test_assert_no_overdue_bill(tools: CarrierTools, db: CarrierDB) -> None:
    assert tools.assert_no_overdue_bill("B1234321") is True  # does not exist
    assert tools.assert_no_overdue_bill("B1001") is True  # Paid
    assert tools.assert_no_overdue_bill("B1005") is False  # Overdue
    for status in (BillStatus.AWAITING_PAYMENT, BillStatus.ISSUED, BillStatus.DRAFT, BillStatus.DISPUTED):
        db.bill("B1005").status = status
        assert tools.assert_no_overdue_bill("B1005") is False


def test_helpers_callable_by_name(tools: CarrierTools, db: CarrierDB) -> None:
    tools.call_function("set_data_usage", {"customer_id": "C1001", "line_id": "L1002", "data_used_gb": 15.1})
    assert db.line("L1002").data_used_gb == 15.1
    assert tools.call_function("assert_no_overdue_bill", {"overdue_bill_id": "B1001"}) is True
