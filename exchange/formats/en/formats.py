"""Date formats of the site (English): ISO dates, times with seconds and the time zone everywhere.

Django's own English formats ("Dec. 1, 2026, 9:03 a.m.") drop the seconds and the zone, which an
operator comparing events needs; ``FORMAT_MODULE_PATH`` makes these the defaults of every
template and admin list that shows a date or time without a format of its own.
"""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s T"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
