"""The telecom environment: routing, sync, and snapshots that are independent of live state."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentspec.env import Environment
from agentspec.types import Effect, ToolCall

TASK = "[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_apn_mms_setting|break_app_both_permissions|data_mode_off|data_usage_exceeded|unseat_sim_card|user_abroad_roaming_disabled_off[PERSONA:Hard]"
OWNED = {"customer_id": "C1001", "line_id": "L1002"}

CALLS = [
    ToolCall(name=name, arguments=args)
    for name, args in [
        ("toggle_airplane_mode", {}), ("toggle_data", {}), ("toggle_roaming", {}), ("toggle_wifi", {}),
        ("toggle_wifi_calling", {}), ("toggle_data_saver_mode", {}), ("reseat_sim_card", {}), ("reboot_device", {}),
        ("reset_apn_settings", {}), ("connect_vpn", {}), ("disconnect_vpn", {}), ("make_payment", {}),
        ("set_network_mode_preference", {"mode": "4g_5g_preferred"}), ("set_network_mode_preference", {"mode": "2g_only"}),
        ("grant_app_permission", {"app_name": "messaging", "permission": "sms"}),
        ("set_apn_settings", {"apn_settings": {"apn_name": "internet"}}),
        ("enable_roaming", OWNED), ("disable_roaming", OWNED), ("refuel_data", {**OWNED, "gb_amount": 1.5}),
        ("suspend_line", {**OWNED, "reason": "test"}), ("resume_line", OWNED),
        ("send_payment_request", {"customer_id": "C1001", "bill_id": "B1002"}),
        ("run_speed_test", {}), ("check_status_bar", {}), ("get_customer_by_id", {"customer_id": "C1001"}),
    ]
]
call_lists = st.lists(st.sampled_from(CALLS), max_size=12)


def dump(env):
    return env.carrier.db.model_dump(mode="json"), env.phone.db.model_dump(mode="json")


def test_environment_satisfies_the_protocol(bench):
    env = bench.environment(bench.task(TASK), solo=True)
    assert isinstance(env, Environment)
    names = {s.name for s in env.tool_specs("assistant")}
    assert len(names) == 43 and env.tool_specs("user") == []
    normal = bench.environment(bench.task(TASK))
    assert len(normal.tool_specs("assistant")) == 13 and len(normal.tool_specs("user")) == 30
    assert env.effect("get_customer_by_id") is Effect.READ_ONLY
    assert env.effect("transfer_to_human_agents") is Effect.EXTERNAL
    assert env.effect("no_such_tool") is Effect.MUTATING


def test_solo_routes_by_name_and_rejects_user_calls(bench):
    env = bench.environment(bench.task(TASK), solo=True)
    assert not env.execute(ToolCall(name="toggle_airplane_mode"), "assistant").error
    assert not env.execute(ToolCall(name="get_customer_by_id", arguments={"customer_id": "C1001"}), "assistant").error
    assert env.execute(ToolCall(name="toggle_airplane_mode"), "user").error


def test_sync_carries_carrier_facts_to_the_phone(bench):
    env = bench.environment(bench.task(TASK))
    surroundings = env.phone.db.surroundings
    assert surroundings.mobile_data_usage_exceeded and not surroundings.roaming_allowed
    env.execute(ToolCall(name="refuel_data", arguments={**OWNED, "gb_amount": 2.0}), "assistant")
    assert not surroundings.mobile_data_usage_exceeded  # 15.1 < 15 + 2
    env.execute(ToolCall(name="enable_roaming", arguments=OWNED), "assistant")
    assert surroundings.roaming_allowed
    env.execute(ToolCall(name="suspend_line", arguments={**OWNED, "reason": "x"}), "assistant")
    assert not surroundings.line_active


def test_payment_request_round_trip(bench):
    env = bench.environment(bench.task(TASK))
    env.execute(ToolCall(name="send_payment_request", arguments={"customer_id": "C1001", "bill_id": "B1002"}), "assistant")
    request = env.phone.db.surroundings.payment_request
    assert request is not None and request.bill_id == "B1002" and not request.paid
    env.execute(ToolCall(name="make_payment"), "user")
    assert env.phone.db.surroundings.payment_request is None
    assert env.carrier.db.bill("B1002").status == "Paid"


def test_failed_call_changes_nothing(bench):
    env = bench.environment(bench.task(TASK))
    before = env.snapshot().digest
    obs = env.execute(ToolCall(name="resume_line", arguments={"customer_id": "C1001", "line_id": "L1001"}), "assistant")
    assert obs.error and env.snapshot().digest == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=call_lists, after=call_lists, on_restored=call_lists)
def test_snapshots_are_independent_of_live_state(bench, before, after, on_restored):
    live = bench.environment(bench.task(TASK), solo=True)
    for call in before:
        live.execute(call, "assistant")
    expected = dump(live)
    snap = live.snapshot()
    for call in after:
        live.execute(call, "assistant")
    live_state = dump(live)
    restored = live.restore(snap)
    assert dump(restored) == expected
    for call in on_restored:
        restored.execute(call, "assistant")
    assert dump(live) == live_state  # the fork never touches live state
    assert dump(live.restore(snap)) == expected  # nor the snapshot
    assert live.restore(snap).snapshot().digest == snap.digest


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=call_lists)
def test_execution_is_deterministic(bench, calls):
    """Two environments fed the same calls give the same outputs (replay and speculation rely on it)."""
    a = bench.environment(bench.task(TASK), solo=True)
    b = bench.environment(bench.task(TASK), solo=True)
    for call in calls:
        assert a.execute(call, "assistant").content == b.execute(call, "assistant").content
    assert a.snapshot().digest == b.snapshot().digest
