from decimal import Decimal

import apps.ledger.models
from django.db import migrations, models

# The taker buy volumes of the candles made before these columns existed (set-based: one statement);
# from then on the fill transaction adds them (apps.marketdata.services.candles_record).
FILL_TAKER_BUYS = """
    UPDATE marketdata_candle c
    SET taker_buy_volume = s.qty, taker_buy_quote_volume = s.quote_qty
    FROM (
        SELECT t.market_id, i.name, date_bin(i.width, t.created_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS bucket,
               sum(t.qty) AS qty, sum(t.quote_qty) AS quote_qty
        FROM orders_trade t
        CROSS JOIN (VALUES ('1m', INTERVAL '1 minute'), ('5m', INTERVAL '5 minutes'), ('15m', INTERVAL '15 minutes'),
                           ('1h', INTERVAL '1 hour'), ('4h', INTERVAL '4 hours'), ('1d', INTERVAL '1 day'))
             AS i(name, width)
        WHERE t.taker_side = 'buy'
        GROUP BY t.market_id, i.name, bucket
    ) AS s
    WHERE c.market_id = s.market_id AND c.interval = s.name AND c.open_time = s.bucket
"""


class Migration(migrations.Migration):

    dependencies = [
        ('marketdata', '0001_candles'),
    ]

    operations = [
        migrations.AddField(
            model_name='candle',
            name='taker_buy_volume',
            field=apps.ledger.models.AmountField(db_default=Decimal('0'), decimal_places=18, max_digits=38),
        ),
        migrations.AddField(
            model_name='candle',
            name='taker_buy_quote_volume',
            field=apps.ledger.models.AmountField(db_default=Decimal('0'), decimal_places=18, max_digits=38),
        ),
        migrations.RunSQL(FILL_TAKER_BUYS, reverse_sql=migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name='candle',
            constraint=models.CheckConstraint(condition=models.Q(('taker_buy_volume__gte', 0), ('taker_buy_volume__lte', models.F('volume')), ('taker_buy_quote_volume__gte', 0), ('taker_buy_quote_volume__lte', models.F('quote_volume'))), name='candle_taker_buys_within_volume'),
        ),
    ]
