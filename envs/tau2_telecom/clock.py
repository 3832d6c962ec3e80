"""The telecom domain's frozen clock: every date a tool writes uses this day."""

from datetime import date, datetime

TODAY = date(2025, 2, 25)
NOW = datetime(2025, 2, 25, 12, 8, 0)
