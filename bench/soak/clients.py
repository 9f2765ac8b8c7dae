"""The client processes: traders (the REST API, and the custody provider's side of their deposits) and the
approver (the back office's withdrawal approvals), and the entry point of such a process."""

from __future__ import annotations

import base64
import json
import random
import re
import secrets
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

from .common import (
    DEPOSIT_RANGE,
    FORGED_KINDS,
    FUNDING,
    REPLAY_KINDS,
    RETRY_WINDOW,
    TRADER_OPERATIONS,
    WITHDRAWAL_ASSETS,
    D,
    amount_text,
)
from .httpclient import Answer, Http, Outcomes

# The custody provider's side (client processes) ------------------------------------------------------


def provider_call(function, *, window: float = RETRY_WINDOW):
    """Run one call of the simulated provider (its own tables), again after a dropped database connection."""
    from django.db import DatabaseError, close_old_connections, connections

    deadline = time.monotonic() + window
    while True:
        close_old_connections()
        try:
            return function()
        except DatabaseError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# Clients -------------------------------------------------------------------------------------------


class Client:
    """What every client process shares: its configuration, HTTP session, counters and the stop files."""

    role = "client"
    drop_rate = 0.0  # share of first attempts of writes whose answer the client loses (times out on)

    def __init__(self, config: dict, index: int):
        self.config, self.index = config, index
        self.rng = random.Random(f"{config['seed']}-{self.role}-{index}")
        self.stats: Counter = Counter()
        self.outcomes = Outcomes()
        self.http = Http(config["base_url"], self.stats, self.rng, drop_rate=self.drop_rate)
        self.work_dir = Path(config["work_dir"])
        self.anomalies: list[str] = []

    def stopping(self) -> bool:
        """The orchestrator asked the clients to stop."""
        return (self.work_dir / "stop").exists()

    def result(self) -> dict:
        """The record the orchestrator reads afterwards."""
        return {
            "role": self.role,
            "index": self.index,
            "outcomes": self.outcomes.as_dict(),
            "http": dict(self.stats),
            "anomalies": self.anomalies,
        }


