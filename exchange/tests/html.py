"""How the pages write an amount, for tests that look for one in a page's HTML."""


def amt(exact: str, shown: str | None = None) -> str:
    """The ``shown`` filter's HTML: ``shown`` (default: ``exact``) with the exact amount as its tooltip."""
    return f'<span class="amount" title="{exact}">{shown or exact}</span>'
