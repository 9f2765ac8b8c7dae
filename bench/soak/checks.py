"""The checks: the outcome read from the database, compared with what the clients were told."""

from __future__ import annotations

from collections import Counter

from .common import D, amount_text


class Checks:
    """Read the outcome from the database and compare it with what the clients were told."""

    def __init__(self, records: list[dict], config: dict):
        self.records, self.config = records, config
        self.traders = [record for record in records if record["role"] == "trader"]
        self.approvers = [record for record in records if record["role"] == "approver"]
        self.lost: list[str] = []

    def run(self) -> tuple[list[dict], list[str]]:
        """Every check as ``{"name", "ok", "checked", "problems"}``, and what was lost."""
        from django.db import close_old_connections, connections

        connections.close_all()
        close_old_connections()
        checks = []
        for name in (
            "reconcile",
            "journal",
            "client_anomalies",
            "inbox",
            "callbacks",
            "deposits",
            "forged_callbacks",
            "orders",
            "order_holds",
            "withdrawals",
        ):
            problems: list[str] = []
            lost: list[str] = []
            checked = getattr(self, f"check_{name}")(problems, lost)
            self.lost.extend(lost)
            checks.append(
                {
                    "name": name,
                    "ok": not problems and not lost,
                    "checked": checked,
                    "lost": len(lost),
                    "problems": (lost + problems)[:20],
                }
            )
        return checks, self.lost

    def user_ids(self) -> dict[str, int]:
        """The traders' user ids by username."""
        from django.contrib.auth import get_user_model

        names = [record["user"] for record in self.traders]
        return dict(get_user_model().objects.filter(username__in=names).values_list("username", "id"))

    def check_reconcile(self, problems, lost) -> int:
        """``reconcile()``: every invariant of DESIGN.md section 5."""
        from apps.ledger.reconciliation import reconcile

        report = reconcile()
        for check in report.checks:
            if not check.ok:
                problems.append(f"invariant {check.invariant} {check.name}: {check.details[:3]}")
        return len(report.checks)

    def check_journal(self, problems, lost) -> int:
        """Every entry is sealed (by the sealer beat ran, not by this check) and the chain verifies."""
        from apps.ledger.models import JournalEntry
        from apps.ledger.seal.verification import journal_verify

        unsealed = JournalEntry.objects.filter(seal__isnull=True).count()
        if unsealed:
            problems.append(f"{unsealed} entries are in no block")
        result = journal_verify()
        if not result.ok:
            problems.append(f"journal_verify: {result.as_dict()['discrepancy']}")
        return result.entries

    def check_client_anomalies(self, problems, lost) -> int:
        """Answers no correct server gives (an idempotency conflict on a retry, a forged callback accepted...)."""
        for record in self.records:
            problems.extend(f"{record['role']}-{record['index']}: {anomaly}" for anomaly in record["anomalies"])
        return len(self.records)

    def check_inbox(self, problems, lost) -> int:
        """Every stored callback was processed; none was rejected as contradictory."""
        from apps.wallets.models import CustodyEvent, EventState

        states = Counter(CustodyEvent.objects.values_list("state", flat=True))
        if states.get(EventState.RECEIVED):
            problems.append(f"{states[EventState.RECEIVED]} custody events still unprocessed")
        for event in CustodyEvent.objects.filter(state=EventState.REJECTED)[:10]:
            problems.append(f"custody event {event.event_id} rejected: {event.error}")
        return sum(states.values())

    def check_callbacks(self, problems, lost) -> int:
        """Every callback answered 200 (by a client, or by the provider's own delivery) is in the inbox, processed."""
        from apps.wallets.custody.simulator.models import SimCallback
        from apps.wallets.models import CustodyEvent, EventState

        answered = {
            callback["event_id"]
            for record in self.traders
            for callback in record["callbacks"]
            if 200 in callback["answers"]
        }
        answered |= set(SimCallback.objects.filter(delivered_at__isnull=False).values_list("event_id", flat=True))
        stored = dict(CustodyEvent.objects.filter(event_id__in=answered).values_list("event_id", "state"))
        for event_id in sorted(answered):
            if event_id not in stored:
                lost.append(f"callback {event_id} was answered 200 but is not in the inbox")
            elif stored[event_id] != EventState.PROCESSED:
                lost.append(f"callback {event_id} was answered 200 but is {stored[event_id]}")
        return len(answered)

    def check_deposits(self, problems, lost) -> int:
        """Each deposit the provider confirmed is credited exactly once, with its amount, to the address's
        owner; nothing else is credited."""
        from apps.ledger.models import AccountKind, EntryReason, JournalEntry, Posting
        from apps.wallets.custody.simulator.models import SimDeposit
        from apps.wallets.models import Deposit, DepositAddress, DepositStatus

        owners = dict(DepositAddress.objects.values_list("address", "user_id"))
        confirmed = {(d.network, d.txid, d.vout): d for d in SimDeposit.objects.filter(status="confirmed")}
        credited = {
            (d.network, d.txid, d.vout): d
            for d in Deposit.objects.filter(status=DepositStatus.CREDITED).select_related("address")
        }
        sent_by_clients = {
            (deposit["txid"], deposit["vout"]) for record in self.traders for deposit in record["deposits"]
        }
        for key, sim in confirmed.items():
            deposit = credited.get(key)
            if deposit is None:
                lost.append(f"deposit {key[1]}:{key[2]} confirmed by custody but not credited")
                continue
            if deposit.amount != sim.amount or deposit.user_id != owners.get(sim.address):
                lost.append(
                    f"deposit {key[1]}: credited {deposit.amount} to user {deposit.user_id}, custody says "
                    f"{sim.amount} to {owners.get(sim.address)}"
                )
            entries = list(JournalEntry.objects.filter(idempotency_key=deposit.idempotency_key))
            if len(entries) != 1:
                lost.append(f"deposit {key[1]}: {len(entries)} credit entries")
                continue
            credit = (
                Posting.objects.filter(entry=entries[0], account__kind=AccountKind.USER_AVAILABLE)
                .values_list("account__owner_id", "amount")
                .first()
            )
            if credit is None or credit[0] != deposit.user_id or -credit[1] != sim.amount:
                lost.append(
                    f"deposit {key[1]}: the credit posting is {credit}, expected {sim.amount} to user {deposit.user_id}"
                )
        for key in credited.keys() - confirmed.keys():
            lost.append(f"deposit {key[1]}:{key[2]} credited but custody never confirmed it")
        for txid, vout in sent_by_clients:
            if not any(key[1:] == (txid, vout) for key in confirmed):
                problems.append(f"deposit {txid}:{vout} the clients sent is not confirmed at custody")
        entries = JournalEntry.objects.filter(reason=EntryReason.DEPOSIT).count()
        if entries != len(credited):
            lost.append(f"{entries} deposit entries for {len(credited)} credited deposits")
        return len(confirmed)

    def check_forged_callbacks(self, problems, lost) -> int:
        """Forged callbacks left no trace: no inbox event, no deposit; a tampered body did not change the event."""
        from apps.wallets.models import CustodyEvent, Deposit

        forged = [item for record in self.traders for item in record["forged"]]
        for item in forged:
            if item["kind"] == "tampered_body":
                event = CustodyEvent.objects.filter(event_id=item["event_id"]).first()
                if event is not None and amount_text(event.amount) == item["amount"]:
                    lost.append(f"a tampered callback changed event {item['event_id']}")
                continue
            if CustodyEvent.objects.filter(event_id=item["event_id"]).exists():
                lost.append(f"forged callback {item['event_id']} ({item['kind']}) was stored")
            if Deposit.objects.filter(txid=item["txid"]).exists():
                lost.append(f"forged deposit {item['txid']} ({item['kind']}) was recorded")
        return len(forged)

    def check_orders(self, problems, lost) -> int:
        """Acknowledged orders exist with their terms, in a state consistent with what the API said; each
        client_order_id applied at most once; no order exists that the clients did not ask for."""
        from django.db.models import Sum

        from apps.ledger.models import JournalEntry
        from apps.orders.models import ENDED_STATUSES, OPEN_STATUSES, Order, OrderStatus, Trade

        users = self.user_ids()
        checked = 0
        for record in self.traders:
            user_id = users[record["user"]]
            mine = {
                order.client_order_id: order for order in Order.objects.filter(user_id=user_id).select_related("market")
            }
            asked = {order["client_order_id"]: order for order in record["orders"]}
            for client_order_id in mine.keys() - asked.keys():
                lost.append(f"order {mine[client_order_id].id} ({client_order_id!r}) that no request accounts for")
            cancelled = {cancel["id"] for cancel in record["order_cancels"] if cancel["outcome"] == "acknowledged"}
            for client_order_id, request in asked.items():
                order = mine.get(client_order_id)
                if request["outcome"] == "refused" and order is not None:
                    lost.append(f"order {client_order_id} was refused ({request.get('code')}) but exists")
                if request["outcome"] != "acknowledged":
                    continue
                checked += 1
                if order is None or order.id != request["id"]:
                    lost.append(f"acknowledged order {request['id']} ({client_order_id}) is missing")
                    continue
                body = request["request"]
                terms = {"market": order.market.symbol, "side": order.side, "type": order.type}
                for field in ("price", "qty", "quote_qty"):
                    value = getattr(order, field)
                    terms[field] = None if value is None else amount_text(value)
                for field, value in terms.items():
                    if body.get(field) is not None and str(body[field]) != value:
                        lost.append(f"order {order.id}: {field} is {value}, the request said {body[field]}")
                said = request["status"]
                if said not in OPEN_STATUSES and order.status != said:
                    lost.append(f"order {order.id} was acknowledged {said} and is now {order.status}")
                if D(order.filled_qty) < D(request["filled_qty"]):
                    lost.append(f"order {order.id}: filled {order.filled_qty} < acknowledged {request['filled_qty']}")
                if order.id in cancelled and order.status != OrderStatus.CANCELLED:
                    lost.append(f"order {order.id}: its cancel was acknowledged but it is {order.status}")
        fills: Counter = Counter()
        for side in ("taker_order", "maker_order"):
            for order_id, qty in Trade.objects.values(side).annotate(q=Sum("qty")).values_list(side, "q"):
                fills[order_id] += qty
        entries = Counter(
            JournalEntry.objects.filter(idempotency_key__startswith="order:").values_list("idempotency_key", flat=True)
        )
        for order in Order.objects.filter(user_id__in=users.values()):
            if fills[order.id] != order.filled_qty:
                problems.append(f"order {order.id}: trades fill {fills[order.id]}, the order says {order.filled_qty}")
            holds = entries[f"order:{order.id}:hold"]
            if holds != (1 if order.held_amount else 0):
                problems.append(f"order {order.id}: {holds} hold entries")
            release = entries[f"order:{order.id}:release"]
            if release > 1 or (release and order.status not in ENDED_STATUSES):
                problems.append(f"order {order.id} ({order.status}): {release} release entries")
        return checked

    def check_order_holds(self, problems, lost) -> int:
        """No ended order holds anything; every open order holds something."""
        from apps.orders.models import ENDED_STATUSES, OPEN_STATUSES, Order

        for order in Order.objects.filter(status__in=ENDED_STATUSES).exclude(held_remaining=0)[:20]:
            problems.append(f"order {order.id} is {order.status} and still holds {order.held_remaining}")
        for order in Order.objects.filter(status__in=OPEN_STATUSES, held_remaining=0)[:20]:
            problems.append(f"order {order.id} is {order.status} and holds nothing")
        return Order.objects.count()

    def check_withdrawals(self, problems, lost) -> int:
        """Acknowledged withdrawals exist with their terms and are final as the decisions and cancels say, matching
        custody's books and the ledger; no request was applied twice, and none that was refused or never made.

        Every request names a fresh address, so a withdrawal is matched to its request by its address."""
        from apps.wallets.models import Withdrawal, WithdrawalStatus

        users = self.user_ids()
        decided = {}
        for record in self.approvers:
            for decision in record["decisions"]:
                if decision["outcome"] == "acknowledged":
                    decided[decision["withdrawal_id"]] = decision["decision"]
        checked = 0
        for record in self.traders:
            mine = list(Withdrawal.objects.filter(user_id=users[record["user"]]).select_related("asset"))
            by_address = {}
            for withdrawal in mine:
                by_address.setdefault(withdrawal.address, []).append(withdrawal)
            requests = {request["request"]["address"]: request for request in record["withdrawals"]}
            for address, found in by_address.items():
                request = requests.get(address)
                if request is None:
                    lost.append(f"withdrawal {found[0].id} that no request accounts for")
                elif len(found) > 1:
                    lost.append(
                        f"withdrawal request {request['key']} applied {len(found)} times: {[w.id for w in found]}"
                    )
                elif request["outcome"] == "refused":
                    lost.append(
                        f"withdrawal request {request['key']} was refused ({request.get('code')}) "
                        f"but applied as {found[0].id}"
                    )
            cancelled = {c["id"] for c in record["withdrawal_cancels"] if c["outcome"] == "acknowledged"}
            for address, request in requests.items():
                if request["outcome"] != "acknowledged":
                    continue
                checked += 1
                found = by_address.get(address, [])
                withdrawal = found[0] if len(found) == 1 else None
                if withdrawal is None or withdrawal.id != request["id"]:
                    lost.append(f"acknowledged withdrawal {request['id']} ({request['key']}) is not there as such")
                    continue
                body = request["request"]
                if (withdrawal.asset.code, amount_text(withdrawal.amount)) != (body["asset"], body["amount"]):
                    lost.append(f"withdrawal {withdrawal.id}: terms differ from the request")
                if withdrawal.id in cancelled and withdrawal.status != WithdrawalStatus.CANCELLED:
                    lost.append(f"withdrawal {withdrawal.id}: cancel acknowledged, yet it is {withdrawal.status}")
                decision = decided.get(withdrawal.id)
                if decision == "approve" and withdrawal.status not in (
                    WithdrawalStatus.COMPLETED,
                    WithdrawalStatus.FAILED,
                ):
                    lost.append(f"withdrawal {withdrawal.id}: approved but {withdrawal.status}")
                if decision == "reject" and withdrawal.status != WithdrawalStatus.REJECTED:
                    lost.append(f"withdrawal {withdrawal.id}: rejected but {withdrawal.status}")
            for withdrawal in mine:
                self._withdrawal_books(withdrawal, problems, lost)
        return checked

    @staticmethod
    def _withdrawal_books(withdrawal, problems, lost) -> None:
        """A withdrawal is final, and custody's books and the ledger's entries agree with its state."""
        from apps.ledger.models import JournalEntry
        from apps.wallets.custody.simulator.models import SimWithdrawal
        from apps.wallets.models import WITHDRAWAL_RELEASED, WithdrawalStatus

        keys = Counter(
            JournalEntry.objects.filter(idempotency_key__startswith=withdrawal.key("")).values_list(
                "idempotency_key", flat=True
            )
        )
        hold, complete, release = withdrawal.key("hold"), withdrawal.key("complete"), withdrawal.key("release")
        sent = SimWithdrawal.objects.filter(client_reference=str(withdrawal.id)).first()
        name = f"withdrawal {withdrawal.id} ({withdrawal.status})"
        if keys[hold] != 1:
            problems.append(f"{name}: {keys[hold]} hold entries")
        if withdrawal.status == WithdrawalStatus.COMPLETED:
            if sent is None or sent.status != "completed" or sent.amount != withdrawal.amount:
                lost.append(f"{name}: custody has {sent and (sent.status, sent.amount)}")
            if keys[complete] != 1 or keys[release]:
                problems.append(f"{name}: entries {dict(keys)}")
        elif withdrawal.status in WITHDRAWAL_RELEASED:
            if keys[release] != 1 or keys[complete]:
                problems.append(f"{name}: entries {dict(keys)}")
            if withdrawal.status == WithdrawalStatus.FAILED and sent is not None and sent.status != "failed":
                lost.append(f"{name}: failed here but {sent.status} at custody")
            if withdrawal.status in (WithdrawalStatus.REJECTED, WithdrawalStatus.CANCELLED) and sent is not None:
                lost.append(f"{name}: sent to custody although {withdrawal.status}")
        else:
            problems.append(f"{name}: not final after the drain")
