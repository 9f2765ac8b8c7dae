from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "apps.ledger"
    label = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the ledger's reconciliation checks)
        from .amounts import configure_decimal_context
        from .seal import checks as seal_checks  # noqa: F401  (invariant 9: the sealed journal)

        configure_decimal_context()
