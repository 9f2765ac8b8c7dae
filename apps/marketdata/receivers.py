"""The market data app's receiver of what the orders app announces (connected in
:meth:`apps.marketdata.apps.MarketdataConfig.ready`)."""

from .services import candles_record, candles_statement


def trades_executed(sender, *, market_id: int, time, fills, **kwargs) -> None:
    """:data:`apps.orders.events.trades_executed`: count the fills into the market's candles, in its transaction."""
    candles_record(market_id=market_id, time=time, fills=fills)


def batch_written(sender, *, market_id: int, time, fills, **kwargs) -> list[tuple[str, list]]:
    """:data:`apps.orders.events.batch_written`: the statement counting the batch's fills into candles."""
    statement = candles_statement(market_id=market_id, time=time, fills=fills)
    return [] if statement is None else [statement]
