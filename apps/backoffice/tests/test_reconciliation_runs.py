from django.conf import settings
from django.db import connection

from apps.backoffice.models import ReconciliationRun
from apps.backoffice.services import reconciliation_run
from apps.backoffice.tasks import reconcile_scheduled
from apps.ledger.services import user_account
from apps.ledger.tests.factories import fund


def plant_balance_fault(user, asset):
    account = user_account(user.id, asset)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_account SET balance = balance + 1 WHERE id = %s", [account.id])
    return account


def test_each_run_is_kept_with_its_report(db, usdt, user):
    fund(user, usdt, "10")
    run = reconciliation_run()
    assert run.ok
    assert run.report["assets"]["USDT"]["equity"] == "-10.000000"
    assert ReconciliationRun.objects.count() == 1


def test_the_hourly_schedule_runs_the_reconciliation(db):
    assert settings.CELERY_BEAT_SCHEDULE["reconcile-hourly"]["task"] == "apps.backoffice.tasks.reconcile_scheduled"
    assert reconcile_scheduled.apply().get() is True
    assert ReconciliationRun.objects.get().triggered_by is None


def test_a_failed_run_shows_a_banner_on_every_admin_page_until_a_later_run_passes(db, client, operator, usdt, user):
    fund(user, usdt, "10")
    account = plant_balance_fault(user, usdt)
    failed = reconciliation_run()
    client.force_login(operator)

    assert not failed.ok
    for page in ["/admin/", "/admin/ledger/account/", "/admin/audit/auditlogentry/"]:
        assert 'id="reconciliation-failed"' in client.get(page).content.decode()

    with connection.cursor() as cursor:  # repair the planted fault
        cursor.execute("UPDATE ledger_account SET balance = balance - 1 WHERE id = %s", [account.id])
    assert reconciliation_run().ok
    assert 'id="reconciliation-failed"' not in client.get("/admin/").content.decode()


def test_run_now_from_the_admin_names_the_offending_account_with_a_link(db, client, operator, usdt, user):
    fund(user, usdt, "10")
    account = plant_balance_fault(user, usdt)
    client.force_login(operator)

    response = client.post("/admin/backoffice/reconciliationrun/run/", follow=True)

    page = response.content.decode()
    run = ReconciliationRun.objects.get()
    assert run.triggered_by == operator
    assert "FAIL</strong>\n    invariant 2: balances_match_postings" in page
    assert f'href="/admin/ledger/account/{account.id}/change/"' in page
    assert "11.000000" in page  # the stored balance


def test_running_needs_the_permission(db, client, usdt):
    from apps.ledger.tests.factories import UserFactory

    client.force_login(UserFactory(is_staff=True))
    assert client.post("/admin/backoffice/reconciliationrun/run/").status_code == 403
    assert not ReconciliationRun.objects.exists()


def test_planted_custody_difference_is_found_per_asset(db, client, operator, usdt, user):
    from decimal import Decimal

    from apps.wallets.custody.simulator.models import SimWallet
    from apps.wallets.tests.factories import deposit_through_custody

    deposit_through_custody(user, usdt, "50")
    SimWallet.objects.filter(asset_code="USDT").update(balance=Decimal("49"))
    client.force_login(operator)

    page = client.post("/admin/backoffice/reconciliationrun/run/", follow=True).content.decode()

    run = ReconciliationRun.objects.get()
    failed = {check["name"]: check["details"] for check in run.failed_checks}
    assert failed == {
        "custody_matches_provider": [
            {
                "asset": "USDT",
                "ledger_custody": "50.000000",
                "in_flight": "0.000000",
                "custody_reported": "49.000000",
                "difference": "1.000000",
            }
        ]
    }
    assert "custody_matches_provider" in page and "49.000000" in page


def test_the_screen_names_the_figures_in_words_and_highlights_a_custody_difference(db, client, operator, usdt, user):
    from decimal import Decimal

    from apps.backoffice.services import reconciliation_run
    from apps.wallets.custody.simulator.models import SimWallet
    from apps.wallets.tests.factories import deposit_through_custody

    deposit_through_custody(user, usdt, "50")
    reconciliation_run()  # agrees
    SimWallet.objects.filter(asset_code="USDT").update(balance=Decimal("49"))
    reconciliation_run()  # 1 USDT apart
    client.force_login(operator)

    page = client.get("/admin/backoffice/reconciliationrun/").content.decode()

    table = page.split('id="reconciliation-assets"')[1].split("</table>")[0]
    for header in ("Custody in ledger", "Custody reported", "Difference"):
        assert f'<th class="num">{header}</th>' in table
    assert '<td class="num difference-nonzero" data-figure="custody_difference" title="1.000000">1</td>' in table
    assert page.index('id="reconciliation-assets"') < page.index('id="changelist-filter"')  # above the filters
    chart = page.split('id="difference-chart"')[1].split("</div>")[0]
    usdt_chart = chart.split('data-asset="USDT"')[1].split("</figure>")[0]
    assert usdt_chart.count("<circle") == 2 and 'fill="#ba2121"' in usdt_chart and "largest difference 1" in usdt_chart


def test_planted_hold_that_no_open_order_explains_is_found(db, usdt, user):
    from decimal import Decimal

    from apps.ledger.models import AccountKind
    from apps.ledger.services import funds_hold

    fund(user, usdt, "10")
    hold = funds_hold(user_id=user.id, asset=usdt, amount=Decimal("4"), idempotency_key="order:404:hold")

    run = reconciliation_run()

    held = user_account(user.id, usdt, AccountKind.USER_HELD)
    assert [check["name"] for check in run.failed_checks] == ["held_matches_open_holds", "entry_reasons_backed"]
    assert [row["entry"] for row in run.failed_checks[1]["details"]] == [hold.id]  # no order backs it either
    assert run.failed_checks[0]["details"] == [
        {"account": held.id, "owner": user.id, "asset": "USDT", "held": "4.000000", "open_holds": "0.000000"}
    ]


def test_reconcile_checks_all_nine_invariants(db):
    from apps.ledger.reconciliation import registered_invariants

    assert registered_invariants() == {1, 2, 3, 4, 5, 6, 7, 8, 9}
    assert {check["invariant"] for check in reconciliation_run().report["checks"]} == set(range(1, 10))
