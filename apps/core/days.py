"""Ranges of whole days (UTC) in the date filters of pages and exports: the last day a range may end on."""

from datetime import date, timedelta

from django.core.validators import MaxValueValidator

LAST_DAY = date.max - timedelta(days=1)
"""The last day a range of days may end on (9999-12-30). A range is read up to the midnight after its last day, and
no ``datetime`` holds the one after 9999-12-31 (``end + timedelta(days=1)`` raised ``OverflowError``, a 500)."""

last_day_validator = MaxValueValidator(LAST_DAY, message=f"Must be on or before {LAST_DAY.isoformat()}.")
"""The validator of a range's ``end`` date field: a form error naming the field, never a 500."""
