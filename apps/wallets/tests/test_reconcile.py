"""Reconciliation of the wallets: invariants 4 (pending withdrawals), 5 (custody holdings) and 8."""

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from apps.ledger.models import AccountKind, EntryReason
from apps.ledger.reconciliation import reconcile, registered_invariants
from apps.ledger.services import credit, debit, entry_post, system_account, user_account
from apps.wallets.custody.simnet import new_address
from apps.wallets.custody.simulator.models import SimCallback, SimWallet
from apps.wallets.custody.simulator.provider import SimulatedCustody
from apps.wallets.models import CustodyEvent, Deposit, EventState, Withdrawal, WithdrawalStatus
from apps.wallets.services import (
    custody_event_process,
    deposit_address_get_or_create,
    withdrawal_reject,
    withdrawal_request,
    withdrawal_submit,
)

from .factories import (
    book_address,
    deliver_custody_callbacks,
    deposit_payload,
    deposit_through_custody,
    signed,
    webhook_sender,
)


def failed_checks(report) -> dict[str, list[dict]]:
    return {check.name: check.details for check in report.checks if not check.ok}


@pytest.fixture
def busy_exchange(usdt, btc, user, operator):
    """Deposits in two assets; withdrawals completed (with fee and network fee), rejected, awaiting, approved."""
    type(usdt).objects.filter(pk=usdt.pk).update(withdrawal_fee=Decimal(1), withdrawal_auto_approve_limit=100)
    deposit_through_custody(user, usdt, "1000")
    deposit_through_custody(user, btc, "0.5")

    def request(amount: str) -> Withdrawal:
        address = book_address(user, usdt, new_address()).address
        return withdrawal_request(user_id=user.id, asset_code="USDT", amount=amount, address=address)

    completed = request("50")
    withdrawal_submit(withdrawal_id=completed.pk)
    deliver_custody_callbacks()
    withdrawal_reject(withdrawal_id=request("200").pk, operator_id=operator.id, reason="Suspicious.")
    awaiting, approved = request("300"), request("20")
    return {"completed": completed, "awaiting": awaiting, "approved": approved}


def test_wallet_invariants_are_registered():
    assert registered_invariants() >= {4, 5, 8}


def test_a_busy_exchange_reconciles_with_custody_figures(busy_exchange, user, usdt):
    report = reconcile()

    assert report.ok, failed_checks(report)
    assert {"custody_matches_provider", "deposits_credited_once", "withdrawals_ended_once"} <= {
        check.name for check in report.checks
    }
    assert report.assets["USDT"]["custody"] == "949.500000"  # 1000 - 50 - network fee 0.5
    assert report.assets["USDT"]["custody_reported"] == "949.500000"
    assert report.assets["USDT"]["user_held"] == "322.000000"  # 300 + 20 pending, fee 1 each
    assert report.assets["BTC"]["custody_reported"] == "0.50000000"


def test_reconcile_command_passes(busy_exchange):
    out = StringIO()

    call_command("reconcile", "--json", stdout=out)  # exits 1 (SystemExit) if anything fails

    assert json.loads(out.getvalue())["ok"] is True


def test_custody_reporting_other_holdings_fails_invariant_5_naming_the_asset(busy_exchange):
    SimWallet.objects.filter(asset_code="USDT").update(balance=Decimal("949.4"))

    report = reconcile()

    assert failed_checks(report) == {
        "custody_matches_provider": [
            {
                "asset": "USDT",
                "ledger_custody": "949.500000",
                "in_flight": "0.000000",
                "custody_reported": "949.400000",
                "difference": "0.100000",
            }
        ]
    }


def test_ledger_custody_credited_without_custody_fails_invariant_5(usdt, user):
    with transaction.atomic():  # a deposit the provider never saw
        entry_post(
            idempotency_key="deposit:simnet:phantom:0",
            reason=EntryReason.DEPOSIT,
            legs=[
                debit(system_account(AccountKind.CUSTODY, usdt), Decimal("10")),
                credit(user_account(user.id, usdt), Decimal("10")),
            ],
        )

    details = failed_checks(reconcile())["custody_matches_provider"]

    assert details == [
        {
            "asset": "USDT",
            "ledger_custody": "10.000000",
            "in_flight": "0.000000",
            "custody_reported": "0.000000",
            "difference": "10.000000",
        }
    ]


def test_a_withdrawal_custody_has_sent_before_its_completion_is_recorded_is_in_flight_not_a_failure(
    busy_exchange, user, usdt
):
    """Break-it review: invariant 5 failed while a withdrawal was in flight (custody takes the coins when it accepts it,
    the ledger at its completion callback), so the hourly run failed on healthy books."""
    approved = busy_exchange["approved"]
    withdrawal_submit(withdrawal_id=approved.pk)  # custody accepts it: 20 and the network fee 0.5 leave its wallet

    report = reconcile()

    assert report.ok, failed_checks(report)
    figures = report.assets["USDT"]
    assert (figures["custody"], figures["custody_in_flight"], figures["custody_reported"]) == (
        "949.500000",
        "20.500000",
        "929.000000",
    )
    SimWallet.objects.filter(asset_code="USDT").update(balance=Decimal("928.9"))  # and a real shortfall besides
    assert failed_checks(reconcile())["custody_matches_provider"] == [
        {
            "asset": "USDT",
            "ledger_custody": "949.500000",
            "in_flight": "20.500000",
            "custody_reported": "928.900000",
            "difference": "0.100000",
        }
    ]
    deliver_custody_callbacks()  # completed: in the ledger too, nothing in flight
    report = reconcile()
    assert report.ok is False and report.assets["USDT"]["custody_in_flight"] == "0.000000"
    assert failed_checks(report)["custody_matches_provider"][0]["difference"] == "0.100000"


