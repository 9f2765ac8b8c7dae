"""URL path converters."""

# Object ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1


class ObjectIdConverter:
    """``<id:name>``: a positive bigint; anything else (a larger number included) matches no URL, a 404."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)
