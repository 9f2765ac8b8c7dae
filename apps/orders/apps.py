from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "apps.orders"
    label = "orders"
    verbose_name = "Orders and matching"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers invariant 4's hold source and invariant 8's order checks)
