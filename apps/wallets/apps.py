from django.apps import AppConfig


class WalletsConfig(AppConfig):
    name = "apps.wallets"
    label = "wallets"
    verbose_name = "Wallets and custody"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers invariants 4 (hold source), 5 and 8 with reconcile)
