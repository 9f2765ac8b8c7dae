"""Soak with faults: a realistic mix through the real HTTP API, webhook and admin while processes die.

``make soak`` (``SOAK_DURATION=<seconds>``, default 300) or ``python -m bench.soak --duration N``
under ``python -m devtools.localservices exec --``. In a PostgreSQL database and a Celery queue
of its own (created here, dropped at the end) it starts, each in a process group of its own:

- a gunicorn web server (production settings, ``exchange.settings.soak``), and the streams:
  uvicorn serving the WebSockets and the stream relay (SIGKILLed among the faults);
- the matching engine (``ORDERS_ENGINE=sequencer``): an active ``manage.py run_engine --all`` and a
  standby waiting on the markets' advisory locks; the active one is SIGKILLed among the faults (the
  standby takes over, a new standby starts), and sequencers ended by terminated connections are
  started again;
- Celery worker processes (prefork pool), Celery beat (the sweeps every few seconds) and the
  simulated custody provider's delivery loop (``manage.py run_custody_simulator``);
- client processes: traders that log in through ``POST /api/v1/auth/token/``, fund themselves
  by deposits and then place limit and market orders, cancel orders, deposit, withdraw and
  cancel withdrawals through the REST API; as the custody provider they deliver their
  deposits' signed callbacks to the webhook out of order (the ``confirmed`` one often first),
  with duplicates, replays of the very same signed request and forged callbacks (bad
  signature, stale timestamp, tampered body); and an approver that signs in to the admin
  with a TOTP second factor and approves or rejects the withdrawals awaiting approval.

Once the traders are funded, the fault injector (this process) SIGKILLs whole Celery workers
(and starts new ones) and single pool processes (a worker credits the custody inbox in batches, so
kills land mid-batch; the inbox sweep finds what they left), terminates the application's database
connections (``pg_terminate_backend``), and restarts the web server, by SIGKILL or by SIGTERM.
Every kind of fault happens at least once, so a run lasts at least ``--duration`` and at least
one round of faults. The clients also lose a few answers on purpose: a small share of first
attempts of writes time out right after the request went out, so the server acts on a request
whose answer never arrives.

Clients behave like careful real clients: after a connection error, a timeout, a 5xx or a 429
they retry the same request (same ``Idempotency-Key`` and ``client_order_id``, same callback
``event_id``) for up to ``RETRY_WINDOW`` seconds. An operation is *acknowledged* when it was
answered 2xx (200/201), *refused* when answered with a definite 4xx, and *unknown* when no
definite answer came (or a retried cancel or decision was refused: the first attempt may have
applied it). Each client records what it did and what it was told.

Then everything is drained: clients stop, faults stop, the approver decides every withdrawal
still awaiting approval, and the run waits (bounded) until the custody inbox is processed, the
provider has delivered every callback and no withdrawal is in flight; then the services are
stopped and the outcome is read from the database:

- ``reconcile()`` passes (every invariant of DESIGN.md section 5);
- every callback answered 200 is in the inbox, processed; every deposit the provider
  confirmed is credited exactly once with its amount, to the owner of the address, and
  nothing else is credited; forged callbacks left no trace;
- every acknowledged order exists with the terms it was placed with, in a state consistent with
  what the API said (an acknowledged cancel left it cancelled; its fills add up to its filled
  quantity; one hold entry); every acknowledged withdrawal exists with its terms and is final
  (completed, failed, rejected or cancelled, as the acknowledged decisions and cancels say),
  matching the provider's books and the ledger's entries; each request (``Idempotency-Key``,
  ``client_order_id``) was applied at most once, and no order or withdrawal exists that no
  request accounts for;
- no ended order holds anything; no process is left running;
- each market's book kept from its depth stream (a thread per market, starting again from a fresh
  snapshot whenever its connection drops) equals the REST depth at the end (``stream_books``).

*Lost* counts what was acknowledged but is not reflected, and what was applied twice. Prints
JSON lines ``{"bench": "soak", "figure": ...}``: ``operations`` (attempted, acknowledged,
refused, unknown per kind; HTTP retries), ``faults`` (injected per kind), ``checks`` (each
check with what it covered and its problems) and ``result`` (``lost``, ``ok``). Exit status 1
when anything was lost, a check failed or a process was left running.
"""
