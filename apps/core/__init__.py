"""What every app shares and no app owns: the domain's error base (no models, no Django app)."""
