"""The simulated phone (user side of tau2 telecom): rules, tools, init helpers, assertions."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentspec.errors import ToolError
from agentspec.types import Effect, ToolCall
from envs.tau2_telecom.user_data_model import (
    DEFAULT_MMSC_URL,
    ApnName,
    APNSettings,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PaymentRequest,
    PhoneDB,
    PhoneDevice,
    SignalStrength,
    SimStatus,
    VpnPerformance,
)
from envs.tau2_telecom.user_tools import (
    PhoneTools,
    can_send_mms,
    mobile_data_working,
    network_search,
    speed_test,
    status_bar,
)

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2" / "telecom"
USER_DB = DATA_DIR / "user_db.toml"

EXPECTED_TOOLS: dict[str, list[str]] = {
    "check_status_bar": [],
    "check_network_status": [],
    "check_network_mode_preference": [],
    "set_network_mode_preference": ["mode"],
    "run_speed_test": [],
    "toggle_airplane_mode": [],
    "check_sim_status": [],
    "reseat_sim_card": [],
    "toggle_data": [],
    "toggle_roaming": [],
    "check_data_restriction_status": [],
    "toggle_data_saver_mode": [],
    "check_apn_settings": [],
    "set_apn_settings": ["apn_settings"],
    "reset_apn_settings": [],
    "check_wifi_status": [],
    "toggle_wifi": [],
    "check_wifi_calling_status": [],
    "toggle_wifi_calling": [],
    "check_vpn_status": [],
    "connect_vpn": [],
    "disconnect_vpn": [],
    "check_installed_apps": [],
    "check_app_status": ["app_name"],
    "check_app_permissions": ["app_name"],
    "grant_app_permission": ["app_name", "permission"],
    "can_send_mms": [],
    "reboot_device": [],
    "check_payment_request": [],
    "make_payment": [],
}

READ_ONLY = {name for name in EXPECTED_TOOLS if name.startswith("check_")} | {"run_speed_test", "can_send_mms"}


@pytest.fixture
def db() -> PhoneDB:
    return PhoneDB.load(USER_DB)


@pytest.fixture
def phone(db: PhoneDB) -> PhoneTools:
    return PhoneTools(db)


def searched(phone: PhoneTools) -> PhoneTools:
    """The phone after one network search (5G/excellent with default surroundings)."""
    phone.simulate_network_search()
    return phone


def device_state(phone: PhoneTools) -> dict:
    return phone.db.model_dump(mode="json")


# --- data model -----------------------------------------------------------


def test_file_equals_code_defaults(db: PhoneDB) -> None:
    assert db == PhoneDB(device=PhoneDevice())
    assert db.surroundings.signal_strength == {
        NetworkTechnology.TWO_G: SignalStrength.POOR,
        NetworkTechnology.THREE_G: SignalStrength.FAIR,
        NetworkTechnology.FOUR_G: SignalStrength.GOOD,
        NetworkTechnology.FIVE_G: SignalStrength.EXCELLENT,
    }
    assert db.device.active_apn_settings == APNSettings()
    assert db.device.active_apn_settings.mmsc_url == DEFAULT_MMSC_URL
    assert db.surroundings.line_active is True
    assert db.surroundings.payment_request is None
    assert db.vpn_default_performance is VpnPerformance.EXCELLENT


def test_models_reject_unknown_fields(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        APNSettings(apn_name="internet", bogus=1)
    with pytest.raises(ValueError):
        PhoneDevice(not_a_field=True)
    bad = tmp_path / "bad.toml"
    bad.write_text("[device]\nsim_card_status = 'weird'\n")
    with pytest.raises(ValueError):
        PhoneDB.load(bad)


def test_enum_values_are_the_spec_strings() -> None:
    assert [s.value for s in SimStatus] == ["active", "missing", "locked_pin", "locked_puk"]
    assert [t.value for t in NetworkTechnology] == ["none", "2G", "3G", "4G", "5G"]
    assert [s.value for s in NetworkStatus] == ["connected", "searching", "no_service", "emergency_only"]
    assert [m.value for m in NetworkModePreference] == ["4g_5g_preferred", "4g_only", "3g_only", "2g_only"]
    assert [a.value for a in ApnName] == ["internet", "broken"]
    assert [p.value for p in VpnPerformance] == ["unknown", "poor", "fair", "good", "excellent"]


# --- toolkit surface --------------------------------------------------------


def test_exactly_the_30_tools_with_required_args(phone: PhoneTools) -> None:
    specs = {spec.name: spec for spec in phone.specs()}
    assert len(specs) == 30
    assert set(specs) == set(EXPECTED_TOOLS)
    for name, required in EXPECTED_TOOLS.items():
        spec = specs[name]
        assert spec.parameters["required"] == required, name
        assert set(spec.parameters["properties"]) == set(required), name
        assert spec.description, name
        for arg in required:
            assert spec.parameters["properties"][arg].get("description"), (name, arg)
        expected_effect = Effect.READ_ONLY if name in READ_ONLY else Effect.MUTATING
        assert spec.effect is expected_effect, name
    assert specs["set_apn_settings"].parameters["properties"]["apn_settings"]["type"] == "object"


def test_helpers_and_assertions_are_not_tools(phone: PhoneTools) -> None:
    for name in ("set_user_info", "turn_data_off", "break_vpn", "simulate_network_search", "assert_can_send_mms"):
        assert not phone.has_tool(name)
        assert callable(getattr(phone, name))


def test_read_only_tools_do_not_change_state(phone: PhoneTools) -> None:
    before = device_state(phone)
    for name in READ_ONLY:
        args = {"app_name": "messaging"} if EXPECTED_TOOLS[name] else {}
        assert isinstance(phone.call(name, args), str)
    assert device_state(phone) == before


def test_bad_keyword_is_an_error_observation(phone: PhoneTools) -> None:
    obs = phone.run(ToolCall(name="toggle_data", arguments={"oops": 1}), requestor="user")
    assert obs.error and obs.content.startswith("Error:")
    assert phone.db.device.data_enabled is True


# --- network search (3.1) ----------------------------------------------------


def test_fresh_phone_is_5g_good_until_first_search(phone: PhoneTools) -> None:
    device = phone.db.device
    assert (device.network_technology_connected, device.network_signal_strength) == ("5G", "good")
    assert speed_test(phone.db) == (220.0, "Excellent")
    network_search(phone.db)
    assert device.network_connection_status is NetworkStatus.CONNECTED
    assert (device.network_technology_connected, device.network_signal_strength) == (
        NetworkTechnology.FIVE_G,
        SignalStrength.EXCELLENT,
    )
    assert speed_test(phone.db) == (275.0, "Excellent")


@pytest.mark.parametrize(
    ("mode", "technology", "signal"),
    [
        ("4g_5g_preferred", "5G", "excellent"),
        ("4g_only", "4G", "good"),
        ("3g_only", "3G", "fair"),
        ("2g_only", "2G", "poor"),
    ],
)
def test_search_follows_preference(phone: PhoneTools, mode: str, technology: str, signal: str) -> None:
    phone.db.device.network_mode_preference = NetworkModePreference(mode)
    network_search(phone.db)
    device = phone.db.device
    assert (device.network_connection_status, device.network_technology_connected, device.network_signal_strength) == (
        "connected",
        technology,
        signal,
    )


def test_preferred_falls_back_to_4g_without_5g_signal(phone: PhoneTools) -> None:
    phone.db.surroundings.signal_strength[NetworkTechnology.FIVE_G] = SignalStrength.NONE
    network_search(phone.db)
    assert phone.db.device.network_technology_connected is NetworkTechnology.FOUR_G
    del phone.db.surroundings.signal_strength[NetworkTechnology.FIVE_G]
    network_search(phone.db)
    assert phone.db.device.network_technology_connected is NetworkTechnology.FOUR_G


def test_unknown_stored_preference_falls_back_to_4g(phone: PhoneTools) -> None:
    phone.db.device.network_mode_preference = "something_else"  # assignment is not validated
    network_search(phone.db)
    assert phone.db.device.network_technology_connected is NetworkTechnology.FOUR_G


def test_search_stays_connected_with_no_signal(phone: PhoneTools) -> None:
    # Pitfall 4: the chosen technology has no signal, yet the status is connected.
    phone.db.device.network_mode_preference = NetworkModePreference.FOUR_G_ONLY
    phone.db.surroundings.signal_strength[NetworkTechnology.FOUR_G] = SignalStrength.NONE
    network_search(phone.db)
    device = phone.db.device
    assert device.network_connection_status is NetworkStatus.CONNECTED
    assert device.network_technology_connected is NetworkTechnology.FOUR_G
    assert device.network_signal_strength is SignalStrength.NONE
    assert not mobile_data_working(phone.db)


def assert_no_service(phone: PhoneTools) -> None:
    device = phone.db.device
    assert device.network_connection_status is NetworkStatus.NO_SERVICE
    assert device.network_technology_connected is NetworkTechnology.NONE
    assert device.network_signal_strength is SignalStrength.NONE


@pytest.mark.parametrize(
    "breakage",
    [
        lambda db: setattr(db.device, "sim_card_missing", True),
        lambda db: setattr(db.device, "sim_card_status", SimStatus.LOCKED_PIN),
        lambda db: setattr(db.device, "sim_card_status", SimStatus.LOCKED_PUK),
        lambda db: setattr(db.device, "airplane_mode", True),
        lambda db: setattr(db.device.active_apn_settings, "apn_name", ApnName.BROKEN),
        lambda db: setattr(db.surroundings, "line_active", False),
    ],
    ids=["missing", "pin", "puk", "airplane", "broken_apn", "line_inactive"],
)
def test_search_gives_no_service(phone: PhoneTools, breakage) -> None:
    breakage(phone.db)
    network_search(phone.db)
    assert_no_service(phone)


def test_search_ignores_everything_else(phone: PhoneTools) -> None:
    device, around = phone.db.device, phone.db.surroundings
    device.data_enabled = False
    device.data_saver_mode = True
    device.wifi_enabled = True
    device.active_apn_settings.mmsc_url = None
    around.is_abroad = True
    around.mobile_data_usage_exceeded = True
    network_search(phone.db)
    assert (device.network_connection_status, device.network_technology_connected, device.network_signal_strength) == (
        "connected",
        "5G",
        "excellent",
    )


def test_line_inactive_needs_a_search(phone: PhoneTools) -> None:
    searched(phone)
    phone.db.surroundings.line_active = False
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED
    phone.toggle_data_saver_mode()  # no search
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED
    phone.reboot_device()
    assert_no_service(phone)
    phone.db.surroundings.line_active = True
    phone.reboot_device()
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED


# --- mobile data (3.2) and speed test (3.3) -----------------------------------


def test_mobile_data_conditions(phone: PhoneTools) -> None:
    db = searched(phone).db
    assert mobile_data_working(db)
    db.device.data_enabled = False
    assert not mobile_data_working(db)
    db.device.data_enabled = True
    db.surroundings.mobile_data_usage_exceeded = True
    assert not mobile_data_working(db)
    db.surroundings.mobile_data_usage_exceeded = False
    db.device.airplane_mode = True
    assert not mobile_data_working(db)
    db.device.airplane_mode = False
    db.device.network_connection_status = NetworkStatus.NO_SERVICE
    assert not mobile_data_working(db)


@pytest.mark.parametrize(
    ("phone_roaming", "carrier_roaming", "works"),
    [(False, False, False), (True, False, False), (False, True, False), (True, True, True)],
)
def test_abroad_needs_both_roaming_switches(phone: PhoneTools, phone_roaming: bool, carrier_roaming: bool, works: bool) -> None:
    db = searched(phone).db
    db.surroundings.is_abroad = True
    db.device.roaming_enabled = phone_roaming
    db.surroundings.roaming_allowed = carrier_roaming
    assert mobile_data_working(db) is works
    db.surroundings.is_abroad = False
    assert mobile_data_working(db) is True


@pytest.mark.parametrize(
    ("technology", "signal", "saver", "poor_vpn", "expected"),
    [
        ("5G", "excellent", False, False, (275.0, "Excellent")),
        ("5G", "good", False, False, (220.0, "Excellent")),
        ("4G", "good", False, False, (44.0, "Good")),
        ("3G", "fair", False, False, (1.5, "Poor")),
        ("2G", "poor", False, False, (0.05, "Very Poor")),
        ("5G", "excellent", True, False, (55.0, "Good")),
        ("5G", "excellent", False, True, (27.5, "Good")),
        ("5G", "excellent", True, True, (5.5, "Fair")),
    ],
)
def test_speed_reference_values(
    phone: PhoneTools, technology: str, signal: str, saver: bool, poor_vpn: bool, expected: tuple[float, str]
) -> None:
    device = phone.db.device
    device.network_technology_connected = NetworkTechnology(technology)
    device.network_signal_strength = SignalStrength(signal)
    device.data_saver_mode = saver
    if poor_vpn:
        phone.break_vpn()
    assert speed_test(phone.db) == expected


def test_speed_reference_values_through_the_tools(phone: PhoneTools) -> None:
    said = "Speed Test Result: {} Mbps ({}). {}"  # the reference's words, one advice sentence per label
    phone.set_network_mode_preference("4g_only")
    assert speed_test(phone.db) == (44.0, "Good")
    assert phone.run_speed_test() == said.format("44.00", "Good",
                                                 "Connection is good for most activities, including HD streaming.")
    phone.set_network_mode_preference("3g_only")
    assert speed_test(phone.db) == (1.5, "Poor")
    assert phone.run_speed_test() == said.format("1.50", "Poor",
                                                 "Connection is slow. Web browsing may be sluggish, streaming difficult.")
    phone.set_network_mode_preference("2g_only")
    assert speed_test(phone.db) == (0.05, "Very Poor")
    assert phone.run_speed_test() == said.format("0.05", "Very Poor",
                                                 "Connection is very slow. Basic web browsing might be difficult.")
    phone.set_network_mode_preference("4g_5g_preferred")
    assert phone.run_speed_test() == said.format("275.00", "Excellent", "Connection is very fast.")
    phone.turn_data_saver_mode_on()
    phone.break_vpn()
    assert speed_test(phone.db) == (5.5, "Fair")
    assert phone.run_speed_test() == said.format(
        "5.50", "Fair", "Connection is okay for web browsing and some standard definition streaming.")


def test_good_vpn_does_not_slow_down(phone: PhoneTools) -> None:
    searched(phone).connect_vpn()
    assert speed_test(phone.db) == (275.0, "Excellent")


def test_speed_test_without_data(phone: PhoneTools) -> None:
    phone.turn_data_off()
    assert speed_test(phone.db) == (None, "No Connection")
    assert phone.run_speed_test() == "Speed test failed: No Connection."


def test_speed_label_uses_rounded_value(phone: PhoneTools) -> None:
    # 4G poor with data saver: 55 * 0.2 * 0.2 = 2.2 (Poor); 2G poor with saver 0.01 (Very Poor).
    device = phone.db.device
    device.network_technology_connected = NetworkTechnology.TWO_G
    device.network_signal_strength = SignalStrength.POOR
    device.data_saver_mode = True
    assert speed_test(phone.db) == (0.01, "Very Poor")


# --- MMS (3.4) ---------------------------------------------------------------


def test_mms_ok_on_default_phone(phone: PhoneTools) -> None:
    assert can_send_mms(phone.db)
    assert phone.can_send_mms() == "Your messaging app can send MMS messages."


@pytest.mark.parametrize(
    "breakage",
    [
        lambda p: p.turn_data_off(),
        lambda p: p.set_network_mode_preference("2g_only"),
        lambda p: p.set_wifi_calling(True, True),
        lambda p: p.break_apn_mms_setting(),
        lambda p: p.remove_app_permission("messaging", "storage"),
        lambda p: p.remove_app_permission("messaging", "SMS"),
        lambda p: p.db.device.app_statuses.pop("messaging"),
        lambda p: p.turn_airplane_mode_on(),
        lambda p: p.break_apn_settings(),
    ],
    ids=["data_off", "2g", "wifi_calling_mms", "no_mmsc", "no_storage", "no_sms", "no_app", "airplane", "broken_apn"],
)
def test_mms_breakages(phone: PhoneTools, breakage) -> None:
    breakage(phone)
    assert not can_send_mms(phone.db)
    assert phone.can_send_mms() == "Your messaging app cannot send MMS messages."


def test_mms_edge_cases(phone: PhoneTools) -> None:
    db = phone.db
    db.device.active_apn_settings.mmsc_url = ""
    assert can_send_mms(db)  # an empty URL passes, only null fails
    phone.set_wifi_calling(True)  # Wi-Fi calling alone is fine
    assert can_send_mms(db)
    db.device.wifi_calling_enabled = False
    db.device.wifi_calling_mms_over_wifi = True
    assert can_send_mms(db)
    phone.set_network_mode_preference("3g_only")
    assert can_send_mms(db)
    phone.remove_app_permission("messaging", "phone")
    assert can_send_mms(db)


# --- status bar (3.5) ----------------------------------------------------------


def test_status_bar_order(phone: PhoneTools) -> None:
    assert status_bar(phone.db) == "📶³ Good | 5G | 📱 Data Enabled | 🔋 80%"
    db = searched(phone).db
    db.device.data_saver_mode = True
    db.device.wifi_enabled = db.device.wifi_connected = True
    db.device.wifi_ssid = "HomeNet"
    phone.connect_vpn()
    assert status_bar(db) == (
        "📶⁴ Excellent | 5G | 📱 Data Enabled | 🔽 Data Saver | 📡 Connected to HomeNet | 🔒 VPN Connected | 🔋 80%"
    )
    assert phone.check_status_bar().endswith(status_bar(db))


def test_status_bar_no_service_and_airplane(phone: PhoneTools) -> None:
    phone.unseat_sim_card()
    assert status_bar(phone.db) == "📵 No Signal | 📵 Data Disabled | 🔋 80%"
    phone.reseat_sim_card()
    phone.turn_data_off()
    assert status_bar(phone.db) == "📶⁴ Excellent | 5G | 📵 Data Disabled | 🔋 80%"
    phone.turn_airplane_mode_on()
    assert status_bar(phone.db) == "✈️ Airplane Mode | 🔋 80%"


def test_status_bar_wifi_needs_enabled_and_connected(phone: PhoneTools) -> None:
    phone.db.device.wifi_enabled = True
    assert "📡" not in status_bar(phone.db)
    phone.db.device.wifi_connected = True
    assert "📡 Enabled" in status_bar(phone.db)


# --- individual tools ------------------------------------------------------------


BAR_TOOLS = [
    "set_network_mode_preference",
    "toggle_airplane_mode",
    "reseat_sim_card",
    "toggle_data",
    "toggle_roaming",
    "toggle_data_saver_mode",
    "set_apn_settings",
    "reset_apn_settings",
    "toggle_wifi",
    "toggle_wifi_calling",
    "connect_vpn",
    "disconnect_vpn",
    "grant_app_permission",
    "reboot_device",
]


@pytest.mark.parametrize("name", BAR_TOOLS)
def test_bar_tools_end_with_status_bar(phone: PhoneTools, name: str) -> None:
    args = {
        "set_network_mode_preference": {"mode": "4g_only"},
        "set_apn_settings": {"apn_settings": {"apn_name": "internet"}},
        "grant_app_permission": {"app_name": "messaging", "permission": "network"},
    }.get(name, {})
    if name == "disconnect_vpn":
        phone.connect_vpn()
    out = phone.call(name, args)
    assert out.endswith(status_bar(phone.db)), name


def test_check_network_status_reports_everything(phone: PhoneTools) -> None:
    phone.db.device.wifi_enabled = phone.db.device.wifi_connected = True
    phone.db.device.wifi_ssid = "CafeNet"
    phone.db.device.roaming_enabled = True
    out = phone.check_network_status()
    for fact in ("Airplane Mode: OFF", "active", "connected", "good", "5G", "Mobile Data Enabled: Yes", "Data Roaming Enabled: Yes", "Wi-Fi Radio: ON", "Wi-Fi Connected: Yes", "CafeNet"):
        assert fact in out
    phone.unseat_sim_card()
    out = phone.check_network_status()
    assert "missing" in out and "no_service" in out


def test_check_sim_status(phone: PhoneTools) -> None:
    assert phone.check_sim_status() == "Your SIM card is active and working."
    phone.unseat_sim_card()
    assert phone.check_sim_status() == "No SIM card detected in the phone."
    phone.reseat_sim_card()
    phone.lock_sim_card("pin")
    assert phone.check_sim_status() == "The SIM card is locked with a PIN code."
    phone.db.device.sim_card_missing = True
    assert phone.check_sim_status() == "No SIM card detected in the phone."  # missing wins over locked
    phone.db.device.sim_card_missing = False
    phone.lock_sim_card("puk")
    assert phone.check_sim_status() == "The SIM card is locked with a PUK code."


def test_reseat_does_not_unlock(phone: PhoneTools) -> None:
    phone.lock_sim_card("pin")
    phone.reseat_sim_card()
    assert phone.db.device.sim_card_status is SimStatus.LOCKED_PIN
    assert_no_service(phone)
    with pytest.raises(ValueError):
        phone.lock_sim_card("other")


def test_set_network_mode_preference(phone: PhoneTools) -> None:
    assert "4g_5g_preferred" in phone.check_network_mode_preference()
    out = phone.set_network_mode_preference("2g_only")
    assert phone.db.device.network_mode_preference is NetworkModePreference.TWO_G_ONLY
    assert phone.db.device.network_technology_connected is NetworkTechnology.TWO_G
    assert "2g_only" in out and "2g_only" in phone.check_network_mode_preference()


def test_invalid_network_mode_is_soft_and_does_not_search(phone: PhoneTools) -> None:
    before = device_state(phone)
    out = phone.set_network_mode_preference("5g_only")
    assert out == (
        "Failed to set network mode: '5g_only' is not a valid option. Please use one of: 4g_5g_preferred, 4g_only, "
        f"3g_only, 2g_only\nStatus Bar: {status_bar(phone.db)}"
    )
    assert device_state(phone) == before  # still 5G/good: no search ran
    obs = phone.run(ToolCall(name="set_network_mode_preference", arguments={"mode": "LTE"}))
    assert not obs.error


def test_airplane_on_clears_wifi_and_vpn(phone: PhoneTools) -> None:
    device = phone.db.device
    device.wifi_enabled = device.wifi_connected = True
    device.wifi_ssid = "HomeNet"
    device.wifi_signal_strength = SignalStrength.GOOD
    phone.connect_vpn()
    out = phone.toggle_airplane_mode()
    assert device.airplane_mode is True and "ON" in out
    assert (device.wifi_connected, device.wifi_ssid, device.wifi_signal_strength) == (False, None, SignalStrength.NONE)
    assert device.wifi_enabled is True  # the radio switch is never touched
    assert (device.vpn_connected, device.vpn_details) == (False, None)
    assert_no_service(phone)


def test_airplane_off_searches_and_clears_wifi(phone: PhoneTools) -> None:
    phone.turn_airplane_mode_on()
    device = phone.db.device
    device.wifi_enabled = device.wifi_connected = True
    device.wifi_ssid = "HomeNet"
    out = phone.toggle_airplane_mode()
    assert device.airplane_mode is False and "OFF" in out
    assert (device.wifi_connected, device.wifi_ssid) == (False, None)
    assert device.wifi_enabled is True
    assert (device.network_connection_status, device.network_technology_connected, device.network_signal_strength) == (
        "connected",
        "5G",
        "excellent",
    )


def test_toggle_data_and_roaming_flip_and_search(phone: PhoneTools) -> None:
    phone.toggle_data()
    assert phone.db.device.data_enabled is False
    assert phone.db.device.network_signal_strength is SignalStrength.EXCELLENT  # a search ran
    phone.toggle_data()
    assert phone.db.device.data_enabled is True
    phone.toggle_roaming()
    assert phone.db.device.roaming_enabled is True
    phone.toggle_roaming()
    assert phone.db.device.roaming_enabled is False


def test_data_saver_toggle_does_not_search(phone: PhoneTools) -> None:
    assert "OFF" in phone.check_data_restriction_status()
    phone.toggle_data_saver_mode()
    assert phone.db.device.data_saver_mode is True
    assert "ON" in phone.check_data_restriction_status()
    assert phone.db.device.network_signal_strength is SignalStrength.GOOD  # no search


def test_check_apn_settings(phone: PhoneTools) -> None:
    out = phone.check_apn_settings()
    assert "internet" in out and DEFAULT_MMSC_URL in out
    phone.break_apn_mms_setting()
    assert "Not Set" in phone.check_apn_settings()


def test_reset_apn_only_applies_at_reboot(phone: PhoneTools) -> None:
    # Pitfall 1: the reset is armed, then performed by the reboot.
    phone.break_apn_settings()
    phone.break_apn_mms_setting()
    assert_no_service(phone)
    out = phone.reset_apn_settings()
    apn = phone.db.device.active_apn_settings
    assert "reboot" in out.lower()
    assert apn.reset_at_reboot is True
    assert apn.apn_name is ApnName.BROKEN and apn.mmsc_url is None
    assert_no_service(phone)  # the search after the reset still sees the broken APN
    phone.reboot_device()
    assert phone.db.device.active_apn_settings == APNSettings()
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED
    assert can_send_mms(phone.db)


def test_reboot_without_reset_keeps_apn_and_other_settings(phone: PhoneTools) -> None:
    phone.break_apn_mms_setting()
    phone.turn_data_saver_mode_on()
    phone.connect_vpn()
    phone.toggle_wifi()
    phone.toggle_wifi_calling()
    phone.reboot_device()
    device = phone.db.device
    assert device.active_apn_settings.mmsc_url is None
    assert device.data_saver_mode and device.vpn_connected and device.wifi_enabled and device.wifi_calling_enabled
    assert device.network_signal_strength is SignalStrength.EXCELLENT


def test_reboot_keeps_airplane_mode(phone: PhoneTools) -> None:
    phone.turn_airplane_mode_on()
    phone.reboot_device()
    assert phone.db.device.airplane_mode is True
    assert_no_service(phone)


def test_set_apn_settings_builds_a_complete_record(phone: PhoneTools) -> None:
    phone.break_apn_settings()
    phone.break_apn_mms_setting()
    said = phone.set_apn_settings({"apn_name": "internet"})
    assert said == f"APN settings set to: internet\nStatus Bar: {status_bar(phone.db)}"
    assert phone.db.device.active_apn_settings == APNSettings()
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED
    phone.set_apn_settings({"apn_name": "broken", "mmsc_url": "http://x"})
    assert phone.db.device.active_apn_settings.mmsc_url == "http://x"
    assert_no_service(phone)


@pytest.mark.parametrize(
    "settings",
    [{"apn_name": "nope"}, {"apn_name": "internet", "colour": "red"}, "internet"],
    ids=["bad_name", "unknown_key", "not_a_dict"],
)
def test_set_apn_settings_errors(phone: PhoneTools, settings) -> None:
    before = device_state(phone)
    with pytest.raises(ToolError):
        phone.set_apn_settings(settings)
    assert device_state(phone) == before
    obs = phone.run(ToolCall(name="set_apn_settings", arguments={"apn_settings": settings}), requestor="user")
    assert obs.error and obs.content.startswith("Error:")
    if isinstance(settings, str):  # the reference's words: it reads .apn_name off the value
        assert obs.content == "Error: 'str' object has no attribute 'apn_name'"
    else:  # pydantic's own text, as the reference answers
        assert obs.content.startswith("Error: 1 validation error for APNSettings\n")


def test_wifi_status_and_toggle(phone: PhoneTools) -> None:
    assert phone.check_wifi_status() == "Wi-Fi is turned OFF."
    assert phone.toggle_wifi() == f"Wi-Fi is now ON.\nStatus Bar: {status_bar(phone.db)}"
    device = phone.db.device
    assert device.wifi_enabled is True and device.wifi_connected is False  # turning on never connects
    assert phone.check_wifi_status() == "Wi-Fi is ON but not connected to any network."
    device.wifi_connected = True
    device.wifi_ssid = "HomeNet"
    device.wifi_signal_strength = SignalStrength.FAIR
    assert phone.check_wifi_status() == "Wi-Fi is ON and connected to 'HomeNet'. Signal strength: fair."
    assert phone.check_network_status().endswith("\nWi-Fi Connected: Yes\nConnected Wi-Fi Network: HomeNet")
    phone.toggle_wifi()
    assert (device.wifi_enabled, device.wifi_connected, device.wifi_ssid, device.wifi_signal_strength) == (
        False,
        False,
        None,
        SignalStrength.NONE,
    )
    assert device.network_signal_strength is SignalStrength.GOOD  # no search


def test_toggle_wifi_refused_in_airplane_mode(phone: PhoneTools) -> None:
    phone.turn_airplane_mode_on()
    before = device_state(phone)
    obs = phone.run(ToolCall(name="toggle_wifi", arguments={}), requestor="user")
    assert not obs.error
    assert obs.content == f"Cannot change Wi-Fi settings while Airplane Mode is ON.\nStatus Bar: {status_bar(phone.db)}"
    assert device_state(phone) == before


def test_wifi_calling_toggle_leaves_mms_flag(phone: PhoneTools) -> None:
    assert "OFF" in phone.check_wifi_calling_status()
    phone.db.device.wifi_calling_mms_over_wifi = True
    phone.toggle_wifi_calling()
    assert phone.db.device.wifi_calling_enabled is True
    assert phone.db.device.wifi_calling_mms_over_wifi is True
    assert "ON" in phone.check_wifi_calling_status()
    assert phone.db.device.network_signal_strength is SignalStrength.GOOD  # no search


def test_vpn_connect_and_disconnect(phone: PhoneTools) -> None:
    assert "OFF" in phone.check_vpn_status()
    phone.connect_vpn()
    device = phone.db.device
    assert device.vpn_connected is True
    assert device.vpn_details.model_dump(mode="json") == {
        "server_address": "192.168.1.1",
        "protocol": "OpenVPN",
        "server_performance": "excellent",
    }
    assert phone.check_vpn_status() == (  # the performance as the reference prints its enum
        "VPN is ON and connected. Details: {'server_address': '192.168.1.1', 'protocol': 'OpenVPN', "
        "'server_performance': <PerformanceLevel.EXCELLENT: 'excellent'>}"
    )
    again = phone.connect_vpn()
    assert again == "VPN already connected."  # no status bar
    assert phone.disconnect_vpn() == f"VPN disconnected successfully.\nStatus Bar: {status_bar(phone.db)}"
    assert (device.vpn_connected, device.vpn_details) == (False, None)
    assert phone.check_vpn_status() == "VPN is turned OFF."
    soft = phone.run(ToolCall(name="disconnect_vpn", arguments={}), requestor="user")
    assert not soft.error
    assert soft.content == f"No active VPN connection to disconnect.\nStatus Bar: {status_bar(phone.db)}"


def test_vpn_enabled_setting_without_connection(phone: PhoneTools) -> None:
    phone.db.device.vpn_enabled_setting = True
    assert phone.check_vpn_status() == "VPN is turned ON in settings, but currently not connected."


def test_connect_vpn_has_no_airplane_check(phone: PhoneTools) -> None:
    phone.turn_airplane_mode_on()
    phone.connect_vpn()
    assert phone.db.device.vpn_connected is True


def test_break_vpn_then_reconnect_is_poor(phone: PhoneTools) -> None:
    searched(phone).break_vpn()
    assert phone.db.device.vpn_details.server_performance is VpnPerformance.POOR
    assert "poor" in phone.check_vpn_status()
    assert speed_test(phone.db) == (27.5, "Good")
    phone.disconnect_vpn()
    assert speed_test(phone.db) == (275.0, "Excellent")
    phone.connect_vpn()
    assert phone.db.device.vpn_details.server_performance is VpnPerformance.POOR
    assert speed_test(phone.db) == (27.5, "Good")


def test_break_vpn_does_not_leak_into_other_phones(phone: PhoneTools) -> None:
    phone.break_vpn()
    other = PhoneTools(PhoneDB.load(USER_DB))
    other.connect_vpn()
    assert other.db.device.vpn_details.server_performance is VpnPerformance.EXCELLENT


def test_break_vpn_when_already_connected(phone: PhoneTools) -> None:
    phone.connect_vpn()
    phone.break_vpn()
    assert phone.db.device.vpn_connected is True
    assert phone.db.device.vpn_details.server_performance is VpnPerformance.POOR


def test_apps_and_permissions(phone: PhoneTools) -> None:
    assert phone.check_installed_apps() == "The following apps are installed on the phone: messaging, browser"
    assert phone.check_app_status("messaging") == (
        "Status for App: messaging\n - Permissions Granted:\n   - sms\n   - storage\n   - phone"
    )
    assert phone.check_app_permissions("browser") == "App 'browser' has permission for: storage, network."
    assert phone.check_app_status("camera") == "App 'camera' not found on this phone."
    assert phone.check_app_permissions("camera") == "App 'camera' not found on this phone."
    phone.remove_app_permission("browser", "storage")
    phone.remove_app_permission("browser", "network")
    assert phone.check_app_status("browser") == "Status for App: browser\n - Permissions: None granted."
    assert phone.check_app_permissions("browser") == "App 'browser' currently has no permissions granted."


def test_grant_permission_lowercases(phone: PhoneTools) -> None:
    phone.remove_app_permission("messaging", "storage")
    assert phone.db.device.app_statuses["messaging"].permissions.storage is False
    out = phone.grant_app_permission("messaging", "STORAGE")
    assert phone.db.device.app_statuses["messaging"].permissions.storage is True
    assert out == f"Success. Permission 'storage' granted to app 'messaging'.\nStatus Bar: {status_bar(phone.db)}"


@pytest.mark.parametrize(
    ("app", "permission", "said"),
    [
        ("camera", "sms", "Error. App 'camera' not found. Cannot grant permission."),
        ("messaging", "Camera", "Error. Permission 'camera' not tracked for app 'messaging', available permissions: "
                                "['sms', 'storage', 'phone', 'network']"),
    ],
)
def test_grant_permission_soft_failures(phone: PhoneTools, app: str, permission: str, said: str) -> None:
    before = device_state(phone)
    obs = phone.run(ToolCall(name="grant_app_permission", arguments={"app_name": app, "permission": permission}))
    assert not obs.error and obs.content == f"{said}\nStatus Bar: {status_bar(phone.db)}"
    assert device_state(phone) == before


def test_payments(phone: PhoneTools) -> None:
    assert phone.check_payment_request() == "No payment request has been made."
    before = device_state(phone)
    soft = phone.run(ToolCall(name="make_payment", arguments={}), requestor="user")
    assert not soft.error and soft.content == "You do not have a payment request."
    assert device_state(phone) == before
    phone.db.surroundings.payment_request = PaymentRequest(bill_id="B1234321", amount_due=65.0)
    assert phone.check_payment_request() == "You have a payment request for bill B1234321 of 65.0 USD."
    out = phone.make_payment()
    assert phone.db.surroundings.payment_request.paid is True
    assert out == "Payment of 65.0 USD has been made for bill B1234321."


# --- initialisation helpers ---------------------------------------------------------


def test_set_user_info_and_location(phone: PhoneTools) -> None:
    phone.set_user_info("John Smith", "555-123-2002")
    phone.set_user_location(True)
    around = phone.db.surroundings
    assert (around.name, around.phone_number, around.is_abroad) == ("John Smith", "555-123-2002", True)


def test_turn_helpers_are_idempotent(phone: PhoneTools) -> None:
    device = phone.db.device
    for _ in range(2):
        phone.turn_airplane_mode_on()
        assert device.airplane_mode is True
    assert_no_service(phone)
    for _ in range(2):
        phone.turn_airplane_mode_off()
        assert device.airplane_mode is False
    assert device.network_connection_status is NetworkStatus.CONNECTED
    for _ in range(2):
        phone.turn_data_off()
        assert device.data_enabled is False
    for _ in range(2):
        phone.turn_data_on()
        assert device.data_enabled is True
    for _ in range(2):
        phone.turn_roaming_on()
        assert device.roaming_enabled is True
    for _ in range(2):
        phone.turn_roaming_off()
        assert device.roaming_enabled is False
    for _ in range(2):
        phone.turn_data_saver_mode_on()
        assert device.data_saver_mode is True
    for _ in range(2):
        phone.turn_data_saver_mode_off()
        assert device.data_saver_mode is False


def test_turn_data_off_searches_but_turn_data_on_does_not(phone: PhoneTools) -> None:
    phone.turn_data_on()
    assert phone.db.device.network_signal_strength is SignalStrength.GOOD
    phone.turn_data_off()
    assert phone.db.device.network_signal_strength is SignalStrength.EXCELLENT


def test_data_saver_helper_does_not_search(phone: PhoneTools) -> None:
    phone.turn_data_saver_mode_on()
    assert phone.db.device.network_signal_strength is SignalStrength.GOOD


def test_unseat_and_reseat(phone: PhoneTools) -> None:
    phone.unseat_sim_card()
    assert phone.db.device.sim_card_missing is True
    assert_no_service(phone)
    phone.reseat_sim_card()
    assert phone.db.device.sim_card_missing is False
    assert phone.db.device.network_connection_status is NetworkStatus.CONNECTED


def test_break_apn_settings_and_mms_setting(phone: PhoneTools) -> None:
    phone.break_apn_mms_setting()
    assert phone.db.device.active_apn_settings.mmsc_url is None
    assert phone.db.device.network_signal_strength is SignalStrength.GOOD  # no search
    phone.break_apn_settings()
    assert phone.db.device.active_apn_settings.apn_name is ApnName.BROKEN
    assert_no_service(phone)


def test_set_wifi_calling(phone: PhoneTools) -> None:
    phone.set_wifi_calling(True, True)
    assert (phone.db.device.wifi_calling_enabled, phone.db.device.wifi_calling_mms_over_wifi) == (True, True)
    phone.set_wifi_calling(True)
    assert (phone.db.device.wifi_calling_enabled, phone.db.device.wifi_calling_mms_over_wifi) == (True, True)
    phone.set_wifi_calling(False, None)
    assert (phone.db.device.wifi_calling_enabled, phone.db.device.wifi_calling_mms_over_wifi) == (False, True)
    phone.set_wifi_calling(False, False)
    assert phone.db.device.wifi_calling_mms_over_wifi is False


def test_remove_app_permission_soft_failures(phone: PhoneTools) -> None:
    before = device_state(phone)
    assert isinstance(phone.remove_app_permission("camera", "sms"), str)
    assert isinstance(phone.remove_app_permission("messaging", "camera"), str)
    assert device_state(phone) == before


def test_init_helpers_reachable_by_name(phone: PhoneTools) -> None:
    phone.call_function("set_user_info", {"name": "John Smith", "phone_number": "555-123-2002"})
    phone.call_function("set_network_mode_preference", {"mode": "2g_only"})
    phone.call_function("lock_sim_card", {"mode": "pin"})
    assert phone.db.surroundings.phone_number == "555-123-2002"
    assert_no_service(phone)


# --- assertions (7.3) ----------------------------------------------------------------


def test_assertions_return_bools(phone: PhoneTools) -> None:
    calls = [
        ("assert_airplane_mode_status", {"expected_status": False}),
        ("assert_service_status", {"expected_status": "connected"}),
        ("assert_mobile_data_status", {"expected_status": True}),
        ("assert_mobile_roaming_status", {"expected_status": False}),
        ("assert_mobile_data_saver_mode_status", {"expected_status": False}),
        ("assert_internet_speed", {"expected_speed": 200, "expected_desc": "excellent"}),
        ("assert_internet_not_excellent", {}),
        ("assert_can_send_mms", {"expected_status": True}),
        ("assert_mobile_data_usage_exceeded", {"expected_status": False}),
    ]
    results = {name: phone.call_function(name, args) for name, args in calls}
    assert all(type(value) is bool for value in results.values())
    assert results == {name: name != "assert_internet_not_excellent" for name, _ in calls}


def test_assert_airplane_mode_status(phone: PhoneTools) -> None:
    phone.turn_airplane_mode_on()
    assert phone.assert_airplane_mode_status(True)
    assert not phone.assert_airplane_mode_status(False)


def test_assert_service_status(phone: PhoneTools) -> None:
    assert phone.assert_service_status("connected")
    assert not phone.assert_service_status("no_service")
    phone.lock_sim_card("pin")
    assert phone.assert_service_status("no_service")
    with pytest.raises(ValueError):
        phone.assert_service_status("offline")


def test_assert_mobile_data_status(phone: PhoneTools) -> None:
    phone.set_user_location(True)
    assert phone.assert_mobile_data_status(False)
    phone.turn_roaming_on()
    phone.db.surroundings.roaming_allowed = True
    assert phone.assert_mobile_data_status(True)
    phone.db.surroundings.mobile_data_usage_exceeded = True
    assert phone.assert_mobile_data_status(False)


def test_assert_roaming_and_data_saver(phone: PhoneTools) -> None:
    phone.turn_roaming_on()
    assert phone.assert_mobile_roaming_status(True)
    assert not phone.assert_mobile_roaming_status(False)
    phone.turn_data_saver_mode_on()
    assert phone.assert_mobile_data_saver_mode_status(True)
    assert not phone.assert_mobile_data_saver_mode_status(False)


def test_assert_internet_speed(phone: PhoneTools) -> None:
    searched(phone)
    assert phone.assert_internet_speed(200, "excellent")
    assert phone.assert_internet_speed(275.0, "EXCELLENT")
    assert not phone.assert_internet_speed(275.01)
    assert not phone.assert_internet_speed(200, "good")
    phone.set_network_mode_preference("4g_only")
    assert not phone.assert_internet_speed(200, "excellent")
    assert phone.assert_internet_speed(44.0, "Good")
    phone.turn_data_off()
    assert phone.assert_internet_speed(0.0, "no connection")  # no speed counts as 0.0
    assert phone.assert_internet_speed(0.0)
    assert not phone.assert_internet_speed(0.01)


def test_mobile_data_task_needs_5g_good_or_better(phone: PhoneTools) -> None:
    phone.turn_data_saver_mode_on()
    assert not phone.assert_internet_speed(200, "excellent")
    phone.turn_data_saver_mode_off()
    phone.break_vpn()
    assert not phone.assert_internet_speed(200, "excellent")
    phone.disconnect_vpn()
    assert phone.assert_internet_speed(200, "excellent")  # fresh 5G/good gives 220


def test_assert_internet_not_excellent(phone: PhoneTools) -> None:
    assert not phone.assert_internet_not_excellent()
    phone.turn_data_saver_mode_on()
    assert phone.assert_internet_not_excellent()
    phone.turn_data_off()
    assert phone.assert_internet_not_excellent()  # no connection passes


def test_assert_can_send_mms(phone: PhoneTools) -> None:
    assert phone.assert_can_send_mms(True)
    phone.break_apn_mms_setting()
    assert phone.assert_can_send_mms(False)
    phone.reset_apn_settings()
    assert phone.assert_can_send_mms(False)
    phone.reboot_device()
    assert phone.assert_can_send_mms(True)


def test_assert_mobile_data_usage_exceeded(phone: PhoneTools) -> None:
    assert phone.assert_mobile_data_usage_exceeded(False)
    phone.db.surroundings.mobile_data_usage_exceeded = True
    assert phone.assert_mobile_data_usage_exceeded(True)
    assert not phone.assert_mobile_data_usage_exceeded(False)


# --- gold fixes from 7.4 reach the asserted end state --------------------------------


@pytest.mark.parametrize(
    ("init", "fix"),
    [
        (lambda p: p.turn_airplane_mode_on(), lambda p: p.toggle_airplane_mode()),
        (lambda p: p.unseat_sim_card(), lambda p: p.reseat_sim_card()),
        (lambda p: p.break_apn_settings(), lambda p: (p.reset_apn_settings(), p.reboot_device())),
        (lambda p: p.turn_data_off(), lambda p: p.toggle_data()),
        (lambda p: p.set_network_mode_preference("2g_only"), lambda p: p.set_network_mode_preference("4g_5g_preferred")),
        (lambda p: p.set_wifi_calling(True, True), lambda p: p.toggle_wifi_calling()),
        (lambda p: p.break_apn_mms_setting(), lambda p: (p.reset_apn_settings(), p.reboot_device())),
        (
            lambda p: (p.remove_app_permission("messaging", "sms"), p.remove_app_permission("messaging", "storage")),
            lambda p: (p.grant_app_permission("messaging", "sms"), p.grant_app_permission("messaging", "storage")),
        ),
    ],
    ids=["airplane", "sim", "apn", "data", "network_pref", "wifi_calling", "mmsc", "permissions"],
)
def test_gold_fixes_restore_mms(phone: PhoneTools, init, fix) -> None:
    phone.set_user_info("John Smith", "555-123-2002")
    init(phone)
    assert phone.assert_can_send_mms(False)
    fix(phone)
    assert phone.assert_can_send_mms(True)


def test_gold_fixes_restore_excellent_data(phone: PhoneTools) -> None:
    phone.turn_data_saver_mode_on()
    phone.break_vpn()
    assert phone.assert_mobile_data_status(True)
    assert not phone.assert_internet_speed(200, "excellent")
    phone.toggle_data_saver_mode()
    phone.disconnect_vpn()
    assert phone.assert_internet_speed(200, "excellent")


def test_abroad_roaming_fix(phone: PhoneTools) -> None:
    phone.set_user_location(True)
    phone.turn_roaming_off()
    phone.db.surroundings.roaming_allowed = True  # what sync writes after enable_roaming
    assert phone.assert_mobile_data_status(False)
    phone.toggle_roaming()
    assert phone.assert_mobile_data_status(True)
