"""What every app shares and no app owns: the domain's error base and address validation (no models, no
Django app; imports no app)."""