class Trader(Client):
    """A trader: the REST API with an API key, and the custody provider's side of the trader's deposits."""

    role = "trader"
    drop_rate = 0.03

    def __init__(self, config: dict, index: int):
        super().__init__(config, index)
        self.user = config["traders"][index]
        self.markets = config["markets"]
        self.orders: list[dict] = []
        self.open_orders: list[int] = []
        self.order_cancels: list[dict] = []
        self.withdrawals: list[dict] = []
        self.cancellable_withdrawals: list[int] = []
        self.withdrawal_cancels: list[dict] = []
        self.deposits: list[dict] = []
        self.callbacks: list[dict] = []
        self.forged: list[dict] = []
        self.addresses: dict[str, str] = {}
        self.sent: list[tuple[bytes, dict]] = []
        self.serial = 0

    # Setting up ---------------------------------------------------------------------------------

    def log_in(self) -> None:
        """Exchange the password and a one-time password for an API key that may trade and withdraw
        (``POST /auth/token/``), retrying until answered. A code is accepted once: when an attempt whose answer
        was lost used it, the retry is refused (``invalid_otp``) and the next time step's code is sent."""
        from django_otp.oath import totp

        for _ in range(3):
            step = int(time.time()) // 30
            body = {
                "username": self.user["username"],
                "password": self.user["password"],
                "scopes": ["read", "trade", "withdraw"],
                "otp": f"{totp(bytes.fromhex(self.user['otp_key'])):06d}",
            }
            try:
                answer = self._until_answered("log_in", "POST", "/api/v1/auth/token/", json_body=body)
            except RuntimeError as refused:
                if "invalid_otp" not in str(refused):
                    raise
                time.sleep(max(0.0, (step + 1) * 30 - time.time()) + 0.1)
                continue
            self.http.session.headers["Authorization"] = f"Token {answer.body['token']}"
            return
        raise RuntimeError("the one-time password was refused three times")

    def _until_answered(self, kind: str, method: str, path: str, **request) -> Answer:
        """A request the client cannot do without: retried for up to three windows; a refusal is fatal."""
        for _ in range(3):
            answer = self.http.call(method, path, **request)
            self.outcomes.record(kind, answer)
            if answer is not None and answer.ok:
                return answer
            if answer is not None:
                raise RuntimeError(f"{method} {path} refused: {answer.status} {answer.body}")
        raise RuntimeError(f"no answer to {method} {path} for {3 * RETRY_WINDOW} s")

    def deposit_address(self, asset: str) -> str:
        """The trader's deposit address for ``asset`` (``GET /deposit-address/{asset}/``, asked once)."""
        if asset not in self.addresses:
            answer = self._until_answered("deposit_address", "GET", f"/api/v1/deposit-address/{asset}/")
            self.addresses[asset] = answer.body["address"]
        return self.addresses[asset]

    def fund(self) -> None:
        """Deposit the starting funds (with one replay, one re-signed duplicate and one forged callback of each
        kind among them), then wait (bounded) until the balances show them."""
        for asset, amount in FUNDING.items():
            self.deposit(asset=asset, amount=amount, extras=False)
        for kind in REPLAY_KINDS:
            self._replay(kind)
        for kind in FORGED_KINDS:
            self._forge(kind, asset="BTC")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stopping():
            answer = self.http.call("GET", "/api/v1/balances/")
            if answer is not None and answer.ok:
                available = {row["asset"]: D(row["available"]) for row in answer.body}
                if all(available.get(asset, 0) >= amount for asset, amount in FUNDING.items()):
                    return
            time.sleep(0.5)

    # The mix ------------------------------------------------------------------------------------

    def run(self) -> None:
        """Log in, fund, say so (a ``ready-`` file), then run the mix until asked to stop."""
        self.log_in()
        self.fund()
        (self.work_dir / f"ready-trader-{self.index}").touch()
        operations, weights = zip(*TRADER_OPERATIONS.items(), strict=True)
        while not self.stopping():
            operation = self.rng.choices(operations, weights)[0]
            getattr(self, operation)()
            time.sleep(self.rng.uniform(0, 0.05))

    def next_id(self) -> str:
        """A new request id: the ``client_order_id`` / ``Idempotency-Key`` of one operation, unique in the run."""
        self.serial += 1
        return f"soak-{self.config['run']}-t{self.index}-{self.serial}-{uuid.uuid4().hex[:8]}"

    def _market(self) -> dict:
        return self.rng.choice(self.markets)

    def _place(self, kind: str, body: dict) -> None:
        from apps.orders.models import OPEN_STATUSES

        client_order_id = self.next_id()
        body = {**body, "client_order_id": client_order_id}
        answer = self.http.call("POST", "/api/v1/orders/", json_body=body, headers={"Idempotency-Key": client_order_id})
        outcome = self.outcomes.record(kind, answer)
        record = {"client_order_id": client_order_id, "request": body, "outcome": outcome}
        if outcome == "acknowledged":
            assert answer is not None  # acknowledged and refused outcomes come from an answer
            order = answer.body
            record.update(id=order["id"], status=order["status"], filled_qty=order["filled_qty"])
            if order["client_order_id"] != client_order_id:
                self.anomalies.append(
                    f"order {order['id']} acknowledged with client_order_id "
                    f"{order['client_order_id']!r}, not {client_order_id!r}"
                )
            if order["status"] in OPEN_STATUSES:
                self.open_orders.append(order["id"])
        elif outcome == "refused":
            assert answer is not None  # acknowledged and refused outcomes come from an answer
            record["code"] = answer.code
            if answer.code == "idempotency_conflict":
                self.anomalies.append(f"order {client_order_id}: a retry of the same request was a conflict")
        self.orders.append(record)

    def order_limit(self) -> None:
        """A limit order near the mid: mostly resting (GTC), some crossing, some IOC/FOK, some post-only."""
        market = self._market()
        mid, tick, step = D(market["mid"]), D(market["tick"]), D(market["step"])
        side = self.rng.choice(["buy", "sell"])
        offset = tick * self.rng.randint(-4, 15) * (-1 if side == "buy" else 1)  # negative offsets cross
        time_in_force = self.rng.choices(["GTC", "IOC", "FOK"], [8, 1, 1])[0]
        body = {
            "market": market["symbol"],
            "side": side,
            "type": "limit",
            "price": amount_text(mid + offset),
            "qty": amount_text(step * self.rng.randint(market["min_steps"], market["max_steps"])),
            "time_in_force": time_in_force,
            "post_only": time_in_force == "GTC" and self.rng.random() < 0.1,
        }
        self._place("order_limit", body)

    def order_market(self) -> None:
        """A market order: a buy by quote budget or by quantity, or a sell by quantity."""
        market = self._market()
        step = D(market["step"])
        kind = self.rng.choice(["budget", "buy", "sell"])
        body = {
            "market": market["symbol"],
            "type": "market",
            "time_in_force": "IOC",
            "side": "sell" if kind == "sell" else "buy",
        }
        if kind == "budget":
            body["quote_qty"] = amount_text(D(self.rng.randint(20, 2000)))
        else:
            body["qty"] = amount_text(step * self.rng.randint(market["min_steps"], market["max_steps"] // 2))
        self._place("order_market", body)

    def order_cancel(self) -> None:
        """Cancel one of the trader's orders believed open (``DELETE /orders/{id}/``)."""
        if not self.open_orders:
            return self.order_limit()
        order_id = self.open_orders.pop(self.rng.randrange(len(self.open_orders)))
        answer = self.http.call("DELETE", f"/api/v1/orders/{order_id}/")
        outcome = self._cancel_outcome("order_cancel", answer, f"order {order_id}")
        self.order_cancels.append(
            {
                "id": order_id,
                "outcome": outcome,
                "status": answer.body.get("status") if answer is not None and outcome == "acknowledged" else None,
            }
        )

    def _cancel_outcome(self, kind: str, answer: Answer | None, what: str) -> str:
        """Count a cancel: a 409 after a retry is unknown (an earlier attempt may have cancelled it before its
        answer was lost); a refusal other than ``invalid_state`` is an anomaly."""
        if answer is not None and not answer.ok and answer.attempts > 1 and answer.code == "invalid_state":
            return self.outcomes.count(kind, "unknown")
        outcome = self.outcomes.record(kind, answer)
        if outcome == "refused" and answer is not None and answer.code != "invalid_state":
            self.anomalies.append(f"cancel of {what} refused with {answer.status} {answer.code}")
        return outcome

    def read(self) -> None:
        """Read-only calls a trader's screen makes: balances, open orders, deposits, fills."""
        path = self.rng.choice(
            [
                "/api/v1/balances/",
                "/api/v1/orders/?status=open",
                "/api/v1/deposits/",
                "/api/v1/trades/",
                "/api/v1/withdrawals/",
            ]
        )
        self.outcomes.record("read", self.http.call("GET", path))

    # Withdrawals --------------------------------------------------------------------------------

    def withdrawal(self) -> None:
        """Request a withdrawal to a fresh address of the trader's address book: half small (approved at once),
        half for an approver."""
        from apps.wallets.models import WithdrawalStatus

        asset = self.rng.choice(WITHDRAWAL_ASSETS)
        unused = self.user["withdrawal_addresses"][asset]
        if not unused:
            return self.read()
        limits = self.config["assets"][asset]
        minimum, auto = D(limits["min_withdrawal"]), D(limits["auto_approve"])
        quantum = D(1).scaleb(-min(limits["decimals"], 4))
        if self.rng.random() < 0.5:
            amount = minimum + quantum * self.rng.randint(0, int((auto - minimum) / quantum))
        else:
            amount = auto + quantum * self.rng.randint(1, int(2 * auto / quantum))
        key = self.next_id()
        address = unused.pop()
        body = {"asset": asset, "amount": amount_text(amount), "address": address}
        answer = self.http.call("POST", "/api/v1/withdrawals/", json_body=body, headers={"Idempotency-Key": key})
        outcome = self.outcomes.record("withdrawal", answer)
        record = {"key": key, "request": body, "outcome": outcome}
        if outcome == "acknowledged":
            assert answer is not None  # acknowledged and refused outcomes come from an answer
            record.update(id=answer.body["id"], status=answer.body["status"])
            if answer.body["status"] == WithdrawalStatus.AWAITING_APPROVAL:
                self.cancellable_withdrawals.append(answer.body["id"])
                if self.rng.random() < 0.2:
                    self.withdrawals.append(record)
                    return self.withdrawal_cancel()  # changed their mind at once, racing the approver
        elif outcome == "refused":
            assert answer is not None  # acknowledged and refused outcomes come from an answer
            record["code"] = answer.code
            if answer.code == "idempotency_conflict":
                self.anomalies.append(f"withdrawal {key}: a retry of the same request was a conflict")
        self.withdrawals.append(record)

    def withdrawal_cancel(self) -> None:
        """Cancel a withdrawal that was awaiting approval (the approver may decide first: then 409)."""
        if not self.cancellable_withdrawals:
            return self.withdrawal()
        withdrawal_id = self.cancellable_withdrawals.pop()  # the latest: the approver may not have seen it yet
        answer = self.http.call("DELETE", f"/api/v1/withdrawals/{withdrawal_id}/")
        outcome = self._cancel_outcome("withdrawal_cancel", answer, f"withdrawal {withdrawal_id}")
        self.withdrawal_cancels.append({"id": withdrawal_id, "outcome": outcome})

    # Deposits: the custody provider's side ------------------------------------------------------

    def deposit(self, *, asset: str | None = None, amount: Decimal | None = None, extras: bool = True) -> None:
        """Coins arrive at the trader's address at the provider, which reports them to the webhook out of order;
        with ``extras``, now and then a duplicate (a replay) and a forged callback alongside."""
        from apps.wallets.custody.simulator.models import SimCallback, SimDeposit
        from apps.wallets.custody.simulator.provider import SimulatedCustody

        asset = asset or self.rng.choice(list(DEPOSIT_RANGE))
        if amount is None:
            low, high = DEPOSIT_RANGE[asset]
            amount = (low + (high - low) * D(self.rng.random())).quantize(D("0.0001"))
        address = self.deposit_address(asset)
        txid = self.next_id().replace("soak-", "tx-")
        custody = SimulatedCustody()

        def receive():
            existing = SimDeposit.objects.filter(txid=txid).first()  # a retry after a lost commit
            return existing or custody.deposit_receive(address=address, amount=amount, txid=txid, delay=0)

        received = provider_call(receive)
        self.deposits.append(
            {"txid": txid, "vout": 0, "asset": asset, "amount": amount_text(amount), "address": address}
        )
        callbacks = provider_call(
            lambda: list(
                SimCallback.objects.filter(deposit=received).order_by("id").values_list("pk", "event_id", "payload")
            )
        )
        order = self.rng.choices(["confirmed_first", "shuffled", "in_order"], [4, 4, 2])[0]
        if order == "confirmed_first":
            callbacks.reverse()
        elif order == "shuffled":
            self.rng.shuffle(callbacks)
        for pk, event_id, payload in callbacks:
            record = {
                "event_id": event_id,
                "txid": txid,
                "status": payload["status"],
                "confirmations": payload["confirmations"],
                "kind": "delivery",
                "answers": [],
            }
            self.callbacks.append(record)
            provider_call(
                lambda pk=pk, record=record: custody.callbacks_deliver_due(callback_ids=[pk], send=self._sender(record))
            )
            self.stats[f"deposit_callbacks_{order}"] += 1
        if extras and self.rng.random() < 0.5:
            self._replay(self.rng.choice(REPLAY_KINDS))
        if extras and self.rng.random() < 0.15:
            self._forge(self.rng.choice(FORGED_KINDS), asset=asset)

    def _post_callback(self, kind: str, body: bytes, headers: dict, window: float = RETRY_WINDOW) -> Answer | None:
        answer = self.http.call("POST", "/custody/callbacks/", data=body, headers=headers, window=window)
        self.outcomes.record(kind, answer)
        return answer

    def _sender(self, record: dict):
        """The provider's ``send(body, headers)``: POST it (retrying until answered), remember the request."""

        def send(body: bytes, headers) -> int | None:
            headers = dict(headers)
            answer = self._post_callback("callback", body, headers)
            record["answers"].append(answer.status if answer else None)
            self.sent.append((body, headers))
            self.sent = self.sent[-20:]
            return answer.status if answer else None

        return send

    def _replay(self, kind: str) -> None:
        """Send an earlier callback again: the very same signed request (``replay``), or the same body signed
        anew (``resigned``)."""
        from apps.wallets.custody.signing import signed_headers

        if not self.sent:
            return
        body, headers = self.rng.choice(self.sent)
        if kind == "resigned":
            headers = signed_headers(secret=self.config["webhook_secret"], body=body)
        payload = json.loads(body)
        record = {
            "event_id": payload["event_id"],
            "txid": payload["txid"],
            "status": payload["status"],
            "confirmations": payload.get("confirmations"),
            "kind": kind,
            "answers": [],
        }
        answer = self._post_callback(f"callback_{kind}", body, headers)
        record["answers"].append(answer.status if answer else None)
        self.callbacks.append(record)
        if answer is not None and answer.status != 200:  # a duplicate is answered 200, and stored once
            self.anomalies.append(f"a {kind} of callback {payload['event_id']} answered {answer.status}")

    def _forge(self, kind: str, *, asset: str) -> None:
        """A callback the webhook must refuse (401) and forget: a wrong secret (``bad_signature``), a stale
        timestamp (``stale_timestamp``), or a real callback's signature over a tampered body (``tampered_body``)."""
        from apps.wallets.custody.signing import signed_headers
        from apps.wallets.models import CustodyEventStatus

        address = self.deposit_address(asset)
        secret = self.config["webhook_secret"]
        txid = self.next_id().replace("soak-", "forged-")
        payload = {
            "event_id": uuid.uuid4().hex,
            "type": "deposit",
            "asset": asset,
            "address": address,
            "amount": "1000",
            "txid": txid,
            "vout": 0,
            "confirmations": 5,
            "status": CustodyEventStatus.CONFIRMED,
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        if kind == "bad_signature":
            headers = signed_headers(secret=secrets.token_hex(32), body=body)
        elif kind == "stale_timestamp":
            headers = signed_headers(secret=secret, body=body, timestamp=int(time.time()) - 3600)
        else:
            if not self.sent:
                return
            original, headers = self.rng.choice(self.sent)
            tampered = json.loads(original)
            tampered["amount"] = amount_text(D(tampered["amount"]) * 100)
            body = json.dumps(tampered, separators=(",", ":")).encode()
            payload = tampered
        answer = self._post_callback("forged_callback", body, headers)
        self.forged.append(
            {
                "kind": kind,
                "event_id": payload["event_id"],
                "txid": payload["txid"],
                "amount": payload["amount"],
                "answer": answer.status if answer else None,
            }
        )
        if answer is not None and answer.status != 401:
            self.anomalies.append(f"forged callback ({kind}) answered {answer.status}")

    def result(self) -> dict:
        """The trader's record: what it asked for and what it was told, operation by operation."""
        return {
            **super().result(),
            "user": self.user["username"],
            "orders": self.orders,
            "order_cancels": self.order_cancels,
            "withdrawals": self.withdrawals,
            "withdrawal_cancels": self.withdrawal_cancels,
            "deposits": self.deposits,
            "callbacks": self.callbacks,
            "forged": self.forged,
        }


class Approver(Client):
    """An approver in the back office: signs in with password and TOTP, approves or rejects the queue.

    Its browser sits where the TLS-terminating proxy would, so it keeps the cookies itself: the
    production settings mark them secure, and a cookie jar would not send them over plain HTTP.
    """

    role = "approver"
    drop_rate = 0.05
    QUEUE = "backoffice/withdrawalapproval/"

    def __init__(self, config: dict, index: int):
        super().__init__(config, index)
        self.user = config["approver"]
        self.admin = "/" + config["admin_url"]
        self.cookies: dict[str, str] = {}
        self.totp_key: str | None = None
        self.last_step = -1
        self.decisions: list[dict] = []

    def _keep_cookies(self, response) -> None:
        from http.cookies import SimpleCookie

        for header in response.raw.headers.getlist("Set-Cookie"):
            for name, morsel in SimpleCookie(header).items():
                if morsel.value and morsel["max-age"] not in ("0", 0):
                    self.cookies[name] = morsel.value
                else:
                    self.cookies.pop(name, None)
        self.http.session.cookies.clear()

    def request(self, method: str, path: str, form: dict | None = None) -> Answer | None:
        """One admin request with the approver's cookies, following redirects by hand; ``None`` if unanswered."""
        attempts = 0  # of the first request: a POST retried may have been applied by an earlier attempt
        for _ in range(10):
            headers = {
                "Cookie": "; ".join(f"{name}={value}" for name, value in self.cookies.items()),
                "Referer": self.config["base_url"] + path,
            }
            data = None if form is None else {**form, "csrfmiddlewaretoken": self.cookies.get("csrftoken", "")}
            answer = self.http.call(method, path, data=data, headers=headers, on_response=self._keep_cookies)
            if answer is None:
                return None
            attempts = attempts or answer.attempts
            if answer.status not in (301, 302, 303):
                answer.attempts = attempts
                return answer
            method, form, path = "GET", None, answer.location.removeprefix(self.config["base_url"])
        raise RuntimeError(f"too many redirects from {path}")

    def _get(self, path: str) -> Answer:
        for _ in range(3):
            answer = self.request("GET", path)
            if answer is not None:
                return answer
        raise RuntimeError(f"no answer to GET {path} for {3 * RETRY_WINDOW} s")

    def _post_form(self, path: str, form: dict) -> Answer | None:
        return self.request("POST", path, form)

    def _is_queue(self, answer: Answer) -> bool:
        return isinstance(answer.body, str) and 'id="changelist"' in answer.body

    def sign_in(self) -> None:
        """Log in to the admin (the site's two-step log-in: the password, then the authenticator's code once one is
        enrolled), enrol the TOTP second factor the first time and confirm it."""
        page = self._get(self.admin + self.QUEUE)
        for _ in range(20):
            if self._is_queue(page):
                self.stats["admin_sign_ins"] += 1
                return
            if 'name="password"' in page.body:
                form = {"username": self.user["username"], "password": self.user["password"]}
                answer = self._post_form("/accounts/login/", {**form, "next": self.admin + self.QUEUE})
            elif 'name="otp"' in page.body:  # the log-in's second step
                answer = self._post_form("/accounts/login/second-factor/", {"otp": self._code()})
            elif 'name="token"' in page.body:  # the admin's enrolment, or its confirmation in this session
                found = re.search(r'id="totp-secret"[^>]*>([A-Z2-7]+=*)<', page.body)  # base32, as the page shows it
                if found:
                    self.totp_key = found.group(1)
                answer = self._post_form(
                    self.admin + "second-factor/?next=" + self.admin + self.QUEUE, {"token": self._code()}
                )
            else:
                raise RuntimeError(f"unexpected admin page: {page.status} {page.body[:300]}")
            page = answer if answer is not None else self._get(self.admin + self.QUEUE)
        raise RuntimeError("could not sign in to the back office")

    def _code(self) -> str:
        """A code of the approver's authenticator not used yet (a code is accepted once: waits for the next step)."""
        from django_otp.oath import totp

        if self.totp_key is None:
            raise RuntimeError("the second factor is enrolled, but its key was never shown to this approver")
        step = int(time.time()) // 30
        if step == self.last_step:
            time.sleep(30 - time.time() % 30 + 0.2)
            step = int(time.time()) // 30
        self.last_step = step
        return f"{totp(base64.b32decode(self.totp_key), step=30, t0=0, digits=6):06d}"

    def queue(self) -> list[int]:
        """The withdrawal ids the approval queue lists."""
        while True:
            page = self._get(self.admin + self.QUEUE)
            if self._is_queue(page):
                pattern = re.escape(self.admin + self.QUEUE) + r"(\d+)/change/"
                return sorted({int(found) for found in re.findall(pattern, page.body)})
            self.sign_in()

    def decide(self, withdrawal_id: int) -> None:
        """Approve (most) or reject one withdrawal through the admin; read the outcome from the message."""
        decision = self.rng.choices(["approve", "reject"], [7, 3])[0]
        path = f"{self.admin}{self.QUEUE}{withdrawal_id}/decide/"
        form = {"decision": decision, "reason": "soak: rejected by the approver" if decision == "reject" else ""}
        answer = self._post_form(path, form)
        done = f"Withdrawal #{withdrawal_id} {'approved' if decision == 'approve' else 'rejected'}."
        code = ""
        if answer is None or not answer.ok:
            outcome, code = ("unknown", "") if answer is None else ("refused", answer.code)
            if answer is not None:
                self.anomalies.append(f"decision on withdrawal {withdrawal_id} answered {answer.status}")
        elif not self._is_queue(answer):
            outcome = "unknown"  # the session was lost: sign in again, decide again later
            self.sign_in()
        elif done in answer.body:
            outcome = "acknowledged"
        else:
            # "Withdrawal #19 is cancelled; it cannot become approved." or "Withdrawal #19 is already approved."
            failed = re.search(rf"Withdrawal #{withdrawal_id}:? ([^<]*)<", answer.body)
            outcome, code = "refused", "invalid_state"
            if failed is None or not re.search(r"cannot become|is already", failed.group(1)):
                self.anomalies.append(f"decision on withdrawal {withdrawal_id}: {failed and failed.group(1)}")
            elif answer.attempts > 1:
                outcome = "unknown"  # our own earlier attempt may have applied it
        self.outcomes.count("decision", outcome, code)
        self.decisions.append({"withdrawal_id": withdrawal_id, "decision": decision, "outcome": outcome})

    def run(self) -> None:
        """Decide the queue until asked to stop; then, once the traders are done, until it is empty."""
        self.sign_in()
        while True:
            drained = (self.work_dir / "traders-done").exists()
            waiting = self.queue()
            if not waiting and drained:
                return
            for withdrawal_id in waiting:
                self.decide(withdrawal_id)
            time.sleep(0.2 if drained else self.rng.uniform(0.3, 1.0))

    def result(self) -> dict:
        """The approver's record: each decision and its outcome."""
        return {**super().result(), "user": self.user["username"], "decisions": self.decisions}


def client_main(role: str, index: int, config_path: Path) -> int:
    """Entry point of a client process: run the role, then write its record next to the configuration."""
    config = json.loads(config_path.read_text())
    import django

    django.setup()
    client = Trader(config, index) if role == "trader" else Approver(config, index)
    failure = None
    try:
        client.run()
    except Exception as exc:  # recorded: the orchestrator reports a client that failed
        failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        record = {**client.result(), "failure": failure}
        out = config_path.parent / f"{role}-{index}.json"
        out.with_suffix(".tmp").write_text(json.dumps(record, default=str))
        out.with_suffix(".tmp").rename(out)
    return 0
