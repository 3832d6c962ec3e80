"""The simulated phone's state (the user side of the telecom domain).

Two parts: ``device`` (what the phone itself holds, loaded from
``user_db.toml``) and ``surroundings`` (the world around the phone: where the
user is, what the carrier allows, a pending payment request).  Every record
rejects unknown fields when it is constructed; assignment after construction is
deliberately not validated, as in the reference.
"""

from __future__ import annotations

import tomllib
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class SimStatus(str, Enum):
    ACTIVE = "active"
    MISSING = "missing"
    LOCKED_PIN = "locked_pin"
    LOCKED_PUK = "locked_puk"


class SignalStrength(str, Enum):
    NONE = "none"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


class NetworkTechnology(str, Enum):
    NONE = "none"
    TWO_G = "2G"
    THREE_G = "3G"
    FOUR_G = "4G"
    FIVE_G = "5G"


class NetworkStatus(str, Enum):
    CONNECTED = "connected"
    SEARCHING = "searching"
    NO_SERVICE = "no_service"
    EMERGENCY_ONLY = "emergency_only"


class NetworkModePreference(str, Enum):
    FOUR_G_5G_PREFERRED = "4g_5g_preferred"
    FOUR_G_ONLY = "4g_only"
    THREE_G_ONLY = "3g_only"
    TWO_G_ONLY = "2g_only"


class ApnName(str, Enum):
    INTERNET = "internet"
    BROKEN = "broken"


class VpnPerformance(str, Enum):
    UNKNOWN = "unknown"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


DEFAULT_MMSC_URL = "http://mms.carrier.com/mms/wapenc"
DEFAULT_VPN_SERVER = "192.168.1.1"
DEFAULT_VPN_PROTOCOL = "OpenVPN"


class APNSettings(BaseModel):
    """The access point the phone uses for mobile data and MMS."""

    model_config = ConfigDict(extra="forbid")

    apn_name: ApnName = ApnName.INTERNET
    reset_at_reboot: bool = False
    mms_apn: str | None = "mms"
    mmsc_url: str | None = DEFAULT_MMSC_URL
    mms_proxy: str | None = None
    mms_port: int | None = None


class VpnDetails(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server_address: str
    protocol: str
    server_performance: VpnPerformance = VpnPerformance.UNKNOWN


class AppPermissions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sms: bool = False
    storage: bool = False
    phone: bool = False
    network: bool = False


class AppStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    app_name: str
    permissions: AppPermissions = Field(default_factory=AppPermissions)


def _default_apps() -> dict[str, AppStatus]:
    return {
        "messaging": AppStatus(app_name="messaging", permissions=AppPermissions(sms=True, storage=True, phone=True)),
        "browser": AppStatus(app_name="browser", permissions=AppPermissions(storage=True, network=True)),
    }


class PhoneDevice(BaseModel):
    """The handset.  Defaults equal the values in ``user_db.toml``."""

    model_config = ConfigDict(extra="forbid")

    sim_card_status: SimStatus = SimStatus.ACTIVE
    sim_card_missing: bool = False
    airplane_mode: bool = False
    # 5G/good is what a fresh phone shows; the first search turns it into 5G/excellent.
    network_signal_strength: SignalStrength = SignalStrength.GOOD
    network_technology_connected: NetworkTechnology = NetworkTechnology.FIVE_G
    network_connection_status: NetworkStatus = NetworkStatus.CONNECTED
    battery_level: int = 80
    data_enabled: bool = True
    roaming_enabled: bool = False
    network_mode_preference: NetworkModePreference = NetworkModePreference.FOUR_G_5G_PREFERRED
    active_apn_settings: APNSettings = Field(default_factory=APNSettings)
    wifi_enabled: bool = False
    wifi_connected: bool = False
    wifi_ssid: str | None = None
    wifi_signal_strength: SignalStrength = SignalStrength.NONE
    wifi_calling_enabled: bool = False
    wifi_calling_mms_over_wifi: bool = False
    data_saver_mode: bool = False
    vpn_enabled_setting: bool = False
    vpn_connected: bool = False
    vpn_details: VpnDetails | None = None
    app_statuses: dict[str, AppStatus] = Field(default_factory=_default_apps)


class PaymentRequest(BaseModel):
    """A bill the carrier asked the user to pay from the phone."""

    model_config = ConfigDict(extra="forbid")

    bill_id: str
    amount_due: float
    paid: bool = False


def _default_signal_map() -> dict[NetworkTechnology, SignalStrength]:
    return {
        NetworkTechnology.TWO_G: SignalStrength.POOR,
        NetworkTechnology.THREE_G: SignalStrength.FAIR,
        NetworkTechnology.FOUR_G: SignalStrength.GOOD,
        NetworkTechnology.FIVE_G: SignalStrength.EXCELLENT,
    }


class Surroundings(BaseModel):
    """The world around the phone.  ``line_active``, ``roaming_allowed``,
    ``mobile_data_usage_exceeded`` and ``payment_request`` are written by the
    carrier<->phone sync, not by phone tools."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    phone_number: str | None = None
    is_abroad: bool = False
    roaming_allowed: bool = False
    signal_strength: dict[NetworkTechnology, SignalStrength] = Field(default_factory=_default_signal_map)
    mobile_data_usage_exceeded: bool = False
    line_active: bool = True
    payment_request: PaymentRequest | None = None


class PhoneDB(BaseModel):
    """The whole phone-side state of one environment."""

    model_config = ConfigDict(extra="forbid")

    device: PhoneDevice
    surroundings: Surroundings = Field(default_factory=Surroundings)
    # The reference hands every connect_vpn one process-wide details object and
    # break_vpn degrades that object in place, so a VPN reconnected after
    # break_vpn is poor too.  We keep that within one environment (the only case
    # an episode can observe) but scope it to this database instead of the
    # process, so environments never leak into each other.
    vpn_default_performance: VpnPerformance = VpnPerformance.EXCELLENT

    @classmethod
    def load(cls, path: str | Path) -> PhoneDB:
        """Read a phone database from a TOML file (``user_db.toml``)."""
        with Path(path).open("rb") as handle:
            return cls.model_validate(tomllib.load(handle))
