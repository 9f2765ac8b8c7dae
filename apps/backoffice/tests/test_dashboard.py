"""The admin index as a dashboard, and the admin's lists: usernames, amounts with their asset, debit and credit,
plain decimals in the audit log, dates with seconds and the time zone, the accountants' CSV export."""

import csv
import io
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from apps.backoffice.services import audit_record, reconciliation_run
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import market_halt
from apps.orders.tests.conftest import btc_usdt, default_fees  # noqa: F401  (fixtures)
from apps.wallets.custody import simnet
from apps.wallets.services import withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_through_custody


def test_the_dashboard_shows_approvals_reconciliation_halted_markets_and_health(
    client,
    operator,
    admin_login,
    usdt,
    btc_usdt,  # noqa: F811  (the fixture imported above)
):
    usdt.withdrawal_auto_approve_limit = Decimal(10)
    usdt.withdrawal_daily_limit = Decimal(100000)
    usdt.save(update_fields=["withdrawal_auto_approve_limit", "withdrawal_daily_limit"])
    trader = UserFactory(username="tina")
    deposit_through_custody(trader, usdt, "5000")

    for amount in ("1200.5", "300"):
        address = book_address(trader, usdt, simnet.new_address()).address
        withdrawal_request(user_id=trader.id, asset_code="USDT", amount=amount, address=address)
    reconciliation_run()
    market_halt(market_id=btc_usdt.id, operator_id=operator.id, reason="test")
    admin_login(operator)

    page = client.get(reverse("admin:index")).content.decode()

    approvals = page.split('id="tile-approvals"')[1].split("</section>")[0]
    assert ">2</a>" in approvals and '<span class="amount" title="1500.5">1,500.5</span>' in approvals
    reconciliation = page.split('id="tile-reconciliation"')[1].split("</section>")[0]
    assert ">Passed</a>" in reconciliation and " UTC" in reconciliation
    assert "BTC-USDT" in page.split('id="tile-markets"')[1].split("</section>")[0]
    health = page.split('id="tile-health"')[1].split("</section>")[0]
    assert "Custody events unprocessed" in health and "Celery worker:" in health


def test_postings_show_debit_and_credit_columns_the_owner_and_the_asset(client, operator, admin_login, usdt):
    holder = UserFactory(username="hanna")
    fund(holder, usdt, "1234.5")
    admin_login(operator)

    page = client.get(reverse("admin:ledger_posting_changelist")).content.decode()

    assert "<span>Debit</span>" in page and "<span>Credit</span>" in page and ">Signed amount</a>" in page
    assert '<td class="field-debit"><span class="amount" title="1234.5 USDT">1,234.5 USDT</span></td>' in page
    assert '<td class="field-credit"><span class="amount" title="1234.5 USDT">1,234.5 USDT</span></td>' in page
    assert '<td class="field-account nowrap">user_available USDT (hanna)</td>' in page
    accounts = client.get(reverse("admin:ledger_account_changelist")).content.decode()
    assert '<td class="field-owner_name">hanna</td>' in accounts


def test_the_audit_log_shows_decimals_plainly_and_names_the_actor(client, operator, admin_login):
    audit_record(
        actor_id=operator.id,
        action="market.update",
        object_type="orders.market",
        object_id=1,
        before={"min_notional": "0E-18", "min_qty": "0.000100000000000000"},
        after={"min_notional": "5.000000000000000000", "min_qty": "0.000100000000000000"},
    )
    admin_login(operator)

    page = client.get(reverse("admin:backoffice_auditlogentry_changelist")).content.decode()

    assert "0E-18" not in page and "0.000100000000000000" not in page
    assert "<span>min_notional:</span> 0</div>" in page
    assert '<div class="changed"><span>min_notional:</span> 5</div>' in page
    assert '<td class="field-actor_name">olga</td>' in page


def test_admin_dates_have_seconds_and_the_time_zone(client, operator, admin_login):
    run = reconciliation_run()
    admin_login(operator)
    page = client.get(reverse("admin:backoffice_reconciliationrun_changelist")).content.decode()
    assert timezone.localtime(run.started_at).strftime("%Y-%m-%d %H:%M:%S UTC") in page


def test_the_journal_export_is_every_posting_of_the_days_asked_for(client, operator, admin_login, usdt):
    holder = UserFactory(username="hanna")
    fund(holder, usdt, "0.000001")
    admin_login(operator)
    url = reverse("admin:ledger_journalentry_export")
    today = str(timezone.now().date())

    exported = client.get(url, {"start": today, "end": today})
    later = client.get(url, {"start": "2999-01-01", "end": "2999-01-02"})
    refused = client.get(url, {"start": today, "end": "2000-01-01"})

    rows = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert [(r["account_kind"], r["owner"], r["debit"], r["credit"], r["amount"]) for r in rows] == [
        ("equity", "", "0.000001", "", "0.000001"),
        ("user_available", "hanna", "", "0.000001", "-0.000001"),
    ]
    assert len(b"".join(later.streaming_content).decode().splitlines()) == 1  # the header alone
    assert refused.status_code == 400 and "Must be on or after the start date." in refused.content.decode()
