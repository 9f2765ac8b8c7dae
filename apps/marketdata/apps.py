from django.apps import AppConfig


class MarketdataConfig(AppConfig):
    name = "apps.marketdata"
    label = "marketdata"
    verbose_name = "Market data"

    def ready(self) -> None:
        """Count every placement's fills into candles (:mod:`apps.marketdata.receivers`)."""
        from apps.orders.events import batch_written, trades_executed

        from . import receivers

        trades_executed.connect(receivers.trades_executed, dispatch_uid="marketdata.trades_executed")
        batch_written.connect(receivers.batch_written, dispatch_uid="marketdata.batch_written")
