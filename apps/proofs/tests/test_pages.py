"""The customer's proof of liabilities page and downloads, the activity page's entry proofs, the admin's
solvency screen, and the standalone verifier run as a program."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django_otp.plugins.otp_totp.models import TOTPDevice

from apps.accounts.tests.otp import code_now
from apps.ledger.models import Asset, Posting
from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import UserFactory, fund
from apps.proofs.services import liabilities_snapshot_take

VERIFIER = Path(__file__).resolve().parents[3] / "tools" / "verify_liabilities.py"


def test_the_page_shows_my_balances_the_totals_and_the_steps(snapshot, funded, client):
    client.force_login(funded[0])

    page = client.get("/proofs/liabilities/").content.decode()

    assert f"Snapshot {snapshot.id}" in page and snapshot.root_hash in page
    assert '<td>BTC</td><td class="num">0.50000000</td><td class="num">1.75000000</td>' in page
    assert 'href="/proofs/liabilities/proof.json"' in page and 'href="/proofs/verify_liabilities.py"' in page
    assert f"--keys http://testserver/api/v1/proofs/keys/ --user-id {funded[0].id}</code>" in page
    assert f'Your user id is <strong id="user-id">{funded[0].id}</strong>' in page


def test_a_user_without_a_leaf_is_told_so(snapshot, funded, client):
    client.force_login(funded[3])
    assert "holds no leaf of yours" in client.get("/proofs/liabilities/").content.decode()
    assert client.get("/proofs/liabilities/proof.json").status_code == 404


def test_the_page_offers_my_proof_in_each_earlier_snapshot_holding_my_balances(snapshot, funded, client):
    fund(funded[3], Asset.objects.get(code="BTC"), "1")
    journal_seal()
    newer = liabilities_snapshot_take()
    client.force_login(funded[0])

    page = client.get("/proofs/liabilities/").content.decode()
    download = client.get(f"/proofs/liabilities/{snapshot.id}/proof.json")

    assert f"Snapshot {newer.id}" in page
    assert f'<a href="/proofs/liabilities/{snapshot.id}/proof.json" download>' in page
    assert f'href="/proofs/liabilities/{newer.id}/proof.json"' not in page  # the newest is offered above
    assert download.status_code == 200 and json.loads(download.content)["snapshot"]["snapshot_id"] == snapshot.id
    assert json.loads(download.content)["balances"] == ["0.50000000", "12.000000"]
    client.force_login(funded[3])  # only in the newer snapshot
    assert "Earlier snapshots" not in client.get("/proofs/liabilities/").content.decode()
    assert client.get(f"/proofs/liabilities/{snapshot.id}/proof.json").status_code == 404
    assert "reserves" not in page  # none are published (break-it review: the page told customers to compare them)


def test_the_page_needs_a_login(db, client):
    assert client.get("/proofs/liabilities/").status_code == 302


def test_the_downloaded_proof_verifies_with_the_standalone_program(snapshot, funded, client, tmp_path):
    client.force_login(funded[0])
    download = client.get("/proofs/liabilities/proof.json")
    (tmp_path / "proof.json").write_bytes(download.content)
    (tmp_path / "keys.json").write_bytes(client.get("/api/v1/proofs/keys/").content)
    program = tmp_path / "verify_liabilities.py"
    program.write_bytes(b"".join(client.get("/proofs/verify_liabilities.py").streaming_content))

    def run(*args):
        # Run from a scratch folder with nothing of the project on the path: the verifier stands alone.
        return subprocess.run(
            [sys.executable, "-I", str(program), "proof.json", "--keys", "keys.json", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert download["Content-Disposition"] == f'attachment; filename="liabilities-proof-{snapshot.id}.json"'
    good = run("--expect", "BTC=0.50000000", "--expect", "USDT=12.000000")
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.startswith(f"OK: user {funded[0].id} is in snapshot {snapshot.id}")
    assert good.stdout.endswith(f"Check that {funded[0].id} is your user id (or pass --user-id).\n")
    # Break-it review: another customer's proof (same balances, say) passed; --user-id ties the leaf to its reader.
    own = run("--user-id", str(funded[0].id), "--expect", "BTC=0.5")
    assert own.returncode == 0 and "--user-id" not in own.stdout
    assert run("--user-id", str(funded[1].id)).stdout == (
        f"REFUSED: this proof is of user {funded[0].id}, not of user {funded[1].id}: it is not your leaf\n"
    )
    assert run("--expect", "BTC=0.60000000").stdout == (
        "REFUSED: your BTC balance in the snapshot is 0.50000000, not 0.60000000\n"
    )
    # Compared as numbers, as the wallet page shows them (trimmed): 0.5 is 0.50000000; 12 is 12.000000.
    assert run("--expect", "BTC=0.5", "--expect", "USDT=12").returncode == 0
    # A typo is a usage error, exit 2, not the refusal of a proof (break-it review: both exited 1).
    typo = run("--expect", "BTC=half")
    assert (typo.returncode, typo.stdout) == (2, "") and "'BTC=half' is not CODE=AMOUNT, such as BTC=0.5" in typo.stderr
    assert run("--expect", "ETH=1").stdout == "REFUSED: the snapshot has no asset 'ETH' (its assets: BTC, USDT)\n"
    doubled = download.content.decode().replace('"balances":', '"balances":["9.00000000","0.000000"],"balances":', 1)
    (tmp_path / "proof.json").write_text(doubled)  # a parser keeping the first value would show 9 BTC
    assert run().stdout == "REFUSED: cannot read the proof or the keys: an object names a key twice: ['balances']\n"
    forged = json.loads(download.content)
    forged["balances"][0] = "0.40000000"
    (tmp_path / "proof.json").write_text(json.dumps(forged))
    refused = run()
    assert refused.returncode == 1
    assert refused.stdout.startswith("REFUSED: the path does not lead to the snapshot's root_hash")


def test_the_activity_page_offers_each_entrys_proof(snapshot, funded, client, api):
    ann = funded[0]
    client.force_login(ann)
    entry_id = Posting.objects.filter(account__owner=ann).order_by("-id").first().entry_id

    page = client.get("/activity/").content.decode()
    download = client.get(f"/proofs/entries/{entry_id}/proof.json")

    assert f'href="/proofs/entries/{entry_id}/proof.json" download' in page
    assert download.status_code == 200 and json.loads(download.content)["entry"]["id"] == entry_id
    client.force_login(UserFactory())
    assert client.get(f"/proofs/entries/{entry_id}/proof.json").status_code == 404


@pytest.mark.parametrize(
    ("groups", "second_factor", "status"),
    # Without the second factor, staff who may read every entry are told it needs one (break-it review: a 404, "No
    # entry", had an auditor take the entry for missing); without the permission it is a 404, as to anyone else.
    [(["operators"], True, 200), (["operators"], False, 403), ([], True, 404)],
)
def test_staff_read_another_customers_entry_proof_only_with_the_permission_and_the_second_factor(
    snapshot, funded, client, api, groups, second_factor, status
):
    """A staff password alone (the admin's log-in, a new API key) opened every customer's entries (break-it review):
    the ledger's view permission (the operators') and a session confirmed with the second factor are both needed."""
    entry_id = Posting.objects.filter(account__owner=funded[0]).order_by("-id").first().entry_id
    staff = UserFactory(is_staff=True)
    staff.groups.add(*Group.objects.filter(name__in=groups))
    client.force_login(staff)
    if second_factor:
        client.get("/admin/second-factor/")  # enrols an authenticator, then confirms this session with its code
        client.post("/admin/second-factor/", {"token": code_now(TOTPDevice.objects.get(user=staff))})

    assert client.get(f"/proofs/entries/{entry_id}/proof.json").status_code == status
    assert client.get(f"/api/v1/ledger/entries/{entry_id}/proof/").status_code == status
    api.force_authenticate(staff)  # an API key's request: no session, so never confirmed by a second factor
    over_a_key = api.get(f"/api/v1/ledger/entries/{entry_id}/proof/")
    assert over_a_key.status_code == (403 if groups else 404)
    if groups:
        assert "confirmed with your second factor" in over_a_key.json()["error"]["message"]
    assert client.get("/api/v1/ledger/entries/999999999/proof/").status_code == 404  # no entry is still none


def test_the_admin_screen_flags_assets_whose_liabilities_exceed_custody(snapshot, admin_client):
    # The users were funded from equity, not deposits: custody holds nothing of what they are owed.
    listing = admin_client.get("/admin/proofs/liabilitysnapshot/").content.decode()
    page = admin_client.get(f"/admin/proofs/liabilitysnapshot/{snapshot.id}/change/").content.decode()

    assert "BTC, USDT" in listing
    assert "LIABILITIES EXCEED CUSTODY" in page and "1.75000000" in page and "12.000001" in page
    assert "custody / liabilities" in page
