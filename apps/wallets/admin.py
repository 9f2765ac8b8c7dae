"""Read-only back-office lists of deposits, withdrawals, addresses and the custody inbox.

Nothing here changes a row: withdrawals are approved or rejected through
:func:`apps.wallets.services.withdrawal_approve` / ``withdrawal_reject`` (the approval screen
is part of the back-office work).
"""

from django.contrib import admin

from apps.ledger.admin import ReadOnlyAdmin, amount_column

from .models import CustodyEvent, Deposit, DepositAddress, Withdrawal, WithdrawalAddress


@admin.register(DepositAddress)
class DepositAddressAdmin(ReadOnlyAdmin):
    list_display = ("id", "user", "asset", "network", "address", "created_at")
    list_filter = ("asset", "network")
    search_fields = ("=address", "user__username")
    list_select_related = ("user", "asset")


@admin.register(Deposit)
class DepositAdmin(ReadOnlyAdmin):
    list_display = ("id", "user", "amount_display", "status", "confirmations", "txid", "vout", "credited_at")
    list_filter = ("status", "asset")
    search_fields = ("=txid", "user__username")
    list_select_related = ("user", "asset")
    amount_display = amount_column("amount", lambda deposit: deposit.asset)


@admin.register(Withdrawal)
class WithdrawalAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "user",
        "amount_display",
        "fee_display",
        "status",
        "address",
        "decided_by",
        "txid",
        "created_at",
    )
    list_filter = ("status", "asset")
    search_fields = ("=id", "=txid", "user__username", "=address")
    list_select_related = ("user", "asset", "decided_by")
    amount_display = amount_column("amount", lambda withdrawal: withdrawal.asset)
    fee_display = amount_column("fee", lambda withdrawal: withdrawal.asset)


@admin.register(WithdrawalAddress)
class WithdrawalAddressAdmin(ReadOnlyAdmin):
    """Traders' withdrawal address books: who may withdraw where, since when (searching an address shows every
    customer who has it)."""

    list_display = ("id", "user", "asset", "address", "label", "created_at", "confirmed_at", "usable_from")
    list_filter = ("asset",)
    search_fields = ("=address", "user__username")
    list_select_related = ("user", "asset")


@admin.register(CustodyEvent)
class CustodyEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "event_id", "type", "status", "amount_display", "state", "received_at", "processed_at")
    list_filter = ("state", "type", "asset")
    search_fields = ("=event_id", "=txid")
    list_select_related = ("asset",)
    amount_display = amount_column("amount", lambda event: event.asset)
