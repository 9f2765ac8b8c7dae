"""The admin index as a dashboard, and the admin's lists: usernames, amounts with their asset, debit and credit,
plain decimals in the audit log, dates with seconds and the time zone, the accountants' CSV export."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.backoffice.services import reconciliation_run
from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.services import market_halt
from apps.proofs.services import liabilities_snapshot_take
from apps.wallets.custody import simnet
from apps.wallets.models import CustodyEvent
from apps.wallets.services import custody_event_process, custody_event_receive, withdrawal_request
from apps.wallets.tests.factories import book_address, deposit_payload, deposit_through_custody, signed


def test_the_dashboard_shows_approvals_reconciliation_halted_markets_and_health(
    client,
    operator,
    admin_login,
    usdt,
    btc_usdt,
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


def test_the_back_office_links_the_sites_favicon(client, operator, admin_login):
    admin_login(operator)
    page = client.get(reverse("admin:index")).content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page


def _tile(page: str, name: str) -> str:
    return page.split(f'id="tile-{name}"')[1].split("</section>")[0]


def test_the_dashboard_says_when_no_liabilities_snapshot_was_taken(client, operator, admin_login):
    admin_login(operator)
    solvency = _tile(client.get(reverse("admin:index")).content.decode(), "solvency")
    assert "No snapshot yet" in solvency and "<table>" not in solvency


def test_the_dashboard_shows_the_last_snapshot_and_its_solvency_per_asset(client, operator, admin_login, usdt, btc):
    btc.display_decimals = 4
    btc.save(update_fields=["display_decimals"])
    deposit_through_custody(UserFactory(username="dora"), btc, "1.23456789")
    deposit_through_custody(UserFactory(username="ugo"), usdt, "2500")
    journal_seal()
    liabilities_snapshot_take()  # an older one: the dashboard shows the newest
    fund(UserFactory(username="fred"), btc, "0.5")  # a credit custody never received: BTC is short
    journal_seal()
    snapshot = liabilities_snapshot_take()
    admin_login(operator)

    solvency = _tile(client.get(reverse("admin:index")).content.decode(), "solvency")

    assert f'href="{reverse("admin:proofs_liabilitysnapshot_change", args=[snapshot.id])}">SHORT</a>' in solvency
    assert f"Snapshot #{snapshot.id} taken " in solvency and " UTC" in solvency
    assert f"at block {snapshot.block.height}, 3 customers." in solvency
    assert (
        '<tr class="short"><td>BTC</td>'
        '<td class="num"><span class="amount" title="1.73456789">1.7345</span></td>'
        '<td class="num"><span class="amount" title="1.23456789">1.2345</span></td>'
        '<td class="num">71.17 %</td></tr>'
    ) in solvency
    assert (
        '<tr><td>USDT</td><td class="num"><span class="amount" title="2500">2,500</span></td>'
        '<td class="num"><span class="amount" title="2500">2,500</span></td><td class="num">100.00 %</td></tr>'
    ) in solvency


def test_the_dashboard_calls_a_snapshot_custody_covers_solvent(client, operator, admin_login, btc):
    deposit_through_custody(UserFactory(username="dora"), btc, "0.3")
    journal_seal()
    liabilities_snapshot_take()
    admin_login(operator)

    solvency = _tile(client.get(reverse("admin:index")).content.decode(), "solvency")

    assert ">Solvent</a>" in solvency and 'class="short"' not in solvency
    assert '<td class="num">100.00 %</td>' in solvency


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

    page = client.get(reverse("admin:audit_auditlogentry_changelist")).content.decode()

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


def test_the_journal_export_writes_a_username_a_spreadsheet_would_run_as_a_formula_as_text(
    client, operator, admin_login, usdt
):
    """Break-it review: sign-up allows ``-1+1`` and ``@name``; the accountants' export wrote them as they are,
    which a spreadsheet evaluates (``-1+1`` showed as 0). They are prefixed with ``'`` as the traders' exports do."""
    for username in ("-1+1", "@mallory", "+cmd"):
        fund(UserFactory(username=username), usdt, "1")
    admin_login(operator)
    today = str(timezone.now().date())
    exported = client.get(reverse("admin:ledger_journalentry_export"), {"start": today, "end": today})
    rows = csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode()))
    assert sorted(r["owner"] for r in rows if r["owner"]) == ["'+cmd", "'-1+1", "'@mallory"]


def test_the_journal_export_refuses_an_end_date_whose_next_day_no_datetime_holds(client, operator, admin_login):
    """The export reads up to the midnight after its last day: 9999-12-31 has none (``OverflowError``, a 500)."""
    admin_login(operator)
    url = reverse("admin:ledger_journalentry_export")

    refused = client.get(url, {"start": "2026-01-01", "end": "9999-12-31"})
    last = client.get(url, {"start": "0001-01-01", "end": "9999-12-30"})

    assert refused.status_code == 400 and "Must be on or before 9999-12-30." in refused.content.decode()
    assert last.status_code == 200


def test_the_dashboard_counts_the_custody_events_rejected_within_a_day(client, operator, admin_login, btc):
    """Break-it review: a credited deposit reported failed was only a rejected event, and the dashboard said
    "Healthy"; every rejected event now shows for a day."""
    deposit = deposit_through_custody(UserFactory(), btc, "1")
    for event_id in ("reorg-old", "reorg"):
        payload = deposit_payload(
            deposit.address.address, "1", txid=deposit.txid, status="failed", confirmations=None, event_id=event_id
        )
        custody_event_process(event_pk=custody_event_receive(body=signed(payload)[0])[0].pk)
    CustodyEvent.objects.filter(event_id="reorg-old").update(received_at=timezone.now() - timedelta(days=2))
    admin_login(operator)

    page = client.get(reverse("admin:index")).content.decode()

    assert '<section class="module tile attention" id="tile-rejected-events">' in page
    tile = page.split('id="tile-rejected-events"')[1].split("</section>")[0]
    assert '?state__exact=rejected">1</a>' in tile and "withdrawals are blocked" in tile
