"""The demo traders' second factors (TOTP keys, hex): published like their passwords, for ``make run`` only.

Kept free of Django imports so that ``devtools/e2e.py`` computes the same codes as an authenticator.
"""

DEMO_TOTP_KEYS = {
    "alice": "bfb1e4c4b92f8477cd7bc39daf71376386fa4fca",
    "bob": "62d187edb964d94bbfe8dfa73400186e42a4ea6d",
}
