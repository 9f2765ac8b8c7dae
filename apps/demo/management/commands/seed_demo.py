"""``manage.py seed_demo``: idempotent demo data (API.md); prints the demo logins."""

import base64

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.demo.credentials import DEMO_TOTP_KEYS
from apps.demo.seed import USERS, seed_demo
from apps.wallets.custody.simulator.required import simulated_custody_required


class Command(BaseCommand):
    help = "Create the demo assets, markets and users and fund them through the simulated custody (idempotent)."

    def handle(self, *args, **options):
        simulated_custody_required("seed_demo")
        new = seed_demo()
        self.stdout.write(f"Demo data ready ({new} new deposits on their way through the simulated custody).")
        self.stdout.write("Demo logins (username / password, role):")
        for demo in USERS:
            self.stdout.write(f"  {demo.username:<12} {demo.password:<24} {demo.role}")
        for username, key in DEMO_TOTP_KEYS.items():
            secret = base64.b32encode(bytes.fromhex(key)).decode()
            self.stdout.write(f"  {username}'s authenticator (TOTP, for withdraw API keys): {secret}")
        self.stdout.write(f"Back office: /{settings.ADMIN_URL} (approvers enrol a one-time password on first visit)")
