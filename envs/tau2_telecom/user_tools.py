"""The simulated phone: derived rules over a :class:`PhoneDB` and the user's 30 tools.

The module-level functions are the pure rules of the domain (network search,
mobile data, speed test, MMS, status bar).  :class:`PhoneTools` exposes the
tools the simulated user may call, plus non-tool helpers that task
initialisation and evaluation call by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from agentspec.errors import ToolError
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect
from envs.tau2_telecom.user_data_model import (
    DEFAULT_VPN_PROTOCOL,
    DEFAULT_VPN_SERVER,
    ApnName,
    APNSettings,
    AppPermissions,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PhoneDB,
    SignalStrength,
    SimStatus,
    VpnDetails,
    VpnPerformance,
)

# ---------------------------------------------------------------------------
# Derived rules
# ---------------------------------------------------------------------------

_PREFERENCE_TECHNOLOGY: dict[NetworkModePreference, NetworkTechnology] = {
    NetworkModePreference.FOUR_G_ONLY: NetworkTechnology.FOUR_G,
    NetworkModePreference.THREE_G_ONLY: NetworkTechnology.THREE_G,
    NetworkModePreference.TWO_G_ONLY: NetworkTechnology.TWO_G,
}

# (min, max) download speed in Mbps per technology.
_SPEED_RANGE: dict[NetworkTechnology, tuple[float, float]] = {
    NetworkTechnology.TWO_G: (0.1, 0.4),
    NetworkTechnology.THREE_G: (1.0, 5.0),
    NetworkTechnology.FOUR_G: (10.0, 100.0),
    NetworkTechnology.FIVE_G: (50.0, 500.0),
    NetworkTechnology.NONE: (0.0, 0.0),
}

_SIGNAL_FACTOR: dict[SignalStrength, float] = {
    SignalStrength.NONE: 0.0,
    SignalStrength.POOR: 0.2,
    SignalStrength.FAIR: 0.5,
    SignalStrength.GOOD: 0.8,
    SignalStrength.EXCELLENT: 1.0,
}

DATA_SAVER_FACTOR = 0.2
POOR_VPN_FACTOR = 0.1
NO_CONNECTION = "No Connection"

# Upper bounds (exclusive) of each speed label, checked in order.
_SPEED_LABELS: tuple[tuple[float, str], ...] = ((1.0, "Very Poor"), (5.0, "Poor"), (25.0, "Fair"), (100.0, "Good"))

_SPEED_ADVICE: dict[str, str] = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}

_SIGNAL_ICON: dict[SignalStrength, str] = {
    SignalStrength.NONE: "📵 No Signal",
    SignalStrength.POOR: "📶¹ Poor",
    SignalStrength.FAIR: "📶² Fair",
    SignalStrength.GOOD: "📶³ Good",
    SignalStrength.EXCELLENT: "📶⁴ Excellent",
}

_SIM_DESCRIPTION: dict[SimStatus, str] = {
    SimStatus.ACTIVE: "Your SIM card is active and working.",
    SimStatus.MISSING: "No SIM card detected in the phone.",
    SimStatus.LOCKED_PIN: "The SIM card is locked with a PIN code.",
    SimStatus.LOCKED_PUK: "The SIM card is locked with a PUK code.",
}


def effective_sim_status(db: PhoneDB) -> SimStatus:
    """A SIM that is not seated counts as missing whatever its own status says."""
    if db.device.sim_card_missing:
        return SimStatus.MISSING
    return SimStatus(db.device.sim_card_status)


def _chosen_technology(db: PhoneDB) -> NetworkTechnology:
    try:
        preference = NetworkModePreference(db.device.network_mode_preference)
    except ValueError:
        return NetworkTechnology.FOUR_G
    if preference is NetworkModePreference.FOUR_G_5G_PREFERRED:
        five_g = db.surroundings.signal_strength.get(NetworkTechnology.FIVE_G, SignalStrength.NONE)
        return NetworkTechnology.FOUR_G if SignalStrength(five_g) is SignalStrength.NONE else NetworkTechnology.FIVE_G
    return _PREFERENCE_TECHNOLOGY[preference]


def _set_no_service(db: PhoneDB) -> None:
    db.device.network_connection_status = NetworkStatus.NO_SERVICE
    db.device.network_technology_connected = NetworkTechnology.NONE
    db.device.network_signal_strength = SignalStrength.NONE


def network_search(db: PhoneDB) -> None:
    """Recompute connection status, technology and signal (the only thing that does)."""
    device = db.device
    if effective_sim_status(db) is SimStatus.ACTIVE:
        technology = _chosen_technology(db)
        device.network_connection_status = NetworkStatus.CONNECTED
        device.network_technology_connected = technology
        # Status stays connected even when the chosen technology has no signal (pitfall 4).
        device.network_signal_strength = SignalStrength(db.surroundings.signal_strength.get(technology, SignalStrength.NONE))
    else:
        _set_no_service(db)
    if device.airplane_mode or ApnName(device.active_apn_settings.apn_name) is ApnName.BROKEN or not db.surroundings.line_active:
        _set_no_service(db)


def mobile_data_working(db: PhoneDB) -> bool:
    """Whether cellular data actually flows right now (read live, no search needed)."""
    device, around = db.device, db.surroundings
    if device.airplane_mode:
        return False
    if SignalStrength(device.network_signal_strength) is SignalStrength.NONE:
        return False
    if NetworkStatus(device.network_connection_status) is NetworkStatus.NO_SERVICE:
        return False
    if around.is_abroad and not (device.roaming_enabled and around.roaming_allowed):
        return False
    return device.data_enabled and not around.mobile_data_usage_exceeded


def speed_label(speed: float) -> str:
    for bound, label in _SPEED_LABELS:
        if speed < bound:
            return label
    return "Excellent"


def speed_test(db: PhoneDB) -> tuple[float | None, str]:
    """(download speed in Mbps rounded to 2 decimals, label); (None, "No Connection") without data."""
    if not mobile_data_working(db):
        return None, NO_CONNECTION
    device = db.device
    factor = 1.0
    if device.vpn_connected and device.vpn_details is not None:
        if VpnPerformance(device.vpn_details.server_performance) is VpnPerformance.POOR:
            factor = POOR_VPN_FACTOR
    if device.data_saver_mode:
        factor *= DATA_SAVER_FACTOR
    low, high = _SPEED_RANGE.get(NetworkTechnology(device.network_technology_connected), (0.0, 0.0))
    signal = _SIGNAL_FACTOR[SignalStrength(device.network_signal_strength)]
    # The label is chosen from the rounded value, so round first (pitfall 2).
    speed = round((low + high) / 2 * signal * factor, 2)
    return speed, speed_label(speed)


def can_send_mms(db: PhoneDB) -> bool:
    """Whether the messaging app can send a picture message right now."""
    device = db.device
    if not mobile_data_working(db):
        return False
    if NetworkTechnology(device.network_technology_connected) is NetworkTechnology.TWO_G:
        return False
    if device.wifi_calling_enabled and device.wifi_calling_mms_over_wifi:
        return False
    if device.active_apn_settings.mmsc_url is None:
        return False
    messaging = device.app_statuses.get("messaging")
    return messaging is not None and messaging.permissions.storage and messaging.permissions.sms


def status_bar(db: PhoneDB) -> str:
    """The phone's status bar as one line of ' | '-separated indicators."""
    device = db.device
    parts: list[str] = []
    if device.airplane_mode:
        parts.append("✈️ Airplane Mode")
    else:
        technology = NetworkTechnology(device.network_technology_connected)
        parts.append(_SIGNAL_ICON[SignalStrength(device.network_signal_strength)])
        if technology is not NetworkTechnology.NONE:
            parts.append(technology.value)
        if device.data_enabled and technology is not NetworkTechnology.NONE:
            parts.append("📱 Data Enabled")
            if device.data_saver_mode:
                parts.append("🔽 Data Saver")
        else:
            parts.append("📵 Data Disabled")
    if device.wifi_enabled and device.wifi_connected:
        parts.append(f"📡 Connected to {device.wifi_ssid}" if device.wifi_ssid else "📡 Enabled")
    if device.vpn_connected:
        parts.append("🔒 VPN Connected")
    parts.append(f"🔋 {device.battery_level}%")
    return " | ".join(parts)


