from django.apps import AppConfig


class BinanceConfig(AppConfig):
    """The Binance-compatible spot API under ``/api/v3/`` (issue 13): a translation layer over our services."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "apps.binance"
    label = "binance"
