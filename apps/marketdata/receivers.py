"""The market data app's receiver of what the orders app announces (connected in
:meth:`apps.marketdata.apps.MarketdataConfig.ready`)."""

from .services import candles_record


def trades_executed(sender, *, market_id: int, time, fills, **kwargs) -> None:
    """:data:`apps.orders.events.trades_executed`: count the fills into the market's candles, in its transaction."""
    candles_record(market_id=market_id, time=time, fills=fills)
