from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "apps.streams"
    label = "streams"
    verbose_name = "Market and user streams"

    def ready(self) -> None:
        """Record the outbox rows of what the apps below announce (:mod:`apps.streams.receivers`)."""
        from django.contrib.auth.signals import user_logged_in, user_logged_out

        from apps.accounts.events import api_key_created, password_changed, second_factor_changed
        from apps.orders.events import batch_written, book_changed
        from apps.wallets.events import transfer_changed

        from . import receivers

        book_changed.connect(receivers.book_changed, dispatch_uid="streams.book_changed")
        batch_written.connect(receivers.batch_written, dispatch_uid="streams.batch_written")
        transfer_changed.connect(receivers.transfer_changed, dispatch_uid="streams.transfer_changed")
        api_key_created.connect(receivers.api_key_created, dispatch_uid="streams.api_key_created")
        password_changed.connect(receivers.password_changed, dispatch_uid="streams.password_changed")
        second_factor_changed.connect(receivers.second_factor_changed, dispatch_uid="streams.second_factor_changed")
        user_logged_in.connect(receivers.user_logged_in, dispatch_uid="streams.user_logged_in")
        user_logged_out.connect(receivers.user_logged_out, dispatch_uid="streams.user_logged_out")