class _Shown:
    """A value whose repr is the given text (to write a dict as the reference prints it)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _vpn_details_text(details: VpnDetails | None) -> str:
    """The details as the reference prints them: a Python dict, the performance as its enum's repr."""
    if details is None:
        return "{}"
    shown: dict[str, object] = details.model_dump(mode="json")
    performance = VpnPerformance(details.server_performance)
    shown["server_performance"] = _Shown(f"<PerformanceLevel.{performance.name}: '{performance.value}'>")
    return str(shown)


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


def _granted(permissions: AppPermissions) -> list[str]:
    return [name for name, allowed in permissions.model_dump().items() if allowed]


# ---------------------------------------------------------------------------
# The phone toolkit
# ---------------------------------------------------------------------------


class TelecomUserTools(Toolkit):
    """The 30 tools the simulated user can run on their phone, plus init and assertion helpers.

    Named as the reference names its phone toolkit, because Python writes the class name into the error a call with
    a missing or unknown argument gets ("TelecomUserTools.check_app_status() missing 1 required positional argument:
    ..."), and that error is the call's reply. The rest of agentspec calls it :data:`PhoneTools`.
    """

    def __init__(self, db: PhoneDB) -> None:
        self.db = db

    # -- small internals -----------------------------------------------------

    def _with_bar(self, message: str) -> str:
        return f"{message}\nStatus Bar: {status_bar(self.db)}"

    def _clear_wifi_connection(self) -> None:
        device = self.db.device
        device.wifi_connected = False
        device.wifi_ssid = None
        device.wifi_signal_strength = SignalStrength.NONE

    def _disconnect_vpn(self) -> None:
        self.db.device.vpn_connected = False
        self.db.device.vpn_details = None

    # -- diagnostics (read-only) -------------------------------------------

    @tool(Effect.READ_ONLY)
    def check_status_bar(self) -> str:
        """Show the icons currently visible in the phone's status bar: airplane mode, signal strength, network type, mobile data and data saver, Wi-Fi, VPN and battery level."""
        return f"Status Bar: {status_bar(self.db)}"

    @tool(Effect.READ_ONLY)
    def check_network_status(self) -> str:
        """Check the phone's connection to cellular networks and Wi-Fi: airplane mode, SIM, connection status, signal strength, network type, whether mobile data and data roaming are enabled, and the Wi-Fi state."""
        device = self.db.device
        lines = [
            f"Airplane Mode: {_on_off(device.airplane_mode)}",
            f"SIM Card Status: {effective_sim_status(self.db).value}",
            f"Cellular Connection: {NetworkStatus(device.network_connection_status).value}",
            f"Cellular Signal: {SignalStrength(device.network_signal_strength).value}",
            f"Cellular Network Type: {NetworkTechnology(device.network_technology_connected).value}",
            f"Mobile Data Enabled: {'Yes' if device.data_enabled else 'No'}",
            f"Data Roaming Enabled: {'Yes' if device.roaming_enabled else 'No'}",
            f"Wi-Fi Radio: {_on_off(device.wifi_enabled)}",
            f"Wi-Fi Connected: {'Yes' if device.wifi_connected else 'No'}",
        ]
        if device.wifi_connected:
            lines.append(f"Connected Wi-Fi Network: {device.wifi_ssid}")
        return "\n".join(lines)

    @tool(Effect.READ_ONLY)
    def check_network_mode_preference(self) -> str:
        """Check which type of cellular network (5G, 4G, 3G or 2G) the phone prefers to connect to."""
        mode = self.db.device.network_mode_preference
        return f"Network Mode Preference: {NetworkModePreference(mode).value}"

    @tool(Effect.READ_ONLY)
    def run_speed_test(self) -> str:
        """Measure the current mobile internet download speed and say what it is good enough for. The result is 'No Connection' when mobile data is unavailable."""
        speed, label = speed_test(self.db)
        if speed is None:
            return f"Speed test failed: {NO_CONNECTION}."
        return f"Speed Test Result: {speed:.2f} Mbps ({label}). {_SPEED_ADVICE[label]}"

    @tool(Effect.READ_ONLY)
    def check_sim_status(self) -> str:
        """Check whether the SIM card is working: active, missing, or locked with a PIN or PUK code."""
        return _SIM_DESCRIPTION[effective_sim_status(self.db)]

    @tool(Effect.READ_ONLY)
    def check_data_restriction_status(self) -> str:
        """Check whether a data-limiting feature (Data Saver mode) is active on the phone."""
        if self.db.device.data_saver_mode:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @tool(Effect.READ_ONLY)
    def check_apn_settings(self) -> str:
        """Check the APN settings the phone uses to reach the carrier's data network: the APN name and the MMSC URL used for picture messaging."""
        apn = self.db.device.active_apn_settings
        mmsc = apn.mmsc_url if apn.mmsc_url is not None else "Not Set"
        return (
            f"Current APN Name: {ApnName(apn.apn_name).value}\nMMSC URL (for picture messages): {mmsc}\n"
            "(These are technical settings, usually best left unchanged.)"
        )

    @tool(Effect.READ_ONLY)
    def check_wifi_status(self) -> str:
        """Check whether Wi-Fi is on, which network the phone is connected to (if any) and its signal strength."""
        device = self.db.device
        if not device.wifi_enabled:
            return "Wi-Fi is turned OFF."
        if device.wifi_connected:
            signal = SignalStrength(device.wifi_signal_strength).value
            return f"Wi-Fi is ON and connected to '{device.wifi_ssid}'. Signal strength: {signal}."
        return "Wi-Fi is ON but not connected to any network."

    @tool(Effect.READ_ONLY)
    def check_wifi_calling_status(self) -> str:
        """Check whether Wi-Fi Calling (making and receiving calls over Wi-Fi) is enabled."""
        return f"Wi-Fi Calling is currently turned {_on_off(self.db.device.wifi_calling_enabled)}."

    @tool(Effect.READ_ONLY)
    def check_vpn_status(self) -> str:
        """Check whether a VPN is active and connected, with its connection details (server, protocol, performance)."""
        device = self.db.device
        if device.vpn_connected:
            return f"VPN is ON and connected. Details: {_vpn_details_text(device.vpn_details)}"
        if device.vpn_enabled_setting:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool(Effect.READ_ONLY)
    def check_installed_apps(self) -> str:
        """List the names of all apps installed on the phone."""
        names = list(self.db.device.app_statuses)
        return f"The following apps are installed on the phone: {', '.join(names)}"

    @tool(Effect.READ_ONLY)
    def check_app_status(self, app_name: str) -> str:
        """Show detailed information about one installed app, including the permissions it has been granted.

        Args:
            app_name: The app's name, as listed by check_installed_apps (e.g. 'messaging').
        """
        app = self.db.device.app_statuses.get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = _granted(app.permissions)
        if not granted:
            return f"Status for App: {app.app_name}\n - Permissions: None granted."
        return f"Status for App: {app.app_name}\n - Permissions Granted:\n" + "\n".join(f"   - {name}" for name in granted)

    @tool(Effect.READ_ONLY)
    def check_app_permissions(self, app_name: str) -> str:
        """Check which permissions (sms, storage, phone, network) an app currently has.

        Args:
            app_name: The app's name, as listed by check_installed_apps (e.g. 'messaging').
        """
        app = self.db.device.app_statuses.get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = _granted(app.permissions)
        if not granted:
            return f"App '{app.app_name}' currently has no permissions granted."
        return f"App '{app.app_name}' has permission for: {', '.join(granted)}."

    @tool(Effect.READ_ONLY)
    def can_send_mms(self) -> str:
        """Check whether the messaging app can currently send MMS (picture/video) messages."""
        if can_send_mms(self.db):
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    @tool(Effect.READ_ONLY)
    def check_payment_request(self) -> str:
        """Check whether the carrier has sent a payment request for a bill to this phone."""
        request = self.db.surroundings.payment_request
        if request is None:
            return "No payment request has been made."
        # A paid request is cleared by the next sync; until then it reads as before (as the reference).
        return f"You have a payment request for bill {request.bill_id} of {request.amount_due} USD."

    # -- fixes (mutating) --------------------------------------------------

    @tool(Effect.MUTATING)
    def set_network_mode_preference(self, mode: str) -> str:
        """Change the type of cellular network the phone prefers to connect to. Faster networks (5G, 4G) give faster data.

        Args:
            mode: One of '4g_5g_preferred', '4g_only', '3g_only', '2g_only'.
        """
        try:
            preference = NetworkModePreference(mode)
        except ValueError:
            valid = ", ".join(m.value for m in NetworkModePreference)
            return self._with_bar(f"Failed to set network mode: '{mode}' is not a valid option. Please use one of: {valid}")
        self.db.device.network_mode_preference = preference
        network_search(self.db)
        return self._with_bar(f"Preferred Network Mode set to: {preference.value}")

    @tool(Effect.MUTATING)
    def toggle_airplane_mode(self) -> str:
        """Turn Airplane Mode ON or OFF. When ON, all wireless connections (cellular, Wi-Fi, VPN) are cut."""
        device = self.db.device
        device.airplane_mode = not device.airplane_mode
        if device.airplane_mode:
            self._clear_wifi_connection()
            if device.vpn_connected:
                self._disconnect_vpn()
        else:
            device.network_connection_status = NetworkStatus.SEARCHING
            if device.wifi_enabled:
                self._clear_wifi_connection()
        network_search(self.db)
        return self._with_bar(f"Airplane Mode is now {_on_off(device.airplane_mode)}.")

    @tool(Effect.MUTATING)
    def reseat_sim_card(self) -> str:
        """Take the SIM card out and put it back in, which can fix a SIM that is not recognised."""
        self.db.device.sim_card_missing = False
        network_search(self.db)
        return self._with_bar("SIM card re-seated successfully.")

    @tool(Effect.MUTATING)
    def toggle_data(self) -> str:
        """Turn mobile data ON or OFF (whether the phone may use the cellular network for internet)."""
        device = self.db.device
        device.data_enabled = not device.data_enabled
        network_search(self.db)
        return self._with_bar(f"Mobile Data is now {_on_off(device.data_enabled)}.")

    @tool(Effect.MUTATING)
    def toggle_roaming(self) -> str:
        """Turn Data Roaming ON or OFF. Roaming must be ON to use mobile data outside the carrier's home network (e.g. abroad)."""
        device = self.db.device
        device.roaming_enabled = not device.roaming_enabled
        network_search(self.db)
        return self._with_bar(f"Data Roaming is now {_on_off(device.roaming_enabled)}.")

    @tool(Effect.MUTATING)
    def toggle_data_saver_mode(self) -> str:
        """Turn Data Saver mode ON or OFF. When ON it reduces data usage, which can slow data down."""
        device = self.db.device
        device.data_saver_mode = not device.data_saver_mode
        return self._with_bar(f"Data Saver Mode is now {_on_off(device.data_saver_mode)}.")

    @tool(Effect.MUTATING)
    def set_apn_settings(self, apn_settings: dict[str, Any]) -> str:
        """Replace the phone's APN settings with a new set. Fields left out take their default values.

        Args:
            apn_settings: The new settings, with any of the keys 'apn_name' ('internet' or 'broken'), 'reset_at_reboot', 'mms_apn', 'mmsc_url', 'mms_proxy', 'mms_port'.
        """
        if not isinstance(apn_settings, dict):  # what the reference answers: it reads .apn_name off the value
            raise ToolError(f"'{type(apn_settings).__name__}' object has no attribute 'apn_name'")
        try:
            new_settings = APNSettings.model_validate(apn_settings)
        except ValidationError as exc:
            raise ToolError(str(exc)) from exc  # pydantic's own text, as the reference answers
        self.db.device.active_apn_settings = new_settings
        network_search(self.db)
        return self._with_bar(f"APN settings set to: {ApnName(new_settings.apn_name).value}")

    @tool(Effect.MUTATING)
    def reset_apn_settings(self) -> str:
        """Reset the APN settings to their defaults. The reset takes effect after the phone is rebooted."""
        # Only arms the reset; reboot_device performs it (pitfall 1).
        self.db.device.active_apn_settings.reset_at_reboot = True
        network_search(self.db)
        return self._with_bar("APN settings will reset at reboot.")

    @tool(Effect.MUTATING)
    def toggle_wifi(self) -> str:
        """Turn the Wi-Fi radio ON or OFF."""
        device = self.db.device
        if device.airplane_mode:
            return self._with_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        device.wifi_enabled = not device.wifi_enabled
        if not device.wifi_enabled:
            self._clear_wifi_connection()
        return self._with_bar(f"Wi-Fi is now {_on_off(device.wifi_enabled)}.")

    @tool(Effect.MUTATING)
    def toggle_wifi_calling(self) -> str:
        """Turn Wi-Fi Calling ON or OFF (making and receiving calls over Wi-Fi instead of the cellular network)."""
        device = self.db.device
        device.wifi_calling_enabled = not device.wifi_calling_enabled
        return self._with_bar(f"Wi-Fi Calling is now {_on_off(device.wifi_calling_enabled)}.")

    @tool(Effect.MUTATING)
    def connect_vpn(self) -> str:
        """Connect to the phone's VPN (Virtual Private Network)."""
        device = self.db.device
        if device.vpn_connected:
            return "VPN already connected."
        device.vpn_connected = True
        device.vpn_details = VpnDetails(
            server_address=DEFAULT_VPN_SERVER,
            protocol=DEFAULT_VPN_PROTOCOL,
            server_performance=self.db.vpn_default_performance,
        )
        return self._with_bar("VPN connected successfully.")

    @tool(Effect.MUTATING)
    def disconnect_vpn(self) -> str:
        """Disconnect the active VPN connection, so internet traffic no longer goes through a VPN server."""
        if not self.db.device.vpn_connected:
            return self._with_bar("No active VPN connection to disconnect.")
        self._disconnect_vpn()
        return self._with_bar("VPN disconnected successfully.")

    @tool(Effect.MUTATING)
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Give an app one permission it needs to work.

        Args:
            app_name: The app's name, as listed by check_installed_apps (e.g. 'messaging').
            permission: One of 'sms', 'storage', 'phone', 'network'.
        """
        app = self.db.device.app_statuses.get(app_name)
        if app is None:
            return self._with_bar(f"Error. App '{app_name}' not found. Cannot grant permission.")
        key = permission.lower()
        if key not in AppPermissions.model_fields:
            valid = list(AppPermissions.model_fields)
            return self._with_bar(
                f"Error. Permission '{key}' not tracked for app '{app_name}', available permissions: {valid}"
            )
        setattr(app.permissions, key, True)
        return self._with_bar(f"Success. Permission '{key}' granted to app '{app_name}'.")

    @tool(Effect.MUTATING)
    def reboot_device(self) -> str:
        """Restart the phone, refreshing its services and network connection. Applies a pending APN reset."""
        device = self.db.device
        said = ""
        if device.active_apn_settings.reset_at_reboot:
            device.active_apn_settings = APNSettings()
            said = "Resetting APN settings...\n"
        device.network_connection_status = NetworkStatus.SEARCHING
        network_search(self.db)
        return self._with_bar(f"{said}Restarting network services...")

    @tool(Effect.MUTATING)
    def make_payment(self) -> str:
        """Pay the bill named in the carrier's pending payment request."""
        request = self.db.surroundings.payment_request
        if request is None:
            return "You do not have a payment request."
        request.paid = True
        return f"Payment of {request.amount_due} USD has been made for bill {request.bill_id}."

    # -- task initialisation helpers (not tools) ---------------------------

    def set_user_info(self, name: str, phone_number: str) -> None:
        self.db.surroundings.name = name
        self.db.surroundings.phone_number = phone_number

    def set_user_location(self, abroad: bool) -> None:
        self.db.surroundings.is_abroad = abroad

    # The turn_* helpers reuse the toggle tools (searches included) and toggle
    # a second time if the first toggle landed on the wrong side.

    def _toggle_to(self, toggle: Callable[[], object], field: str, wanted: bool) -> None:
        toggle()
        if getattr(self.db.device, field) != wanted:
            toggle()

    def turn_airplane_mode_on(self) -> None:
        self._toggle_to(self.toggle_airplane_mode, "airplane_mode", True)

    def turn_airplane_mode_off(self) -> None:
        self._toggle_to(self.toggle_airplane_mode, "airplane_mode", False)

    def turn_data_off(self) -> None:
        self._toggle_to(self.toggle_data, "data_enabled", False)

    def turn_data_on(self) -> None:
        self.db.device.data_enabled = True

    def turn_roaming_off(self) -> None:
        self._toggle_to(self.toggle_roaming, "roaming_enabled", False)

    def turn_roaming_on(self) -> None:
        self._toggle_to(self.toggle_roaming, "roaming_enabled", True)

    def turn_data_saver_mode_on(self) -> None:
        self._toggle_to(self.toggle_data_saver_mode, "data_saver_mode", True)

    def turn_data_saver_mode_off(self) -> None:
        self._toggle_to(self.toggle_data_saver_mode, "data_saver_mode", False)

    def unseat_sim_card(self) -> None:
        self.db.device.sim_card_missing = True
        network_search(self.db)

    def lock_sim_card(self, mode: str) -> None:
        locks = {"pin": SimStatus.LOCKED_PIN, "puk": SimStatus.LOCKED_PUK}
        if mode not in locks:
            raise ValueError(f"Unknown SIM lock mode '{mode}' (expected 'pin' or 'puk').")
        self.db.device.sim_card_status = locks[mode]
        network_search(self.db)

    def break_apn_settings(self) -> None:
        self.db.device.active_apn_settings.apn_name = ApnName.BROKEN
        network_search(self.db)

    def break_apn_mms_setting(self) -> None:
        self.db.device.active_apn_settings.mmsc_url = None

    def break_vpn(self) -> None:
        self.connect_vpn()
        if self.db.device.vpn_details is not None:
            self.db.device.vpn_details.server_performance = VpnPerformance.POOR
        # See PhoneDB.vpn_default_performance: later reconnects stay poor.
        self.db.vpn_default_performance = VpnPerformance.POOR

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> None:
        if self.db.device.wifi_calling_enabled != enabled:
            self.toggle_wifi_calling()
        if mms_over_wifi is not None:
            self.db.device.wifi_calling_mms_over_wifi = mms_over_wifi

    def remove_app_permission(self, app_name: str, permission: str) -> str:
        app = self.db.device.app_statuses.get(app_name)
        if app is None:
            return f"App '{app_name}' was not found; nothing was changed."
        key = permission.lower()
        if key not in AppPermissions.model_fields:
            return f"'{permission}' is not a known permission; nothing was changed."
        setattr(app.permissions, key, False)
        return f"Permission '{key}' removed from app '{app_name}'."

    def simulate_network_search(self) -> None:
        network_search(self.db)

    # -- assertions (not tools) ----------------------------------------------

    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.db.device.airplane_mode == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        # An unknown status string raises, which aborts evaluation as in the reference.
        return NetworkStatus(self.db.device.network_connection_status) is NetworkStatus(expected_status)

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return mobile_data_working(self.db) == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.db.device.roaming_enabled == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.db.device.data_saver_mode == expected_status

    def assert_internet_speed(self, expected_speed: float, expected_desc: str | None = None) -> bool:
        speed, label = speed_test(self.db)
        if (speed if speed is not None else 0.0) < expected_speed:
            return False
        return expected_desc is None or label.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        _, label = speed_test(self.db)
        return label.lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return can_send_mms(self.db) == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.db.surroundings.mobile_data_usage_exceeded == expected_status


PhoneTools = TelecomUserTools
