"""Evaluator edge cases: action matching, replay checks, non-stop endings, pass^k."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from agentspec.bench.tau2.evaluator import arguments_match
from agentspec.cli.commands.evaluate import play_script
from agentspec.errors import ReplayMismatch
from agentspec.results import pass_hat_k
from agentspec.types import Message, TerminationReason, ToolCall

TRANSFER_TASK = "[service_issue]lock_sim_card_pin[PERSONA:Hard]"
CONTRACT_TASK = "[service_issue]contract_end_suspension[PERSONA:Hard]"
OVERDUE_TASK = "[service_issue]overdue_bill_suspension[PERSONA:Easy]"
AIRPLANE_TASK = "[service_issue]airplane_mode_on[PERSONA:None]"


def gold(name, compare_args=None, **arguments):
    return SimpleNamespace(name=name, arguments=arguments, compare_args=compare_args)


def test_compare_args_none_uses_the_predicted_keys():
    g = gold("refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0)
    assert arguments_match(g, ToolCall(name="refuel_data", arguments={"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2}))
    assert arguments_match(g, ToolCall(name="refuel_data", arguments={"customer_id": "C1001"}))  # omitted gold arg still matches
    assert not arguments_match(g, ToolCall(name="refuel_data", arguments={"customer_id": "C1001", "extra": 1}))
    assert not arguments_match(g, ToolCall(name="refuel_data", arguments={"gb_amount": 3.0}))
    assert not arguments_match(g, ToolCall(name="other", arguments={}))


def test_compare_args_empty_compares_names_only():
    g = gold("transfer_to_human_agents", compare_args=[], summary="x")
    assert arguments_match(g, ToolCall(name="transfer_to_human_agents", arguments={"summary": "anything"}))


def test_pass_hat_k():
    assert pass_hat_k([(4, 4), (4, 0)]) == {1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5}
    assert pass_hat_k([(4, 2)])[1] == pytest.approx(0.5)
    assert pass_hat_k([(4, 2)])[2] == pytest.approx(1 / 6)
    assert pass_hat_k([(2, 1), (3, 3)]) == {1: pytest.approx(0.75), 2: pytest.approx(0.5)}
    assert pass_hat_k([]) == {}


def score(bench, task_id, calls, end="assistant", solo=False):
    task = bench.task(task_id)

    async def go():
        return await play_script(bench, task, calls, end=end, solo=solo)

    return anyio.run(go)


def test_transfer_task_needs_the_transfer_call(bench):
    transfer = ("assistant", ToolCall(name="transfer_to_human_agents", arguments={"summary": "locked SIM"}))
    assert score(bench, TRANSFER_TASK, [transfer]).reward == 1.0
    assert score(bench, TRANSFER_TASK, []).reward == 0.0
    # requestor is ignored by the action check, even when the call itself errored
    episode = score(bench, TRANSFER_TASK, [("user", transfer[1])])
    assert episode.trajectory.num_errors == 1
    assert [c.passed for c in episode.evaluation.actions] == [True]


def test_contract_end_is_unsolvable_by_policy(bench):
    fix = [
        ("assistant", ToolCall(name="send_payment_request", arguments={"customer_id": "C1001", "bill_id": "B1234321"})),
        ("user", ToolCall(name="make_payment")),
        ("assistant", ToolCall(name="resume_line", arguments={"customer_id": "C1001", "line_id": "L1002"})),
        ("user", ToolCall(name="reboot_device")),
        ("assistant", ToolCall(name="transfer_to_human_agents", arguments={"summary": "x"})),
    ]
    episode = score(bench, CONTRACT_TASK, fix)
    assert episode.reward == 0.0
    assert [c.name for c in episode.evaluation.env_assertions if not c.passed] == ["assert_service_status"]
    assert score(bench, OVERDUE_TASK, fix[:4]).reward == 1.0


def test_overdue_without_payment_fails_the_bill_assertion(bench):
    calls = [
        ("assistant", ToolCall(name="resume_line", arguments={"customer_id": "C1001", "line_id": "L1002"})),
        ("user", ToolCall(name="reboot_device")),
    ]
    checks = {c.name: c.passed for c in score(bench, OVERDUE_TASK, calls).evaluation.env_assertions}
    assert checks == {"assert_service_status": True, "assert_no_overdue_bill": False}


def test_user_stop_scores_like_agent_stop(bench):
    fix = [("user", ToolCall(name="toggle_airplane_mode"))]
    assert score(bench, AIRPLANE_TASK, fix, end="user").trajectory.termination is TerminationReason.USER_STOP
    assert score(bench, AIRPLANE_TASK, fix, end="user").reward == 1.0


def test_non_stop_ending_scores_zero(bench):
    episode = score(bench, AIRPLANE_TASK, [("user", ToolCall(name="toggle_airplane_mode"))])
    task = bench.task(AIRPLANE_TASK)
    cut = episode.trajectory.model_copy(update={"termination": TerminationReason.MAX_STEPS})
    evaluation = bench.evaluate_trajectory(task, cut, solo=False)
    assert evaluation.reward == 0.0 and all(c.passed for c in evaluation.env_assertions)


def test_replay_mismatch_aborts_evaluation(bench):
    episode = score(bench, AIRPLANE_TASK, [("user", ToolCall(name="check_sim_status"))])
    messages = [
        m.model_copy(update={"content": "tampered"}) if m.role == "tool" else m for m in episode.trajectory.messages
    ]
    tampered = episode.trajectory.model_copy(update={"messages": messages})
    with pytest.raises(ReplayMismatch, match="check_sim_status"):
        bench.evaluate_trajectory(bench.task(AIRPLANE_TASK), tampered, solo=False)


def test_alternative_fix_scores_one(bench):
    """ENV_ASSERTION tasks accept any path to the asserted end state (behaviour spec §10)."""
    task_id = "[service_issue]break_apn_settings[PERSONA:None]"
    alt = [("user", ToolCall(name="set_apn_settings", arguments={"apn_settings": {"apn_name": "internet"}}))]
    assert score(bench, task_id, alt).reward == 1.0


def test_messages_record_requestors(bench):
    episode = score(bench, AIRPLANE_TASK, [("user", ToolCall(name="toggle_airplane_mode"))])
    tools = [m for m in episode.trajectory.messages if m.role == "tool"]
    assert [m.requestor for m in tools] == ["user"]
    assert isinstance(episode.trajectory.messages[0], Message)


def test_every_party_calling_the_others_tools_still_scores(bench):
    """Each call made by the wrong party is an error observation of its own; scoring replays them all (no mismatch
    from two calls sharing an id) and the error limit ends the episode as tau2's would."""
    task_id = ("[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_app_sms_permission|"
               "data_mode_off|data_usage_exceeded|unseat_sim_card|user_abroad_roaming_disabled_off[PERSONA:None]")
    swapped = {"assistant": "user", "user": "assistant"}
    flipped = [(swapped[r], call) for r, call in bench.gold_actions(bench.task(task_id))]
    episode = score(bench, task_id, flipped)
    assert episode.error is None and episode.reward == 0.0
    assert episode.trajectory.num_errors == 9 and episode.trajectory.termination is TerminationReason.AGENT_STOP
