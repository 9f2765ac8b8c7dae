"""A stream key is HMAC(SECRET_KEY, nonce): the listenKey of an API key can be handed out again (Binance's
POST /api/v3/userDataStream). Keys made before keep no nonce and are simply not handed out again."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0004_relay_rung_through_redis"),
    ]

    operations = [
        migrations.AddField(
            model_name="streamtoken",
            name="nonce",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
