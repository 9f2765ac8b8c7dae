from django.apps import AppConfig


class MarketdataConfig(AppConfig):
    name = "apps.marketdata"
    label = "marketdata"
    verbose_name = "Market data"