def test_a_confirmed_deposit_stored_but_not_yet_credited_is_in_flight_not_a_failure(user, btc):
    deposit_through_custody(user, btc, "0.5")
    custody = SimulatedCustody()
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    received = custody.deposit_receive(address=address, amount=Decimal("0.25"), delay=0)
    callbacks = list(SimCallback.objects.filter(deposit=received).values_list("pk", flat=True))
    custody.callbacks_deliver_due(callback_ids=callbacks, send=webhook_sender())  # stored; the worker has not run

    report = reconcile()

    assert report.ok, failed_checks(report)
    figures = report.assets["BTC"]
    assert (figures["custody"], figures["custody_in_flight"], figures["custody_reported"]) == (
        "0.50000000",
        "-0.25000000",
        "0.75000000",
    )
    deliver_custody_callbacks()
    report = reconcile()
    assert report.ok and (report.assets["BTC"]["custody"], report.assets["BTC"]["custody_in_flight"]) == (
        "0.75000000",
        "0.00000000",
    )


def test_a_deposit_custody_reported_and_the_ledger_has_not_credited_yet_is_in_flight(user, btc):
    """Custody counts a deposit from its first report, the ledger credits it at the asset's confirmations: in between
    it is in flight (break-it reviews: counting it at custody's "confirmed" left windows both ways)."""
    type(btc).objects.filter(pk=btc.pk).update(confirmations_required=3)
    custody = SimulatedCustody()
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    received = custody.deposit_receive(address=address, amount=Decimal("0.25"), confirmations=3, delay=0)
    callbacks = list(SimCallback.objects.filter(deposit=received).order_by("due_at", "id").values_list("pk", flat=True))
    custody.callbacks_deliver_due(callback_ids=callbacks[:2], send=webhook_sender())  # 0 and 1 confirmations
    stored = reconcile()  # the reports stored, not processed: no deposit recorded yet
    for event in CustodyEvent.objects.filter(state=EventState.RECEIVED).order_by("id"):
        custody_event_process(event_pk=event.pk)
    assert Deposit.objects.get().status == "pending"

    recorded = reconcile()

    for report in (stored, recorded):
        assert report.ok, failed_checks(report)
        figures = report.assets["BTC"]
        assert (figures["custody"], figures["custody_in_flight"], figures["custody_reported"]) == (
            "0.00000000",
            "-0.25000000",
            "0.25000000",
        )
    deliver_custody_callbacks()  # 2, then 3 confirmations: credited
    report = reconcile()
    assert report.ok and (report.assets["BTC"]["custody"], report.assets["BTC"]["custody_in_flight"]) == (
        "0.25000000",
        "0.00000000",
    )


def test_a_deposit_credited_from_a_report_custody_never_counted_is_a_difference(client, user, btc):
    """Break-it review: a signed report of coins custody never received was credited, and invariant 5 took it for in
    flight for ever."""
    address = deposit_address_get_or_create(user_id=user.id, asset=btc).address
    assert webhook_sender(client)(*signed(deposit_payload(address, "1", txid="forged-1", confirmations=3))) == 200
    deliver_custody_callbacks()
    assert Deposit.objects.get().status == "credited"

    assert failed_checks(reconcile())["custody_matches_provider"] == [
        {
            "asset": "BTC",
            "ledger_custody": "1.00000000",
            "in_flight": "0.00000000",
            "custody_reported": "0.00000000",
            "difference": "1.00000000",
        }
    ]


def test_asset_filter_limits_invariant_5(busy_exchange):
    SimWallet.objects.filter(asset_code="USDT").update(balance=0)

    assert reconcile(asset_code="BTC").ok
    assert not reconcile(asset_code="USDT").ok


def test_a_credited_entry_without_its_credited_deposit_fails_invariant_8(busy_exchange):
    deposit = Deposit.objects.filter(asset__code="BTC").get()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE wallets_deposit SET status = 'pending', entry_id = NULL, credited_at = NULL WHERE id = %s",
            [deposit.pk],
        )

    details = failed_checks(reconcile())["deposits_credited_once"]

    assert [row["problem"] for row in details] == [
        "entry posted but deposit not credited",
        "deposit entry without a credited deposit",
    ]
    assert details[0]["deposit"] == deposit.pk


def test_an_ended_withdrawal_without_its_release_fails_invariants_4_and_8(busy_exchange, user):
    awaiting = busy_exchange["awaiting"]
    Withdrawal.objects.filter(pk=awaiting.pk).update(  # cancelled behind the services' back: no release
        status=WithdrawalStatus.CANCELLED, hold_remaining=0, ended_at=timezone.now()
    )

    failed = failed_checks(reconcile())

    assert set(failed) == {"held_matches_open_holds", "withdrawals_ended_once"}
    assert failed["withdrawals_ended_once"] == [
        {
            "withdrawal": awaiting.pk,
            "asset": "USDT",
            "status": "cancelled",
            "hold_entry": failed["withdrawals_ended_once"][0]["hold_entry"],
            "complete_entry": None,
            "release_entry": None,
            "problem": "ended without its release",
        }
    ]
    assert failed["held_matches_open_holds"][0]["held"] == "322.000000"
    assert failed["held_matches_open_holds"][0]["open_holds"] == "21.000000"


def test_a_completed_withdrawal_marked_failed_fails_invariant_8(busy_exchange):
    completed = busy_exchange["completed"]
    Withdrawal.objects.filter(pk=completed.pk).update(status=WithdrawalStatus.FAILED)

    details = failed_checks(reconcile())["withdrawals_ended_once"]

    assert [(row["withdrawal"], row["problem"]) for row in details] == [(completed.pk, "ended without its release")]
